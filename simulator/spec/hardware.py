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
| gemm_fp8        | FLOPs of one FP8 GEMM          | achieved / FP8 dense peak (optional)               |
| gemm_mxfp8      | FLOPs of one MXFP8 GEMM        | the same, block-scaled kernels (optional: gemm_fp8)|
| attention       | sequence length (tokens)       | FlashAttention forward achieved / dense peak       |
| attention_bwd   | sequence length (tokens)       | FlashAttention backward achieved / dense peak      |
| memory          | bytes moved by one kernel      | achieved / HBM peak bandwidth                      |
| memory_strided  | bytes moved by one kernel      | the same for torch's generic elementwise loop (an  |
|                 |                                | operand strided or broadcast; optional: `memory`)  |
| memory_reduction| bytes moved by one kernel      | the same for row reductions: norms, softmax        |
|                 |                                | (optional: `memory`)                               |
| memory_indexed  | bytes moved by one kernel      | the same for indexed writes: index_put_            |
|                 |                                | (optional: `memory`)                               |
| memory_decode_attention | bytes moved by one kernel | the same for decode attention's KV-cache stream |
|                 |                                | (optional: `memory`)                               |
| optimizer       | bytes moved by one kernel      | optimizer step achieved / HBM peak (optional)      |
| nvlink_ring     | collective buffer bytes        | ring busbw / `nvlink_bytes_per_s`                  |
| nvls            | all-reduce buffer bytes        | NVLS algbw / `nvlink_bytes_per_s`                  |
| nvlink_p2p      | message bytes                  | point-to-point rate / `nvlink_bytes_per_s`         |
| network         | collective buffer bytes        | achieved rate per NIC / `nic_bytes_per_s`          |
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np

from ..errors import InputError
from .efficiency import EfficiencyCurve, curve_from_dict
from .presets import check_keys, read_toml, resolve
from .rules import HARDWARE_RANGES, NONNEGATIVE, POSITIVE, check_count, check_fraction, check_number, check_text
from .run import GPU_RUN_KEYS, GPU_RUN_OPTIONAL, check_run_value, gpu_run_values
from .stack_choices import ATTENTION_KERNELS

__all__ = ["EfficiencyCurve", "HardwareProfile", "load_hardware", "hardware_from_dict",
           "efficiency_curve", "interp_efficiency", "DTYPES", "NVLINK_TOPOLOGIES"]

DTYPES = ("bf16", "fp16", "fp8", "fp32", "tf32")
NVLINK_TOPOLOGIES = ("switch", "mesh")
REQUIRED_EFFICIENCY = ("gemm", "attention", "memory", "nvlink_ring", "network")
# Every efficiency table a profile may hold (the table above), besides those of `_EFFICIENCY_PATTERN`:
# calibration's `nccl_<collective>_<intra|inter>` and a software stack's `attention_<kernel>` /
# `attention_bwd_<kernel>` (a kernel spec/stack_choices.py names, cuDNN's also by release, `cudnn-9-13`), each also
# per head dim (> 0) as `<table>_hd<d>` (cost/attention.py). Any other name is a typo and is refused.
EFFICIENCY_TABLES = ("gemm", "gemm_fp8", "gemm_mxfp8", "attention", "attention_bwd", "memory", "memory_strided",
                     "memory_reduction", "memory_indexed", "memory_decode_attention", "optimizer", "nvlink_ring",
                     "nvls", "nvlink_p2p", "network")
_EFFICIENCY_PATTERN = (r"nccl_[a-z0-9]+(_[a-z0-9]+)*_(intra|inter)"
                       r"|attention(_bwd)?(_(%s)(-[0-9]+-[0-9]+)?)?(_hd[1-9][0-9]*)?"
                       % "|".join(re.escape(k) for k in ATTENTION_KERNELS))


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
    nvls_min_bytes: float = 0.0  # NCCL's tuner runs NVLS from this all-reduce size on (collectives.nvls_eligible)
    nics_per_node: int
    nic_bytes_per_s: float
    ib_latency_s: float
    nodes_per_leaf: int
    leaf_oversubscription: float
    efficiency: Mapping[str, EfficiencyCurve]
    sources: Mapping[str, str] = field(default_factory=dict)
    provenance: Mapping[str, object] | None = None
    # the host of a GPU (ZeRO-Offload's PCIe transfers, CPU Adam step, host-RAM verdict): optional `[host]`
    # keys, defaults HOST_DEFAULTS (their sources there)
    host_pcie_bytes_per_s: float = 32e9
    host_mem_bytes_per_s: float = 409.6e9
    host_mem_bytes: float = 1024e9
    sm_count: int = 0  # streaming multiprocessors; 0: unknown (attention's occupancy is not modelled)
    # one BLAS handle's workspace in the caching allocator (torch's default for the GPU): `[gpu]
    # blas_workspace_mib` with `blas_workspace_source`; 0: not known (not counted; memory/overheads.py)
    blas_workspace_bytes: float = 0.0
    # compute that runs beside communication (NCCL kernels holding SMs and HBM bandwidth) is slower by this
    # fraction while they overlap: `[gpu] compute_slowdown_under_comm`, default CONTENTION_DEFAULT
    compute_slowdown_under_comm: float = 0.189  # = CONTENTION_DEFAULT (defined below, with its source)
    # relative standard deviation of per-GPU speed in a cluster: a synchronous step runs at its slowest GPU
    # (cost/variability.py); `[gpu] speed_cv`, default 0 (no published cluster-wide spread to cite)
    gpu_speed_cv: float = 0.0
    # run planning (run_plan.py): optional [gpu] keys, each with its source key (spec/run.py GPU_RUN_KEYS)
    board_power_w: float | None = None  # W per GPU, the datasheet's maximum
    usd_per_gpu_hour: float | None = None

    def __post_init__(self):
        """The rules of `_NUMBERS`, `_COUNTS` and `_rules_between` on the SI attributes (a profile built in
        Python; `hardware_from_dict` applies the same rules to the values as written, first)."""
        for attr, _, _, _, rule in _NUMBERS:
            check_number(getattr(self, attr), f"{self.name}: {attr}", rule)
        for attr, _ in _COUNTS:
            _count(getattr(self, attr), attr, f"{self.name}: {attr}")
        check_number(self.blas_workspace_bytes, f"{self.name}: blas_workspace_bytes", NONNEGATIVE)
        for d, v in self.peak_flops_per_s.items():
            check_number(v, f"{self.name}: peak_flops_per_s[{d!r}]")
        for attr in (a for a in GPU_RUN_KEYS if getattr(self, a) is not None):
            check_run_value(getattr(self, attr), f"{self.name}: {attr}", attr)
        check_fraction(self.gpu_speed_cv, f"{self.name}: gpu_speed_cv", below_one=True)
        _rules_between(self.name, si=True, gpus_per_node=self.gpus_per_node,
                       nvlink_domain_gpus=self.nvlink_domain_gpus, nvlink_topology=self.nvlink_topology,
                       link=self.nvlink_link_bytes_per_s, aggregate=self.nvlink_bytes_per_s,
                       dtypes=tuple(self.peak_flops_per_s), tables=tuple(self.efficiency), nvls=self.nvls)
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


# ---- rules and loading ------------------------------------------------------------------------------
# Every number of a profile: (attribute, [section], TOML key, factor from the file's unit to SI, rule).
# `hardware_from_dict` checks each value as written, naming file and key; `HardwareProfile.__post_init__`
# checks the SI attribute of a profile built in Python against the same rule.
_NUMBERS = (
    ("hbm_bytes", "gpu", "hbm_gb", 1e9, POSITIVE),
    ("hbm_bytes_per_s", "gpu", "hbm_gb_per_s", 1e9, POSITIVE),
    ("nvlink_bytes_per_s", "node", "nvlink_gb_per_s", 1e9, POSITIVE),
    ("nvlink_link_bytes_per_s", "node", "nvlink_link_gb_per_s", 1e9, POSITIVE),  # default: nvlink_gb_per_s
    ("nvlink_latency_s", "node", "nvlink_latency_us", 1e-6, NONNEGATIVE),
    ("nvls_latency_s", "node", "nvls_latency_us", 1e-6, NONNEGATIVE),  # default 0; needed with nvls = true
    ("nvls_min_bytes", "node", "nvls_min_bytes", 1.0, NONNEGATIVE),  # default 0
    ("nic_bytes_per_s", "network", "nic_gbit_per_s", 1e9 / 8, POSITIVE),
    ("ib_latency_s", "network", "ib_latency_us", 1e-6, NONNEGATIVE),
    ("leaf_oversubscription", "network", "leaf_oversubscription", 1.0, POSITIVE))
_KEY = {attr: key for attr, _, key, _, _ in _NUMBERS}
# Every count: (attribute = TOML key, [section]); whole numbers from 1 to their bound in spec/rules.py BOUNDS.
_COUNTS = (("gpus_per_node", "node"), ("nvlink_domain_gpus", "node"), ("nics_per_node", "network"),
           ("nodes_per_leaf", "network"))
_TOP_REQ = ("name", "gpu", "node", "network", "efficiency")
_TOP_OPT = ("description", "provenance", "host")
# Optional `[host]` keys: (attribute, TOML key, factor to SI, default in SI). Defaults, when a profile has no
# [host]: PCIe Gen4 x16 = 16 GT/s x 16 lanes x 128/130 / 8 = 31.5 GB/s per direction, ~32 GB/s (PCI-SIG
# PCIe 4.0 specification; NVIDIA A100 datasheet "PCIe Gen4: 64 GB/s" bidirectional); host memory of a DGX
# A100: 2x AMD EPYC 7742, 8 DDR4-3200 channels each, 2 x 8 x 25.6 = 409.6 GB/s [derived: AMD EPYC 7742
# product page], 1 TB (NVIDIA DGX A100 datasheet, 320 GB system: "System Memory 1TB").
HOST_DEFAULTS = (("host_pcie_bytes_per_s", "pcie_gb_per_s", 1e9, 32e9),
                 ("host_mem_bytes_per_s", "host_mem_gb_per_s", 1e9, 409.6e9),
                 ("host_mem_bytes", "host_mem_gb", 1e9, 1024e9))
_GPU_REQ = ("model", "hbm_gb", "hbm_gb_per_s", "peak_tflops", "source")
_GPU_OPT = ("hbm_usable_mib",  # capacity visible to CUDA (nvidia-smi "Total", MiB); preferred over hbm_gb
            "compute_slowdown_under_comm",  # SM contention, a fraction in [0, 1] (CONTENTION_DEFAULT)
            "speed_cv",  # per-GPU speed spread, a fraction in [0, 1) (cost/variability.py)
            "sm_count",  # attention's wave quantization
            "blas_workspace_mib", "blas_workspace_source",  # torch's BLAS workspace per handle (memory/overheads.py)
            ) + GPU_RUN_OPTIONAL  # run planning: spec/run.py
# Compute slowdown while communication overlaps it, when a profile does not measure its own: the average
# measured by Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated
# Distributed Deep Learning" (arXiv 2507.03114), GPT and Llama training steps on 4 A100, H100, MI250 and
# MI210 GPUs: overlapped compute ran 18.9 % slower on average than alone (40.0 % at most); recorded in
# ../shared/data/kernel_benchmarks.csv (kind comm_compute_contention) from the abstract of arXiv 2507.03114v1.
CONTENTION_DEFAULT = 0.189
_PEAK_OPT = DTYPES + ("source",)
_NODE_REQ = ("gpus_per_node", "nvlink_gb_per_s", "nvls", "nvlink_latency_us", "source")
_NODE_OPT = ("nvlink_domain_gpus", "nvlink_topology", "nvlink_link_gb_per_s", "nvls_latency_us", "nvls_min_bytes")
_NET_REQ = ("nics_per_node", "nic_gbit_per_s", "ib_latency_us", "nodes_per_leaf", "leaf_oversubscription", "source")
_PROV_OPT = ("device", "versions", "date", "protocol", "source", "notes", "host")


def _count(value, name: str, what: str) -> int:
    """An integer (not 8.0: counts are written as integers) from 1 to BOUNDS[name], named `what`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what} must be an integer >= 1, got {value!r}")
    return check_count(name, value, label=what)


def _rules_between(where: str, *, si: bool, gpus_per_node, nvlink_domain_gpus, nvlink_topology, link, aggregate,
                   dtypes, tables, nvls) -> None:
    """The rules between keys of a profile, each stated once: for the values as written (`si` False: messages
    name the TOML keys) and for the attributes of a profile built in Python (`si` True)."""
    if nvlink_domain_gpus % gpus_per_node:
        raise InputError(f"{where}: nvlink_domain_gpus ({nvlink_domain_gpus}) must be a multiple of "
                         f"gpus_per_node ({gpus_per_node})")
    if nvlink_topology not in NVLINK_TOPOLOGIES:
        raise InputError(f"{where}: nvlink_topology must be one of {', '.join(NVLINK_TOPOLOGIES)}, "
                         f"got {nvlink_topology!r}")
    if link > aggregate:
        name = (lambda a: a) if si else _KEY.get
        raise InputError(f"{where}: {name('nvlink_link_bytes_per_s')} ({link!r}) exceeds "
                         f"{name('nvlink_bytes_per_s')} ({aggregate!r})")
    if not dtypes:
        raise InputError(f"{where}: peak_tflops needs at least one dtype")
    for d in dtypes:
        if d not in DTYPES:
            raise InputError(f"{where}: unknown dtype {d!r} in peak_tflops; expected one of {', '.join(DTYPES)}")
    for t in tables:  # EFFICIENCY_TABLES, calibration's and a stack's names (_EFFICIENCY_PATTERN)
        if t not in EFFICIENCY_TABLES and not re.fullmatch(_EFFICIENCY_PATTERN, t):
            close = difflib.get_close_matches(t, EFFICIENCY_TABLES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; known: {', '.join(EFFICIENCY_TABLES)}"
            raise InputError(f"unknown efficiency table [efficiency.{t}] in {where}{hint}")
    missing = [t for t in REQUIRED_EFFICIENCY if t not in tables]
    if missing:
        raise InputError(f"{where}: missing efficiency table [efficiency.{missing[0]}]")
    if nvls and "nvls" not in tables:
        raise InputError(f"{where}: nvls = true needs an [efficiency.nvls] table")


def _table(d, what: str) -> dict:
    if not isinstance(d, dict):
        raise InputError(f"{what} must be a table, got {d!r}")
    return d


def _sections(d: dict, where: str) -> dict:
    """{section: table} of a profile, each with its keys checked (unknown and missing keys named)."""
    check_keys(d, where=where, required=_TOP_REQ, optional=_TOP_OPT)
    sec = {"gpu": _table(d["gpu"], f"{where} [gpu]")}
    check_keys(sec["gpu"], where=f"{where} [gpu]", required=_GPU_REQ, optional=_GPU_OPT)
    sec["peak"] = _table(sec["gpu"]["peak_tflops"], f"{where} [gpu.peak_tflops]")
    check_keys(sec["peak"], where=f"{where} [gpu.peak_tflops]", optional=_PEAK_OPT)
    for name, req, opt in (("node", _NODE_REQ, _NODE_OPT), ("network", _NET_REQ, ())):
        sec[name] = _table(d[name], f"{where} [{name}]")
        check_keys(sec[name], where=f"{where} [{name}]", required=req, optional=opt)
    sec["efficiency"] = _table(d["efficiency"], f"{where} [efficiency]")
    if d.get("provenance") is not None:
        check_keys(_table(d["provenance"], f"{where} [provenance]"), where=f"{where} [provenance]", optional=_PROV_OPT)
    return sec


def _values(sec: dict, where: str) -> dict:
    """The numbers and counts of a profile as HardwareProfile keywords: each checked as written, then in SI."""
    n = sec["node"]
    n = {"nvlink_link_gb_per_s": n["nvlink_gb_per_s"], "nvls_latency_us": 0.0, "nvls_min_bytes": 0.0, **n}  # defaults
    tables = {**sec, "node": n}
    out = {attr: check_number(tables[s][key], f"{where} {s}.{key}", rule, factor, bounds=HARDWARE_RANGES[key])
           for attr, s, key, factor, rule in _NUMBERS}
    if "hbm_usable_mib" in sec["gpu"]:  # what CUDA sees, preferred for the fit verdict
        out["hbm_bytes"] = check_number(sec["gpu"]["hbm_usable_mib"], f"{where} gpu.hbm_usable_mib", factor=2**20,
                                        bounds=HARDWARE_RANGES["hbm_usable_mib"])
    if "sm_count" in sec["gpu"]:
        out["sm_count"] = _count(sec["gpu"]["sm_count"], "sm_count", f"{where} gpu.sm_count")
    if "blas_workspace_mib" in sec["gpu"]:
        if "blas_workspace_source" not in sec["gpu"]:
            raise InputError(f"{where} [gpu]: blas_workspace_mib needs blas_workspace_source "
                             "(where the size comes from)")
        out["blas_workspace_bytes"] = check_number(sec["gpu"]["blas_workspace_mib"], f"{where} gpu.blas_workspace_mib",
                                                   factor=2**20, bounds=HARDWARE_RANGES["blas_workspace_mib"])
    out["compute_slowdown_under_comm"] = check_fraction(sec["gpu"].get("compute_slowdown_under_comm",
                                                                       CONTENTION_DEFAULT),
                                                        f"{where} gpu.compute_slowdown_under_comm")
    out["gpu_speed_cv"] = check_fraction(sec["gpu"].get("speed_cv", 0.0), f"{where} gpu.speed_cv", below_one=True)
    n.setdefault("nvlink_domain_gpus", n["gpus_per_node"])
    for attr, s in _COUNTS:
        out[attr] = _count(tables[s][attr], attr, f"{where} {s}.{attr}")
    out["peak_flops_per_s"] = {k: check_number(v, f"{where} gpu.peak_tflops.{k}", factor=1e12,
                                               bounds=HARDWARE_RANGES["peak_tflops"])
                               for k, v in sec["peak"].items() if k != "source"}
    out["nvls"] = n["nvls"]
    if not isinstance(out["nvls"], bool):
        raise InputError(f"{where} node.nvls must be true or false, got {out['nvls']!r}")
    if out["nvls"] and "nvls_latency_us" not in sec["node"]:
        raise InputError(f"missing key 'nvls_latency_us' in {where} [node] (needed with nvls = true)")
    out["nvlink_topology"] = n.get("nvlink_topology", "switch")
    _rules_between(where, si=False, gpus_per_node=out["gpus_per_node"], nvlink_domain_gpus=out["nvlink_domain_gpus"],
                   nvlink_topology=out["nvlink_topology"], link=n["nvlink_link_gb_per_s"],
                   aggregate=n["nvlink_gb_per_s"], dtypes=tuple(out["peak_flops_per_s"]),
                   tables=tuple(sec["efficiency"]), nvls=out["nvls"])
    return out


def _host_values(h, where: str) -> dict:
    """The optional `[host]` section as HardwareProfile keywords (SI) plus its 'source'; {} without one
    (HOST_DEFAULTS then apply). Each number checked as written (> 0)."""
    if h is None:
        return {}
    keys = tuple(key for _, key, _, _ in HOST_DEFAULTS)
    check_keys(_table(h, f"{where} [host]"), where=f"{where} [host]", required=("source",), optional=keys)
    out = {attr: check_number(h[key], f"{where} host.{key}", POSITIVE, factor, bounds=HARDWARE_RANGES[key])
           for attr, key, factor, _ in HOST_DEFAULTS if key in h}
    return {**out, "source": str(h["source"])}


def hardware_from_dict(d: dict, *, where: str) -> HardwareProfile:
    """Build a HardwareProfile from a parsed TOML table (vendor units -> SI).

    `where` names the origin (file or scenario section) in error messages. Unknown and missing
    keys are rejected; every value is checked as written, its message naming `where`, the key and the
    value. Units: GB = 1e9 B, Gb/s = 1e9 bit/s, TFLOP/s = 1e12.
    """
    sec = _sections(_table(d, where), where)
    g, n, w = sec["gpu"], sec["node"], sec["network"]
    check_text(d["name"], f"{where} name")
    check_text(d.get("description", ""), f"{where} description", empty=True)
    sources = {"gpu": str(g["source"]), "node": str(n["source"]), "network": str(w["source"])}
    if "source" in sec["peak"]:
        sources["peak_tflops"] = str(sec["peak"]["source"])
    prov = d.get("provenance")
    host = _host_values(d.get("host"), where)
    if "source" in host:
        sources["host"] = host.pop("source")
    run, run_sources = gpu_run_values(g, where)
    sources.update(run_sources)
    if "blas_workspace_source" in g:
        sources["blas_workspace"] = str(g["blas_workspace_source"])
    return HardwareProfile(
        name=str(d["name"]), description=str(d.get("description", "")),
        gpu=check_text(g["model"], f"{where} gpu.model"),
        **_values(sec, where), **host, **run,
        efficiency={k: curve_from_dict(_table(v, f"{where} [efficiency.{k}]"), where=f"{where} [efficiency.{k}]",
                                       name=k) for k, v in sec["efficiency"].items()},
        sources=sources, provenance=dict(prov) if prov is not None else None,
    )


def load_hardware(name_or_path: str) -> HardwareProfile:
    """Load a hardware profile from a preset name (`dgx-h100`) or a TOML path.

    Measured profiles written by calibration live in `hardware_profiles/measured/` and are loaded
    by path (`hardware_profiles/measured/<name>.toml`).
    """
    path = resolve("hardware_profiles", str(name_or_path))
    return hardware_from_dict(read_toml(path), where=str(Path(path).name))
