"""Where presets live, and how a name or path is resolved to a preset file.

Presets are TOML files in the top-level folders `models/`, `hardware_profiles/`, `scenarios/` and `stacks/`
of the repository. A non-editable install copies them into `simulator/presets/<kind>/` (see
setup.cfg), so both places are searched: the installed copy first, then the source checkout.
"""
from __future__ import annotations

import difflib
import errno
import os
import stat
import tomllib
from pathlib import Path

from ..errors import InputError

# Tables and arrays nested deeper than this in a TOML file are refused (no parasim file needs more than 4;
# a deeper value would only reach a message printing it, whose recursion it could exhaust).
MAX_DEPTH = 32
KINDS = ("models", "hardware_profiles", "scenarios", "stacks")
_PKG = Path(__file__).resolve().parent.parent


def preset_dir(kind: str) -> Path:
    """The folder holding presets of `kind` (one of KINDS)."""
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
        problem = file_problem(p, shown=str(name_or_path))
        if problem:
            raise InputError(problem)
        return p
    cand = preset_dir(kind) / f"{name_or_path}.toml"
    if not file_problem(cand):
        return cand
    names = preset_names(kind)
    close = difflib.get_close_matches(str(name_or_path), names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(names)}"
    label = {"models": "model", "hardware_profiles": "hardware", "scenarios": "scenario", "stacks": "stack"}[kind]
    raise InputError(f"unknown {label} preset {name_or_path!r}{hint}")


def resolve_named(kind: str, name_or_path: str, label: str) -> Path:
    """`resolve`, its InputError (an unknown preset, a missing file) naming `label` first: the flag or the file's
    key the name was given with (`--stack: unknown stack preset 'foo'; ...`)."""
    try:
        return resolve(kind, name_or_path)
    except InputError as exc:
        raise InputError(f"{label}: {exc}") from None


def file_problem(path: Path, *, shown: str | None = None) -> str:
    """Why `path` cannot be read as a text file, as one message naming it (`shown`, default the path), or
    '' when it can: the one wording of each file error. Only a regular file passes, so a FIFO or a device
    is never opened (a read of it could wait for ever)."""
    shown = str(path) if shown is None else shown
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return f"file not found: {shown}"
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return f"file name too long ({len(shown)} characters): {shown}"
        return f"cannot read {shown}: {exc.strerror or exc}"
    except ValueError:  # a NUL in the name
        return f"file not found: {shown!r}"
    if stat.S_ISDIR(st.st_mode):
        return f"not a file: {shown} (a directory)"
    if not stat.S_ISREG(st.st_mode):
        return f"not a file: {shown} (not a regular file)"
    if not os.access(path, os.R_OK):
        return f"cannot read {shown}: permission denied"
    return ""


def read_text(path: Path | str) -> str:
    """The UTF-8 text of a file; InputError (`file_problem`, or one line naming the file and the first
    byte that is not UTF-8) otherwise. Every spec file (TOML, config.json) is read through here."""
    path = Path(path)
    problem = file_problem(path)
    if problem:
        raise InputError(problem)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        what = ("UTF-16 text" if data[:2] in (b"\xff\xfe", b"\xfe\xff")
                else f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})")
        raise InputError(f"{path} is {what}; save it as UTF-8") from None


TOO_LONG = "{where}: a number in it is too long to read (over 4300 digits)"


def parse_json(text: str, where, *, hook=None):
    """`text` parsed as JSON (`hook`: json's object_pairs_hook); a syntax error, a number longer than Python's int
    conversion takes (4300 digits) or too deep a nesting is one InputError line naming `where` (an InputError the
    hook raises passes through)."""
    import json

    try:
        return json.loads(text, object_pairs_hook=hook)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON in {where}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except InputError:
        raise
    except ValueError:
        raise InputError(TOO_LONG.format(where=where)) from None
    except RecursionError:  # json recurses once per nesting level
        raise InputError(f"{where}: JSON nested too deeply") from None


def read_toml(path: Path | str) -> dict:
    """Parse a TOML file (`read_text`); a syntax error becomes one InputError line naming the file and line,
    a document nested deeper than MAX_DEPTH one naming the file and the key."""
    path = Path(path)
    text = read_text(path)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"malformed TOML in {path}: {exc}") from None
    except ValueError:  # (an integer literal longer than Python's int conversion takes: 4300 digits)
        raise InputError(TOO_LONG.format(where=path)) from None
    except RecursionError:  # tomllib recurses once per nesting level
        doc, deep = None, ""
    else:
        deep = _too_deep(doc)
    if doc is None or deep is not None:
        raise InputError(f"TOML in {path} is nested more than {MAX_DEPTH} levels deep"
                         + (f" (key {deep!r})" if deep else ""))
    return doc


def _too_deep(doc: dict) -> str | None:
    """The section.key (first two levels) holding a value nested deeper than MAX_DEPTH, else None."""
    todo = [(doc, 0, "")]
    while todo:
        value, depth, where = todo.pop()
        if depth > MAX_DEPTH:
            return where
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for k, v in items:
            if isinstance(v, (dict, list)):
                key = where if isinstance(k, int) or where.count(".") else f"{where}.{k}".lstrip(".")
                todo.append((v, depth + 1, key))
    return None


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
