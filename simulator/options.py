"""EstimateOptions: what overlaps with what, and the modelling switches of the kernel (kernel.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import InputError
from .spec.rules import check_fraction


@dataclass(frozen=True, kw_only=True)
class EstimateOptions:
    """What overlaps with what (kernel.py's docstring), and modelling switches. Defaults follow Megatron-LM."""

    # fraction of TP communication hidden under GEMMs; None: the stack's rule (tp_comm_overlap: the chunked
    # pipeline of cost/fsdp.py chunked_overlap_exposed_s, else nothing hidden)
    tp_overlap: float | None = None
    cp_overlap: bool = True  # ring-attention p2p under the attention kernel
    ep_overlap: float | None = None  # None: 1 for dualpipe/dualpipev, else 0
    grad_reduce_overlap: bool = True  # DP gradient reduction under the last microbatch's backward
    param_gather_overlap: bool = False  # ZeRO-1/2 parameter all-gather under the next forward
    # overlapped comm slows the compute it hides under by this fraction; None: the hardware's measured SM
    # contention (HardwareProfile.compute_slowdown_under_comm)
    comm_slowdown: float | None = None
    # relative standard deviation of per-GPU speed: compute runs at the slowest of the layout's GPUs
    # (cost/variability.py); None: the hardware's (HardwareProfile.gpu_speed_cv, default 0)
    gpu_speed_cv: float | None = None
    roofline: bool = True  # op time = max(compute, memory) (False: their sum, Calculon's no_overlap)
    pipeline: str = "replay"  # "replay": the engine's fast path; "analytic": closed-form bubbles (faster)
    placement: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")

    def __post_init__(self):
        for name in ("tp_overlap", "comm_slowdown", "ep_overlap", "gpu_speed_cv"):  # (a spread is below 1)
            if getattr(self, name) is not None:
                check_fraction(getattr(self, name), name, below_one=name == "gpu_speed_cv")
        if self.pipeline not in ("replay", "analytic"):
            raise InputError(f"pipeline must be 'replay' or 'analytic', got {self.pipeline!r}")

    def for_hardware(self, hardware) -> "EstimateOptions":
        """These options with what they leave to the hardware filled in from `hardware` (comm_slowdown,
        gpu_speed_cv)."""
        out = self
        if out.comm_slowdown is None:
            out = replace(out, comm_slowdown=hardware.compute_slowdown_under_comm)
        if out.gpu_speed_cv is None:
            out = replace(out, gpu_speed_cv=float(getattr(hardware, "gpu_speed_cv", 0.0)))
        return out
