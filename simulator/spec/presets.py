"""Where presets live, and how a name or path is resolved to a preset file.

Presets are TOML files in the top-level folders `models/`, `hardware_profiles/` and `scenarios/`
of the repository. A non-editable install copies them into `simulator/presets/<kind>/` (see
setup.cfg), so both places are searched: the installed copy first, then the source checkout.
"""
from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

from ..errors import InputError

KINDS = ("models", "hardware_profiles", "scenarios")
_PKG = Path(__file__).resolve().parent.parent


def preset_dir(kind: str) -> Path:
    """The folder holding presets of `kind` ('models', 'hardware_profiles' or 'scenarios')."""
    assert kind in KINDS, kind
    installed = _PKG / "presets" / kind
    if installed.is_dir():
        return installed
    return _PKG.parent / kind


def preset_names(kind: str) -> list[str]:
    """Sorted names (file stems) of the presets of `kind`."""
    d = preset_dir(kind)
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


def resolve(kind: str, name_or_path: str) -> Path:
    """Path of the preset `name_or_path`: an existing file path, or a preset name of `kind`.

    Raises InputError naming the closest preset names when nothing matches.
    """
    p = Path(name_or_path)
    if p.suffix in (".toml", ".json") or "/" in str(name_or_path):
        if not p.is_file():
            raise InputError(f"file not found: {name_or_path}")
        return p
    cand = preset_dir(kind) / f"{name_or_path}.toml"
    if cand.is_file():
        return cand
    names = preset_names(kind)
    close = difflib.get_close_matches(str(name_or_path), names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(names)}"
    label = {"models": "model", "hardware_profiles": "hardware", "scenarios": "scenario"}[kind]
    raise InputError(f"unknown {label} preset {name_or_path!r}{hint}")


def read_toml(path: Path | str) -> dict:
    """Parse a TOML file; a syntax error becomes one InputError line naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise InputError(f"not a file: {path}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"malformed TOML in {path}: {exc}") from None


def check_keys(table: dict, *, where: str, required=(), optional=()) -> None:
    """Reject unknown and missing keys of a loaded table, naming them (STYLE.md point 1)."""
    allowed = set(required) | set(optional)
    unknown = [k for k in table if k not in allowed]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(allowed), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"unknown key {unknown[0]!r} in {where}{hint}")
    missing = [k for k in required if k not in table]
    if missing:
        raise InputError(f"missing key {missing[0]!r} in {where}")
