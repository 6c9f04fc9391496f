"""EstimateOptions: what overlaps with what, and the modelling switches of the kernel (kernel.py)."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError


@dataclass(frozen=True, kw_only=True)
class EstimateOptions:
    """What overlaps with what (kernel.py's docstring), and modelling switches. Defaults follow Megatron-LM."""

    tp_overlap: float = 0.0  # fraction of TP communication hidden under GEMMs (--tp-comm-overlap: ~1)
    cp_overlap: bool = True  # ring-attention p2p under the attention kernel
    ep_overlap: float | None = None  # None: 1 for dualpipe/dualpipev, else 0
    grad_reduce_overlap: bool = True  # DP gradient reduction under the last microbatch's backward
    param_gather_overlap: bool = False  # ZeRO-1/2 parameter all-gather under the next forward
    comm_slowdown: float = 0.0  # overlapped comm slows the compute it hides under by this fraction
    roofline: bool = True  # op time = max(compute, memory) (False: their sum, Calculon's no_overlap)
    pipeline: str = "replay"  # "replay": the engine's fast path; "analytic": closed-form bubbles (faster)
    bucket_bytes: float = 25e6  # DDP gradient bucket (PyTorch default 25 MB)
    placement: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")

    def __post_init__(self):
        for name in ("tp_overlap", "comm_slowdown"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise InputError(f"{name} must be in [0, 1], got {v!r}")
        if self.pipeline not in ("replay", "analytic"):
            raise InputError(f"pipeline must be 'replay' or 'analytic', got {self.pipeline!r}")
        if self.ep_overlap is not None and not 0.0 <= self.ep_overlap <= 1.0:
            raise InputError(f"ep_overlap must be in [0, 1], got {self.ep_overlap!r}")
