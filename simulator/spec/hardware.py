"""HardwareProfile: one GPU type, its node (scale-up domain) and its scale-out fabric.

A profile is loaded from a TOML preset in `hardware_profiles/` (or a path, or an inline dict in a
scenario). TOML keys carry vendor units (`hbm_gb`, `nvlink_gb_per_s`, `nic_gbit_per_s`,
`peak_tflops`, `*_latency_us`); the loader converts them once to SI attributes (`hbm_bytes`,
`nvlink_bytes_per_s`, `nic_bytes_per_s`, `peak_flops_per_s`, `*_latency_s`). Every bandwidth is
**per direction** (NVIDIA quotes NVLink bidirectional: H100 "900 GB/s" = 450 GB/s per direction).
Every section carries a `source` string; `hardware_profiles/*.toml` is the place to read them.

Efficiency tables are data, not code (STYLE.md, Calculon): each `[efficiency.<name>]` section is a
piecewise-linear curve `x = [...]`, `efficiency = [...]` interpolated in log10(x) and held constant
beyond its ends. Names used by the cost model:

| name            | x                              | efficiency means                                  |
|-----------------|--------------------------------|---------------------------------------------------|
| gemm            | FLOPs of one GEMM              | achieved / dense peak                              |
| attention       | sequence length (tokens)       | FlashAttention forward achieved / dense peak       |
| attention_bwd   | sequence length (tokens)       | FlashAttention backward achieved / dense peak      |
| memory          | bytes moved by one kernel      | achieved / HBM peak bandwidth                      |
| nvlink_ring     | collective buffer bytes        | ring busbw / `nvlink_bytes_per_s`                  |
| nvls            | all-reduce buffer bytes        | NVLS algbw / `nvlink_bytes_per_s`                  |
| nvlink_p2p      | message bytes                  | point-to-point rate / `nvlink_bytes_per_s`         |
| network         | collective buffer bytes        | achieved rate per NIC / `nic_bytes_per_s`          |
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np

from ..errors import InputError
from .presets import check_keys, preset_names, read_toml, resolve

__all__ = [
    "EfficiencyCurve",
    "HardwareProfile",
    "load_hardware",
    "hardware_from_dict",
    "list_hardware",
    "efficiency_curve",
    "interp_efficiency",
    "DTYPES",
    "NVLINK_TOPOLOGIES",
]

DTYPES = ("bf16", "fp16", "fp8", "fp32", "tf32")
NVLINK_TOPOLOGIES = ("switch", "mesh")
REQUIRED_EFFICIENCY = ("gemm", "attention", "memory", "nvlink_ring", "network")


@dataclass(frozen=True, kw_only=True)
class EfficiencyCurve:
    """A measured/published efficiency table: piecewise linear in log10(x), clamped at the ends."""

    x: tuple[float, ...]
    efficiency: tuple[float, ...]
    x_unit: str
    source: str

    def __post_init__(self):
        if len(self.x) != len(self.efficiency) or len(self.x) == 0:
            raise InputError(f"efficiency curve needs equally long non-empty x and efficiency, got {len(self.x)} and {len(self.efficiency)}")
        if any(not (v > 0 and math.isfinite(v)) for v in self.x):
            raise InputError(f"efficiency curve x values must be finite and > 0, got {list(self.x)}")
        if any(b <= a for a, b in zip(self.x, self.x[1:])):
            raise InputError(f"efficiency curve x values must increase strictly, got {list(self.x)}")
        if any(not (0 < e <= 2.0) for e in self.efficiency):
            raise InputError(f"efficiency values must lie in (0, 2], got {list(self.efficiency)}")

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(x, efficiency) as float arrays."""
        return np.asarray(self.x, dtype=float), np.asarray(self.efficiency, dtype=float)

    def __call__(self, x) -> np.ndarray:
        """Efficiency at `x` (array-like, > 0): `np.interp(log10 x, log10 xs, effs)`, clamped."""
        xs, es = self.arrays()
        xa = np.asarray(x, dtype=float)
        return np.interp(np.log10(np.maximum(xa, 1e-300)), np.log10(xs), es)


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    """A GPU, its scale-up (NVLink) domain and its scale-out network, in SI units.

    Bandwidths are per direction. `nvlink_bytes_per_s` is the per-GPU aggregate into the
    NVLink fabric; for a `mesh` topology (MI300X Infinity Fabric) each peer pair has its own link of
    `nvlink_link_bytes_per_s`, so a group of k GPUs reaches only (k-1) links of it.
    `nvlink_domain_gpus` is the number of GPUs sharing one NVLink/NVSwitch domain (8 for a DGX,
    72 for GB200 NVL72, whose compute trays hold 4 GPUs each).
    Rail-optimised fat tree: NIC j of every node of a leaf group (`nodes_per_leaf` nodes) goes to
    the same leaf switch; leaves connect through a spine whose uplinks are oversubscribed by
    `leaf_oversubscription` (1.0 = full bisection).
    """

    name: str
    description: str = ""
    gpu: str
    hbm_bytes: float
    hbm_bytes_per_s: float
    peak_flops_per_s: Mapping[str, float]
    gpus_per_node: int
    nvlink_domain_gpus: int
    nvlink_topology: str
    nvlink_bytes_per_s: float
    nvlink_link_bytes_per_s: float
    nvls: bool
    nvlink_latency_s: float
    nvls_latency_s: float = 0.0
    nics_per_node: int
    nic_bytes_per_s: float
    ib_latency_s: float
    nodes_per_leaf: int
    leaf_oversubscription: float
    efficiency: Mapping[str, EfficiencyCurve]
    sources: Mapping[str, str] = field(default_factory=dict)
    provenance: Mapping[str, object] | None = None

    def __post_init__(self):
        for k in ("hbm_bytes", "hbm_bytes_per_s", "nvlink_bytes_per_s", "nvlink_link_bytes_per_s",
                  "nic_bytes_per_s", "leaf_oversubscription"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(f"{self.name}: {k} must be a finite number > 0, got {v!r}")
        for k in ("nvlink_latency_s", "ib_latency_s", "nvls_latency_s"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise InputError(f"{self.name}: {k} must be a finite number >= 0, got {v!r}")
        for k in ("gpus_per_node", "nvlink_domain_gpus", "nics_per_node", "nodes_per_leaf"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{self.name}: {k} must be an integer >= 1, got {v!r}")
        if self.nvlink_domain_gpus % self.gpus_per_node:
            raise InputError(f"{self.name}: nvlink_domain_gpus ({self.nvlink_domain_gpus}) must be a multiple of gpus_per_node ({self.gpus_per_node})")
        if self.nvlink_topology not in NVLINK_TOPOLOGIES:
            raise InputError(f"{self.name}: nvlink_topology must be one of {', '.join(NVLINK_TOPOLOGIES)}, got {self.nvlink_topology!r}")
        if self.nvlink_link_bytes_per_s > self.nvlink_bytes_per_s:
            raise InputError(f"{self.name}: nvlink_link_gb_per_s exceeds nvlink_gb_per_s")
        if not self.peak_flops_per_s:
            raise InputError(f"{self.name}: peak_tflops needs at least one dtype")
        for d, v in self.peak_flops_per_s.items():
            if d not in DTYPES:
                raise InputError(f"{self.name}: unknown dtype {d!r} in peak_tflops; expected one of {', '.join(DTYPES)}")
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(f"{self.name}: peak_tflops.{d} must be > 0, got {v!r}")
        missing = [n for n in REQUIRED_EFFICIENCY if n not in self.efficiency]
        if missing:
            raise InputError(f"{self.name}: missing efficiency table [efficiency.{missing[0]}]")
        if self.nvls and "nvls" not in self.efficiency:
            raise InputError(f"{self.name}: nvls = true needs an [efficiency.nvls] table")
        # read-only views: a frozen dataclass should not hand out mutable dicts
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(dict(self.peak_flops_per_s)))
        object.__setattr__(self, "efficiency", MappingProxyType(dict(self.efficiency)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        if self.provenance is not None:
            object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))

    # ---- derived quantities -------------------------------------------------------------
    @property
    def nic_bytes_per_s_per_gpu(self) -> float:
        """Scale-out bandwidth share of one GPU: nics_per_node * nic_bytes_per_s / gpus_per_node."""
        return self.nics_per_node * self.nic_bytes_per_s / self.gpus_per_node

    @property
    def node_egress_bytes_per_s(self) -> float:
        """Scale-out bandwidth of one node, per direction: nics_per_node * nic_bytes_per_s."""
        return self.nics_per_node * self.nic_bytes_per_s

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`; InputError if the profile has no number for it."""
        try:
            return float(self.peak_flops_per_s[dtype])
        except KeyError:
            have = ", ".join(self.peak_flops_per_s)
            raise InputError(f"hardware {self.name!r} has no peak for dtype {dtype!r} (has: {have})") from None

    def efficiency_curve(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, efficiency) arrays of the table `[efficiency.<name>]`."""
        return self._curve(name).arrays()

    def interp_efficiency(self, name: str, x) -> np.ndarray:
        """Efficiency of table `name` at `x` (vectorised; np.interp in log10(x), clamped at the ends)."""
        return self._curve(name)(x)

    def has_efficiency(self, name: str) -> bool:
        return name in self.efficiency

    def _curve(self, name: str) -> EfficiencyCurve:
        try:
            return self.efficiency[name]
        except KeyError:
            raise InputError(f"hardware {self.name!r} has no efficiency table {name!r} (has: {', '.join(self.efficiency)})") from None


def efficiency_curve(profile: HardwareProfile, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, efficiency) arrays of `profile`'s table `name` (function form of the method)."""
    return profile.efficiency_curve(name)


def interp_efficiency(profile: HardwareProfile, name: str, x) -> np.ndarray:
    """Vectorised efficiency of `profile`'s table `name` at `x` (function form of the method)."""
    return profile.interp_efficiency(name, x)


# ---- loading ----------------------------------------------------------------------------------
_TOP_REQ = ("name", "gpu", "node", "network", "efficiency")
_TOP_OPT = ("description", "provenance")
_GPU_REQ = ("model", "hbm_gb", "hbm_gb_per_s", "peak_tflops", "source")
_GPU_OPT = ("hbm_usable_mib",)  # capacity visible to CUDA (nvidia-smi "Total", MiB); preferred over hbm_gb
_PEAK_OPT = DTYPES + ("source",)
_NODE_REQ = ("gpus_per_node", "nvlink_gb_per_s", "nvls", "nvlink_latency_us", "source")
_NODE_OPT = ("nvlink_domain_gpus", "nvlink_topology", "nvlink_link_gb_per_s", "nvls_latency_us")
_NET_REQ = ("nics_per_node", "nic_gbit_per_s", "ib_latency_us", "nodes_per_leaf", "leaf_oversubscription", "source")
_EFF_REQ = ("x", "efficiency", "x_unit", "source")
_PROV_OPT = ("device", "versions", "date", "protocol", "source", "notes", "host")


def _num(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{what} must be a number, got {v!r}")
    return float(v)


def _int(v, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError(f"{what} must be an integer, got {v!r}")
    return v


def _table(d, what: str) -> dict:
    if not isinstance(d, dict):
        raise InputError(f"{what} must be a table, got {d!r}")
    return d


def _curve_from_dict(d: dict, *, where: str) -> EfficiencyCurve:
    check_keys(_table(d, where), where=where, required=_EFF_REQ)
    x, e = d["x"], d["efficiency"]
    if not isinstance(x, list) or not isinstance(e, list):
        raise InputError(f"{where}: x and efficiency must be lists")
    return EfficiencyCurve(
        x=tuple(_num(v, f"{where}.x") for v in x),
        efficiency=tuple(_num(v, f"{where}.efficiency") for v in e),
        x_unit=str(d["x_unit"]),
        source=str(d["source"]),
    )


def hardware_from_dict(d: dict, *, where: str) -> HardwareProfile:
    """Build a HardwareProfile from a parsed TOML table (vendor units -> SI).

    `where` names the origin (file or scenario section) in error messages. Unknown and missing
    keys are rejected. Units: GB = 1e9 B, Gb/s = 1e9 bit/s, TFLOP/s = 1e12.
    """
    d = _table(d, where)
    check_keys(d, where=where, required=_TOP_REQ, optional=_TOP_OPT)
    g = _table(d["gpu"], f"{where} [gpu]")
    check_keys(g, where=f"{where} [gpu]", required=_GPU_REQ, optional=_GPU_OPT)
    pk = _table(g["peak_tflops"], f"{where} [gpu.peak_tflops]")
    check_keys(pk, where=f"{where} [gpu.peak_tflops]", optional=_PEAK_OPT)
    n = _table(d["node"], f"{where} [node]")
    check_keys(n, where=f"{where} [node]", required=_NODE_REQ, optional=_NODE_OPT)
    w = _table(d["network"], f"{where} [network]")
    check_keys(w, where=f"{where} [network]", required=_NET_REQ)
    effs = _table(d["efficiency"], f"{where} [efficiency]")
    prov = d.get("provenance")
    if prov is not None:
        check_keys(_table(prov, f"{where} [provenance]"), where=f"{where} [provenance]", optional=_PROV_OPT)

    gpus_per_node = _int(n["gpus_per_node"], f"{where} node.gpus_per_node")
    nvlink = _num(n["nvlink_gb_per_s"], f"{where} node.nvlink_gb_per_s") * 1e9
    nvls = n["nvls"]
    if not isinstance(nvls, bool):
        raise InputError(f"{where} node.nvls must be true or false, got {nvls!r}")
    if nvls and "nvls_latency_us" not in n:
        raise InputError(f"missing key 'nvls_latency_us' in {where} [node] (needed with nvls = true)")
    sources = {"gpu": str(g["source"]), "node": str(n["source"]), "network": str(w["source"])}
    if "source" in pk:
        sources["peak_tflops"] = str(pk["source"])
    return HardwareProfile(
        name=str(d["name"]),
        description=str(d.get("description", "")),
        gpu=str(g["model"]),
        hbm_bytes=(_num(g["hbm_usable_mib"], f"{where} gpu.hbm_usable_mib") * 2**20 if "hbm_usable_mib" in g
                   else _num(g["hbm_gb"], f"{where} gpu.hbm_gb") * 1e9),
        hbm_bytes_per_s=_num(g["hbm_gb_per_s"], f"{where} gpu.hbm_gb_per_s") * 1e9,
        peak_flops_per_s={k: _num(v, f"{where} gpu.peak_tflops.{k}") * 1e12 for k, v in pk.items() if k != "source"},
        gpus_per_node=gpus_per_node,
        nvlink_domain_gpus=_int(n.get("nvlink_domain_gpus", gpus_per_node), f"{where} node.nvlink_domain_gpus"),
        nvlink_topology=str(n.get("nvlink_topology", "switch")),
        nvlink_bytes_per_s=nvlink,
        nvlink_link_bytes_per_s=_num(n.get("nvlink_link_gb_per_s", n["nvlink_gb_per_s"]), f"{where} node.nvlink_link_gb_per_s") * 1e9,
        nvls=nvls,
        nvlink_latency_s=_num(n["nvlink_latency_us"], f"{where} node.nvlink_latency_us") * 1e-6,
        nvls_latency_s=_num(n.get("nvls_latency_us", 0.0), f"{where} node.nvls_latency_us") * 1e-6,
        nics_per_node=_int(w["nics_per_node"], f"{where} network.nics_per_node"),
        nic_bytes_per_s=_num(w["nic_gbit_per_s"], f"{where} network.nic_gbit_per_s") * 1e9 / 8,
        ib_latency_s=_num(w["ib_latency_us"], f"{where} network.ib_latency_us") * 1e-6,
        nodes_per_leaf=_int(w["nodes_per_leaf"], f"{where} network.nodes_per_leaf"),
        leaf_oversubscription=_num(w["leaf_oversubscription"], f"{where} network.leaf_oversubscription"),
        efficiency={k: _curve_from_dict(v, where=f"{where} [efficiency.{k}]") for k, v in effs.items()},
        sources=sources,
        provenance=dict(prov) if prov is not None else None,
    )


def load_hardware(name_or_path: str) -> HardwareProfile:
    """Load a hardware profile from a preset name (`dgx-h100`) or a TOML path.

    Measured profiles written by calibration live in `hardware_profiles/measured/` and are loaded
    by path (`hardware_profiles/measured/<name>.toml`).
    """
    path = resolve("hardware_profiles", str(name_or_path))
    return hardware_from_dict(read_toml(path), where=str(Path(path).name))


def list_hardware():
    """One row per hardware preset: the numbers `parasim hardware` prints (decimal GB, TFLOP/s)."""
    import pandas as pd

    rows = []
    for name in preset_names("hardware_profiles"):
        p = load_hardware(name)
        bf16 = p.peak_flops_per_s.get("bf16")
        rows.append({
            "name": p.name,
            "gpu": p.gpu,
            "hbm_gib": round(p.hbm_bytes / 2**30, 1),  # capacity CUDA sees (usable), GiB
            "bf16_tflops": bf16 / 1e12 if bf16 else float("nan"),
            "gpus_per_node": p.gpus_per_node,
            "nvlink_domain_gpus": p.nvlink_domain_gpus,
            "nvlink_gb_per_s_per_dir": p.nvlink_bytes_per_s / 1e9,
            "nvls": p.nvls,
            "nics": f"{p.nics_per_node} x {p.nic_bytes_per_s * 8 / 1e9:g} Gb/s",
        })
    return pd.DataFrame(rows)
