"""Layout: how the job is split over the GPUs (glossary below), validated at construction.

Glossary (torchtitan / Megatron vocabulary):
- degree: the size of one parallel dimension (tp, cp, pp, dp; ep is carved out of dp·cp for experts);
- rank: one GPU; ranks are placed TP innermost, then CP, DP, PP (cost/topology.py documents it);
- stage: the layers one pipeline rank holds; chunk (virtual stage): one of its `vpp` slices;
- microbatch: `micro_batch_size` sequences; a step runs `num_microbatches` of them per DP replica.

Internal rules are checked here; rules that involve the model or training (heads % tp, layers % pp,
batch % dp·mbs, experts % ep, sequence % cp) live in spec/validate.py, the one place for them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numbers

import numpy as np

from ..errors import InputError
from ..schedules import SCHEDULE_NAMES as SCHEDULES
from ..schedules import family
from .rules import (BOUNDS, CP_ALGORITHMS, DEFAULT_RECOMPUTE_MODULES, DP_MODES, RECOMPUTE, check_choice, check_count,
                    check_zero)


def layout_label(tp, cp, pp, dp, ep=1, vpp=1, etp=None) -> str:
    """The canonical short label of a layout, e.g. `TP8-CP1-PP4-DP16`, with `-EP8` when ep > 1, `-ETP1` when
    the experts' tensor-parallel degree is not tp, and `-V2` when vpp > 1: the one label builder (`Layout.label`,
    the sweep's `label` column)."""
    s = f"TP{tp}-CP{cp}-PP{pp}-DP{dp}"
    if ep > 1:
        s += f"-EP{ep}"
    if etp is not None and etp != tp:
        s += f"-ETP{etp}"
    if vpp > 1:
        s += f"-V{vpp}"
    return s


def stage_layers(value, pp: int, *, stages: int | None = None) -> tuple[int, ...]:
    """`layers_per_stage` as a tuple of ints: pp (or `stages`: one per virtual stage) whole numbers from
    0 to BOUNDS' limit (a stage may hold no layer: only the embedding or the loss, as Megatron-Core's
    --pipeline-model-parallel-layout "E|t*32L" places them; 16.0 is whole, 16.5 is not), else InputError naming
    the list as written."""
    limit = BOUNDS["layers_per_stage"][0]

    def whole(v) -> bool:
        return not isinstance(v, bool) and (isinstance(v, numbers.Integral)
                                            or (isinstance(v, float) and v.is_integer())) and 0 <= v <= limit
    if not (isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim == 1)) \
            or not all(whole(v) for v in value):
        raise InputError(f"layers_per_stage must be a list of whole numbers from 0 to {limit}, got {value!r}")
    if len(value) not in (pp, stages or pp):
        expected = f"pp({pp})" + (f" or one per virtual stage ({stages})" if stages and stages != pp else "")
        raise InputError(f"layers_per_stage has {len(value)} entries, expected {expected}, got {value!r}")
    return tuple(int(v) for v in value)


def expert_grid_fits(tp, cp, dp, ep, etp):
    """Where the expert layers can regroup a stage's ranks (`expert_grid_problem`): etp·ep divides tp·cp·dp.
    Scalars or arrays (the sweep's candidates), broadcast."""
    return (tp * cp * dp) % (etp * ep) == 0


def expert_dp(tp, cp, dp, ep, etp):
    """The expert-data-parallel degree: the replicas of each expert shard among a stage's tp·cp·dp ranks,
    tp·cp·dp / (etp·ep) (Megatron-Core's expert RankGenerator dp; at least 1). Scalars or arrays."""
    return np.maximum(tp * cp * dp // (etp * ep), 1)


def expert_tp_needs_sp(tp, etp):
    """Where the experts' tensor-parallel degree needs sequence parallelism: etp other than tp with tp > 1 (the
    expert layers then take each rank's own T/tp tokens; Megatron-Core: expert with tensor parallelism needs
    --sequence-parallel, model_parallel_config.py). Scalars or arrays."""
    return (etp != tp) & (tp > 1)


def expert_grid_problem(tp, cp, dp, ep, etp) -> str:
    """The message for a layout whose expert layers cannot regroup its ranks: Megatron-Core builds the experts'
    groups from the same tp·cp·dp ranks of a pipeline stage as etp × ep × expert-dp (megatron/core/
    parallel_state.py initialize_model_parallel: `expert_tensor_model_pipeline_parallel_size` must divide the
    world size, the expert RankGenerator's dp = tp·cp·dp / (etp·ep)), so etp·ep must divide tp·cp·dp. With
    etp = tp (the default) this is Megatron's older rule that ep divide dp·cp."""
    if etp == tp:
        return f"ep({ep}) must divide dp({dp}) * cp({cp}) = {dp * cp}"
    return (f"etp({etp}) * ep({ep}) = {etp * ep} must divide tp({tp}) * cp({cp}) * dp({dp}) = {tp * cp * dp} "
            f"(the expert layers regroup a stage's ranks as etp x ep x expert-dp)")


def recompute_label(recompute: str, recompute_layers: int = 0, modules=DEFAULT_RECOMPUTE_MODULES,
                    recompute_group: int = 1) -> str:
    """The recompute mode as printed: 'full (first N layers per stage)' with Layout.recompute_layers, 'full (a
    checkpoint every N layers)' with Layout.recompute_group, 'selective (mla_up_proj, moe_act)' where the stack's
    recompute_modules are not the default core attention."""
    if recompute == "selective" and tuple(modules) != DEFAULT_RECOMPUTE_MODULES:
        return f"selective ({', '.join(modules)})"
    if recompute_group > 1:
        return f"{recompute} (a checkpoint every {recompute_group} layers)"
    return f"{recompute} (first {recompute_layers} layers per stage)" if recompute_layers else recompute


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A parallel layout. `dp` may be None and is then derived as num_gpus / (tp·cp·pp)."""

    num_gpus: int
    tp: int = 1
    pp: int = 1
    dp: int | None = None
    cp: int = 1
    ep: int = 1
    # the routed experts' tensor-parallel degree (Megatron-Core --expert-tensor-parallel-size); None: tp. The
    # tp·cp·dp ranks of a pipeline stage are regrouped for the expert layers as etp × ep × expert-dp
    etp: int | None = None
    vpp: int = 1
    micro_batch_size: int = 1
    zero: int = 0  # 0 none, 1 optimizer, 2 + gradients, 3 + parameters (= FSDP full shard)
    shard_group_size: int | None = None  # ZeRO/FSDP shard group (HSDP); None: the whole DP group
    recompute: str = "none"
    # with recompute 'full': layers recomputed per virtual pipeline stage, the first ones (Megatron-LM
    # --recompute-method block --recompute-num-layers N, NeMo activations_checkpoint_method block); 0: all
    recompute_layers: int = 0
    # with recompute 'full': layers per checkpoint, N (Megatron --recompute-method uniform --recompute-num-layers N):
    # each group of N layers keeps only its input and re-creates all N layers at once in backward; 1: every layer
    recompute_group: int = 1
    sequence_parallel: bool = False
    schedule: str = "1f1b"
    cp_algorithm: str = "ring"  # ring (Megatron p2p ring attention) or ulysses (all-to-all)
    dp_mode: str = "ddp"
    layers_per_stage: tuple[int, ...] | None = None  # uneven pipeline split (per rank, or per virtual stage)
    # Megatron-Core's --account-for-{embedding,loss}-in-pipeline-split: the embedding / the loss counts as
    # one layer in the split (spec.placement.megatron_split); load_scenario then sets layers_per_stage
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False

    def __post_init__(self):
        for name in ("num_gpus", "tp", "pp", "cp", "ep", "vpp", "micro_batch_size"):  # whole, within BOUNDS
            object.__setattr__(self, name, check_count(name, getattr(self, name)))
        tcp = self.tp * self.cp * self.pp
        if self.dp is None:
            if self.num_gpus % tcp:
                raise InputError(f"num_gpus({self.num_gpus}) is not divisible by tp({self.tp}) * cp({self.cp}) * "
                                 f"pp({self.pp}) = {tcp}, so dp cannot be derived")
            object.__setattr__(self, "dp", self.num_gpus // tcp)
        object.__setattr__(self, "dp", check_count("dp", self.dp))
        if tcp * self.dp != self.num_gpus:
            raise InputError(f"tp({self.tp}) * cp({self.cp}) * pp({self.pp}) * dp({self.dp}) = {tcp * self.dp} "
                             f"!= num_gpus({self.num_gpus})")
        if self.etp is None:
            object.__setattr__(self, "etp", self.tp)
        object.__setattr__(self, "etp", check_count("etp", self.etp))
        if not expert_grid_fits(self.tp, self.cp, self.dp, self.ep, self.etp):
            raise InputError(expert_grid_problem(self.tp, self.cp, self.dp, self.ep, self.etp))
        check_zero(self.zero, scalar=True)
        if self.shard_group_size is not None:
            object.__setattr__(self, "shard_group_size", check_count("shard_group_size", self.shard_group_size))
            if self.zero == 0:
                raise InputError("shard_group_size needs zero >= 1")
            if self.dp % self.shard_group_size:
                raise InputError(f"shard_group_size({self.shard_group_size}) must divide dp({self.dp})")
        check_choice("recompute", self.recompute, RECOMPUTE)
        if self.recompute_layers != 0:
            object.__setattr__(self, "recompute_layers", check_count("recompute_layers", self.recompute_layers))
            if self.recompute != "full":
                raise InputError(f"recompute_layers({self.recompute_layers}) needs recompute = 'full' (the layers "
                                 f"fully recomputed per stage), got {self.recompute!r}")
        object.__setattr__(self, "recompute_group", check_count("recompute_group", self.recompute_group))
        if self.recompute_group > 1 and (self.recompute != "full" or self.recompute_layers):
            raise InputError(f"recompute_group({self.recompute_group}) needs recompute = 'full' over every layer "
                             f"(Megatron's uniform method), got {self.recompute!r}"
                             + (f" with recompute_layers {self.recompute_layers}" if self.recompute_layers else ""))
        check_choice("schedule", self.schedule, SCHEDULES)
        check_choice("cp_algorithm", self.cp_algorithm, CP_ALGORITHMS)
        check_choice("dp_mode", self.dp_mode, DP_MODES)
        if not isinstance(self.sequence_parallel, bool):
            raise InputError(f"sequence_parallel must be true or false, got {self.sequence_parallel!r}")
        if self.vpp > 1 and not family(self.schedule).takes_vpp:
            raise InputError(f"vpp({self.vpp}) > 1 needs schedule = 'interleaved', got {self.schedule!r}")
        if family(self.schedule).takes_vpp and self.pp == 1:
            raise InputError(f"schedule {self.schedule!r} needs pp > 1")
        for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.layers_per_stage is not None:
            # one entry per rank, or one per virtual stage (torchtitan's and Megatron's accounted splits)
            object.__setattr__(self, "layers_per_stage", stage_layers(
                self.layers_per_stage, self.pp, stages=family(self.schedule).num_stages(self.pp, self.vpp)))

    def to_dict(self, global_batch_size: int) -> dict:
        """The layout as `estimate` and `memory` print it in JSON (one builder for both): its fields, the label and
        the global batch with the microbatches it makes."""
        return {"label": self.label, "num_gpus": self.num_gpus, "tp": self.tp, "pp": self.pp, "dp": self.dp,
                "cp": self.cp, "ep": self.ep, "etp": self.etp, "vpp": self.vpp, "zero": self.zero,
                "shard_group_size": self.shard_group_size, "recompute": self.recompute,
                "recompute_layers": self.recompute_layers, "recompute_group": self.recompute_group,
                "sequence_parallel": self.sequence_parallel,
                "micro_batch_size": self.micro_batch_size, "global_batch_size": global_batch_size,
                "num_microbatches": self.num_microbatches(global_batch_size), "schedule": self.schedule,
                "cp_algorithm": self.cp_algorithm, "dp_mode": self.dp_mode,
                "layers_per_stage": list(self.layers_per_stage) if self.layers_per_stage else None,
                "account_for_embedding_in_pipeline_split": self.account_for_embedding_in_pipeline_split,
                "account_for_loss_in_pipeline_split": self.account_for_loss_in_pipeline_split}

    @property
    def label(self) -> str:
        """Canonical short label (`layout_label`)."""
        return layout_label(self.tp, self.cp, self.pp, self.dp, self.ep, self.vpp, self.etp)

    @property
    def accounted_in_split(self) -> tuple[str, ...]:
        """The parts counted as a layer in the pipeline split: () or some of ("embedding", "loss")."""
        return tuple(part for part, on in (("embedding", self.account_for_embedding_in_pipeline_split),
                                           ("loss", self.account_for_loss_in_pipeline_split)) if on)

    @property
    def model_parallel_size(self) -> int:
        return self.tp * self.cp * self.pp

    def num_microbatches(self, global_batch_size: int) -> int:
        """m = B / (dp·b): microbatches per DP replica per step (exact; validate.py checks divisibility)."""
        return global_batch_size // (self.dp * self.micro_batch_size)

    @property
    def pipeline_chunks(self) -> int:
        """Model chunks per pipeline rank (the schedule family's: vpp for interleaved, 2 for V and DualPipe)."""
        return family(self.schedule).chunks_per_rank(self.vpp)
