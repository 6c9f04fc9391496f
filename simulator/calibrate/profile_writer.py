"""Write a measured hardware profile: a copy of a base preset with fitted `[efficiency.*]` tables
and a `[provenance]` section (device, versions, date, protocol), in the schema of
`simulator.spec.hardware` (read back by `load_hardware(path)`).

TOML is written by hand (a small subset: strings, booleans, ints, floats, arrays of scalars, nested
tables) so the package needs no TOML writer; `tomllib` reading the text back must give the same
dict (tests/test_calibrate_profile.py checks the round trip).
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Mapping

from ..errors import InputError
from .fit import CurveFit

__all__ = ["dumps_toml", "measured_profile_dict", "write_profile", "base_profile_dict", "cpu_base_profile_dict"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else _str(k)


def _str(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise InputError(f"cannot write non-finite number {v!r} to a profile")
        r = repr(v)
        return r if ("." in r or "e" in r or "E" in r) else r + ".0"
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    raise InputError(f"cannot write a value of type {type(v).__name__} to a profile")


def dumps_toml(d: Mapping) -> str:
    """TOML text of a nested mapping: scalars of a table first, then its sub-tables as `[a.b]`."""
    lines: list[str] = []

    def emit(table: Mapping, path: list[str]):
        scal = [(k, v) for k, v in table.items() if not isinstance(v, Mapping)]
        subs = [(k, v) for k, v in table.items() if isinstance(v, Mapping)]
        if path and (scal or not subs):
            if lines:
                lines.append("")
            lines.append("[" + ".".join(_key(p) for p in path) + "]")
        for k, v in scal:
            lines.append(f"{_key(k)} = {_scalar(v)}")
        for k, v in subs:
            emit(v, path + [k])

    emit(d, [])
    return "\n".join(lines) + "\n"


def base_profile_dict(name_or_path: str) -> dict:
    """The raw TOML table of a hardware preset (name) or profile file (path), as `tomllib` reads it."""
    from ..spec.presets import read_toml, resolve

    return read_toml(resolve("hardware_profiles", name_or_path))


def cpu_base_profile_dict(*, name: str, device: str, peak_flops_per_s: Mapping[str, float], memory_bytes: float,
                          memory_bytes_per_s: float) -> dict:
    """A base profile for a CPU host, built from measured numbers (no datasheet applies).

    Peak FLOP/s per dtype = the highest GEMM rate measured, memory bandwidth = the highest copy rate
    measured, so CPU efficiencies are achieved / best measured. A CPU host has no NVLink or NIC:
    the node/network numbers are the memory bandwidth and the interconnect tables are filled by the
    caller (collective microbenchmarks through torch.distributed/gloo when run, else marked as not
    measured). Only for testing the calibration harness and for CPU-run comparisons.
    """
    gbps = memory_bytes_per_s / 1e9
    return {
        "name": name,
        "description": f"measured CPU host profile ({device}); peaks are the best measured rates",
        "gpu": {"model": device, "hbm_gb": memory_bytes / 1e9, "hbm_gb_per_s": gbps,
                "peak_tflops": {**{k: v / 1e12 for k, v in peak_flops_per_s.items()},
                                "source": "measured: highest GEMM rate of this calibration run"},
                "source": "measured on this host by parasim calibrate (memory: host RAM size; bandwidth: best copy rate)"},
        "node": {"gpus_per_node": 1, "nvlink_gb_per_s": gbps, "nvls": False, "nvlink_latency_us": 0.0,
                 "source": "CPU host: no scale-up link; the memory system stands in for it"},
        "network": {"nics_per_node": 1, "nic_gbit_per_s": gbps * 8, "ib_latency_us": 0.0, "nodes_per_leaf": 1,
                    "leaf_oversubscription": 1.0, "source": "CPU host: no scale-out network measured"},
        "efficiency": {},
    }


def _curve_table(fit: CurveFit) -> dict:
    return {"x": [float(v) for v in fit.x], "efficiency": [round(float(v), 6) for v in fit.efficiency],
            "x_unit": fit.x_unit,
            "source": f"{fit.source}; fitted to {fit.n_points} points, rms relative residual "
                      f"{fit.rms_relative_error:.3g}, max {fit.max_relative_error:.3g}"}


def measured_profile_dict(base: Mapping, fits: Mapping[str, CurveFit], *, name: str, provenance: Mapping,
                          description: str | None = None) -> dict:
    """Copy of `base` with `name`, the fitted `[efficiency.<table>]` replaced/added and `[provenance]` set.

    Tables of the base that were not measured are kept and keep their own `source`, except the base's
    per-kernel and per-head-dim attention tables when attention was measured: a stack reads
    `attention_<kernel>` before the generic table (cost/attention.py), so a kept published table would
    hide the measurement; the measured SDPA kernel stands for every attention kernel in that profile.
    """
    import copy

    d = copy.deepcopy(dict(base))
    d["name"] = name
    if description is not None:
        d["description"] = description
    eff = dict(d.get("efficiency", {}))
    if "attention" in fits:  # the measured kernel replaces the base's per-kernel and per-head-dim tables,
        eff = {k: v for k, v in eff.items() if not re.fullmatch(r"attention(_bwd)?_[\w-]+", k)}  # which would shadow it
    for tname, fit in fits.items():
        eff[tname] = _curve_table(fit)
    d["efficiency"] = eff
    d["provenance"] = dict(provenance)
    # keep the loader's key order: provenance after efficiency is fine (TOML tables are unordered)
    return d


def write_profile(path: str | Path, profile: Mapping) -> Path:
    """Write `profile` as TOML to `path` (folders created); validate it by loading it back."""
    from ..spec.hardware import hardware_from_dict

    text = "# Measured hardware profile written by `parasim calibrate`; see [provenance].\n" + dumps_toml(profile)
    import tomllib

    hardware_from_dict(tomllib.loads(text), where=str(path))  # fail before writing a profile nobody can load
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p
