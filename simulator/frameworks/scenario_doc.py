"""The scenario an importer builds: a plain dict in docs/scenarios.md's format, written as TOML and
checked by loading it exactly as `parasim estimate` would (spec/scenario.py)."""
from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

from ..errors import InputError

SECTION_ORDER = ("model", "hardware", "training", "layout", "stack")


def toml_value(v) -> str:
    """One TOML value: bool, int, float, string, or a list of those."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        assert math.isfinite(v), v
        return repr(v) if v != int(v) or abs(v) >= 1e16 else f"{v:.1f}"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise AssertionError(f"not a TOML value: {v!r}")


def toml_text(doc: dict, comments: list[str] = ()) -> str:
    """`doc` (top-level scalars, then one table per section) as TOML, `comments` first as # lines."""
    lines = [f"# {c}" for line in comments for c in line.splitlines()]
    lines += [f"{k} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    sections = [k for k in SECTION_ORDER if k in doc] + [k for k, v in doc.items()
                                                          if isinstance(v, dict) and k not in SECTION_ORDER]
    for sec in sections:
        lines += ["", f"[{sec}]"] + [f"{k} = {toml_value(v)}" for k, v in doc[sec].items() if v is not None]
    return "\n".join(lines) + "\n"


def with_paths_from(doc: dict, out: str | None) -> dict:
    """`doc` with its [model] hf_config written relative to the folder of `out` (the scenario file,
    from which load_scenario reads it), or absolute when the scenario goes to stdout."""
    model = doc.get("model", {})
    if "hf_config" not in model:
        return doc
    p = Path(model["hf_config"]).resolve()
    path = os.path.relpath(p, Path(out).resolve().parent) if out else str(p)
    if path.startswith(".."):  # outside the scenario's folder: absolute
        path = str(p)
    return {**doc, "model": {**model, "hf_config": path}}


def check_scenario(doc: dict, source: str):
    """Load `doc` as a scenario file (absolute paths) and return the Scenario; an InputError says it came
    from `source` (the imported configuration)."""
    from ..spec.scenario import load_scenario

    fd, tmp = tempfile.mkstemp(suffix=".toml", prefix="parasim-import-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(toml_text(with_paths_from(doc, None)))
        try:
            return load_scenario(tmp)
        except InputError as exc:
            msg = str(exc).splitlines()[0].replace(tmp, "the imported scenario")
            raise InputError(f"{source}: the job it describes is not a valid parasim scenario: {msg}") from None
    finally:
        os.unlink(tmp)
