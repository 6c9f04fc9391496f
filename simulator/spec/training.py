"""Training: what is trained and how (sequence, batch, precision, optimizer, dtypes, kernels).

Dtype defaults follow Megatron-LM for mixed precision (formulas.md §3.1): bf16/fp16 parameters, an
fp32 master copy, fp32 gradient accumulation and reduction (`grad_dtype = "fp32"`, Megatron's default
for bf16 unless `--grad-reduce-in-bf16`), fp32 Adam moments. Set `grad_dtype = "bf16"` for the
ZeRO-paper / DeepSpeed accounting (2-byte gradients, 16 bytes/param).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError, check_positive
from ..units import DTYPE_BYTES
from .model import MAX_FIELD
from .rules import BOUNDS, check_count
from .stack import CROSS_ENTROPY, Stack, default_stack  # noqa: F401 (CROSS_ENTROPY re-exported)

PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd-momentum")
STATE_DTYPES = ("fp32", "bf16", "fp16")  # of the gradient buffer and the optimizer states
ATTENTION_FLOP_CONVENTIONS = ("causal", "full")


@dataclass(frozen=True, kw_only=True)
class Training:
    """Training setup. Batch sizes count sequences; `seq_length` counts tokens."""

    seq_length: int
    global_batch_size: int
    precision: str = "bf16"  # GEMM precision; fp8 keeps bf16 weights and runs GEMMs at the FP8 peak
    optimizer: str = "adam"
    grad_dtype: str = "fp32"  # dtype of the accumulated and reduced gradient buffer
    master_weights: bool = True  # fp32 master copy when parameters are not fp32
    optimizer_dtype: str = "fp32"  # dtype of optimizer moments
    stack: Stack = field(default_factory=default_stack)  # the software stack (spec/stack.py)
    flash_attention: bool | None = None  # None: the stack's; False: the a·s² score/softmax tensors are stored
    dropout: bool = False  # True: dropout masks are stored (Korthikanti's counts)
    offload_optimizer: bool = False  # ZeRO-Offload: optimizer states (and master copy) in host memory
    offload_params: bool = False  # ZeRO-Infinity-style parameter offload (ZeRO-3 only)
    moe_capacity_factor: float = 0.0  # 0: dropless (tokens routed as chosen); else C·k·T/E slots per expert
    moe_imbalance: float = 1.0  # dropless routing: the busiest expert-parallel rank's tokens / the mean (>= 1)
    cross_entropy: str | None = None  # CROSS_ENTROPY (spec/stack.py): how the loss is computed; None: the stack's
    attention_flops: str = "causal"  # "causal" (Megatron-current) or "full" (PaLM / Narayanan) count

    def __post_init__(self):
        if not isinstance(self.stack, Stack):
            raise InputError(f"stack must be a Stack (spec/stack.py load_stack), got {self.stack!r}")
        if self.cross_entropy is None:  # the stack's defaults for what the user left out
            object.__setattr__(self, "cross_entropy", self.stack.cross_entropy)
        if self.flash_attention is None:
            object.__setattr__(self, "flash_attention", self.stack.flash_attention)
        for name in ("seq_length", "global_batch_size"):  # whole numbers within BOUNDS (spec/rules.py)
            object.__setattr__(self, name, check_count(name, getattr(self, name)))
        for name, allowed in (("precision", PRECISIONS), ("optimizer", OPTIMIZERS),
                              ("attention_flops", ATTENTION_FLOP_CONVENTIONS), ("cross_entropy", CROSS_ENTROPY)):
            v = getattr(self, name)
            if v not in allowed:
                raise InputError(f"{name} must be one of {', '.join(allowed)}, got {v!r}")
        for name in ("grad_dtype", "optimizer_dtype"):
            v = getattr(self, name)
            if v not in STATE_DTYPES:
                raise InputError(f"{name} must be one of {', '.join(STATE_DTYPES)}, got {v!r}")
        for name in ("master_weights", "flash_attention", "dropout", "offload_optimizer", "offload_params"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be true or false, got {getattr(self, name)!r}")
        check_positive("moe_capacity_factor", self.moe_capacity_factor, allow_zero=True)
        check_positive("moe_imbalance", self.moe_imbalance)
        if self.moe_imbalance < 1:
            raise InputError(f"moe_imbalance is the busiest expert rank's load over the mean: >= 1, "
                             f"got {self.moe_imbalance!r}")
        # Past these the expert buffers overflow float64 (1e308 printed inf GiB): C x the uniform share is at
        # most every token in every one of up to MAX_FIELD experts; the busiest of up to BOUNDS["ep"] ranks
        # holds at most every token, ep x the mean.
        for name, limit in (("moe_capacity_factor", MAX_FIELD), ("moe_imbalance", BOUNDS["ep"][0])):
            if getattr(self, name) > limit:
                raise InputError(f"{name} must be <= {limit}, got {getattr(self, name)!r}")

    # ---- MoE routing ---------------------------------------------------------------------------
    @property
    def moe_slot_factor(self) -> float:
        """Expert slots executed per routed token copy on average: the capacity factor C when set (every
        expert computes its C·k·T/E slots, padded: GShard, Lepikhin et al. 2020 §2.2; Switch, Fedus et al.
        2021 §2.2), else 1 (dropless). What the hardware FLOPs (HFU) count."""
        return float(self.moe_capacity_factor) if self.moe_capacity_factor > 0 else 1.0

    @property
    def moe_load_factor(self) -> float:
        """The busiest expert-parallel rank's routed tokens over the uniform share k·T·e/E: C with a
        capacity factor (its buffers are padded to C whatever the routing), else `moe_imbalance` (dropless:
        the step waits for the rank whose experts drew the most tokens; 1 = uniform routing, an assumption
        the user can change). What the step time (expert GEMMs, all-to-all sized by the busiest rank) and
        the busiest rank's activation memory use."""
        return float(self.moe_capacity_factor) if self.moe_capacity_factor > 0 else float(self.moe_imbalance)

    # ---- bytes per element ---------------------------------------------------------------------
    @property
    def math_dtype(self) -> str:
        """Dtype of the math that is not an FP8 GEMM (attention, non-FP8 GEMMs): bf16 under FP8 training (Transformer
        Engine runs only its linears' GEMMs in FP8), else the training precision."""
        return "bf16" if self.precision == "fp8" else self.precision

    @property
    def param_dtype(self) -> str:
        """Dtype of the working weights: fp8 training keeps bf16 weights (Transformer Engine), or FP8 ones where
        the stack stores them so (`Stack.fp8_params`: TE fp8_model_init)."""
        return "fp8" if (self.precision == "fp8" and self.stack.fp8_params) else self.math_dtype

    @property
    def param_bytes(self) -> int:
        return DTYPE_BYTES[self.param_dtype]

    @property
    def activation_bytes(self) -> int:
        """Bytes per stored activation element: 2 for bf16/fp16/fp8 training, 4 for fp32."""
        return 4 if self.precision == "fp32" else 2

    @property
    def ep_dispatch_bytes(self) -> int:
        """Bytes per element of the MoE dispatch all-to-all: 1 under FP8 training where the stack quantizes the
        routed tokens before dispatching them (`Stack.ep_dispatch_fp8`: DeepSeek-V3 §3.3), else the activations'
        (the combine and the backward stay in activation precision: cost/comm.py ep_comm)."""
        return 1 if self.precision == "fp8" and self.stack.ep_dispatch_fp8 else self.activation_bytes

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_dtype]

    @property
    def master_bytes(self) -> int:
        """fp32 master copy: 4 bytes when parameters are not already fp32 and master_weights is on; 2 for bf16
        weights under the stack's master_weights "remainders" (the low 16 bits of each fp32 master weight, whose
        high 16 are the bf16 weight: Apex DistributedFusedAdam store_param_remainders)."""
        if not self.master_weights or self.param_dtype == "fp32":
            return 0
        return 2 if (self.stack.master_weights == "remainders" and self.param_dtype == "bf16") else 4

    @property
    def optimizer_state_count(self) -> int:
        """Tensors of optimizer state per parameter: Adam/AdamW 2 (m, v), SGD-momentum 1, SGD 0."""
        return {"adam": 2, "adamw": 2, "sgd-momentum": 1, "sgd": 0}[self.optimizer]

    @property
    def optimizer_bytes(self) -> int:
        """K of ZeRO §3.1: master copy + moments, bytes per parameter (Adam, fp32: 4 + 4 + 4 = 12)."""
        return self.master_bytes + self.optimizer_state_count * DTYPE_BYTES[self.optimizer_dtype]

    @property
    def tokens_per_step(self) -> int:
        return self.seq_length * self.global_batch_size
