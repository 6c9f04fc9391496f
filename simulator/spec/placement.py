"""Where the model lives: layers, embeddings and heads of each pipeline rank ("stage"), per schedule
family, and the parameters resident on a rank by sharding class (one count for memory, compute and
communication).

Chunks (model slices of consecutive layers) are placed on ranks as the schedules do (each schedule
family's stage geometry, simulator/schedules/family.py):
- gpipe, 1f1b, zb-h1, zb-h2, pipedream: pp chunks, chunk i on rank i (Megatron; an explicit uneven
  `layers_per_stage` gives rank i that many consecutive layers; one with an entry per chunk, as
  `megatron_split` gives for interleaved and V schedules, gives each chunk its layers);
- interleaved: pp·v chunks, chunk c on rank c mod pp (Narayanan et al. 2021 §2.2.2);
- zb-v, dualpipev: 2·pp chunks in a V: rank i holds chunks i and 2pp−1−i (Qi et al. 2024, ZB-V;
  deepseek-ai/DualPipe README), so rank 0 holds both the embedding and the LM head;
- dualpipe: pp chunks, rank r holds chunks r and pp−1−r (two copies of the model in the pipeline:
  DeepSeek-V3 report §3.2.1, "2× parameters"), so ranks 0 and pp−1 hold embedding and head; an
  uneven `layers_per_stage` gives the layers of each of the pp chunks.
The input embedding sits with the first chunk, the final norm and LM head with the last chunk; a tied
embedding on a different rank than the head gets its own copy there (Megatron-LM keeps a copy of the
word embeddings on the last stage and all-reduces their gradients).

Parameters resident on a rank (formulas.md §1.5, Megatron-LM `theoretical_memory_usage.py`):
    Ψ_rank = Ψ_tp / t + Ψ_rep + Ψ_exp / (e · u)
- Ψ_tp: tensor-parallel weights (QKV/out projections, dense and shared-expert MLPs, vocab-parallel
  embedding and LM head), split over t;
- Ψ_rep: weights every TP rank keeps whole: norms, MoE router, row-parallel biases, QK-norm, MLA
  down-projections, learned position table;
- Ψ_exp: routed experts, split over e (expert parallel) and u (expert tensor parallel, = tp by default).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..schedules import family
from ..spec.model import ModelSpec, stage_layer_counts


@dataclass(frozen=True, kw_only=True)
class StagePlacement:
    """Per-rank contents of a pipeline; every array has one entry per rank (shape (pp,))."""

    layers: np.ndarray  # transformer layers held (all chunks; dualpipe counts both copies)
    moe_layers: np.ndarray  # of which have routed experts
    dense_layers: np.ndarray
    chunks: int  # model chunks per rank
    embedding: np.ndarray  # copies of the input embedding (0/1)
    head: np.ndarray  # copies of final norm + LM head (0/1)
    tied_copy: np.ndarray  # extra copy of a tied embedding on a head rank (0/1)


def uneven_split(num_layers: int, pp: int) -> tuple[int, ...] | None:
    """Layers per stage when pp does not divide num_layers: ceil(L/pp) everywhere, one fewer on the last
    stage, then also on the first (deficit ceil(L/pp)·pp − L of 1 or 2: the stages that also hold the
    LM head and the embedding, as Llama 3 405B's 126 layers ran on pp 16, Dubey et al. 2024 §3.3.2);
    None when the deficit is larger (or when pp divides L). The sweep's split and estimate's default."""
    L, pp = int(num_layers), int(pp)
    if L % pp == 0 or pp > L:
        return None
    base = -(-L // pp)
    deficit = base * pp - L
    if deficit > 2 or pp < deficit:
        return None
    split = [base] * pp
    split[-1] -= 1
    if deficit == 2:
        split[0] -= 1
    return tuple(split)


def torchtitan_split(num_layers: int, stages: int, first_less: int = 1, last_less: int = 1) -> tuple[int, ...]:
    """Transformer layers per (virtual) stage under torchtitan's default split: L + first + last "effective"
    layers spread evenly over the stages, the remainder one each to the first stages, and the first (last)
    stage holding `first_less` (`last_less`) layers fewer for the embedding (norm and output).

    Source: torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part (input_weight =
    pipeline_parallel_first_stage_less_layers, output_weight = ..._last_stage_less_layers, both 1 by
    default). E.g. 32 layers on 4 stages: 34 effective, 9, 9, 8, 8, so 8, 9, 8, 7. The 2024 releases'
    generate_split_points (torchtitan/parallelisms/pipelining_utils.py at 9dec370: base L // S on the first stage,
    one more on the next L mod S, the last taking the rest) gives the same split where L + 2 is a multiple of S,
    as Llama 3.1 405B's 126 layers on 8 or 16 stages (tests/test_torchtitan_split.py)."""
    if stages == 1:
        return (num_layers,)
    n = num_layers + first_less + last_less
    per, extra = divmod(n, stages)
    if per == 0 or first_less > per or last_less > per:
        raise InputError(f"torchtitan cannot split {num_layers} layers (+{first_less} +{last_less}) over {stages} "
                         f"pipeline stages")
    split = [per + (i < extra) for i in range(stages)]
    split[0] -= first_less
    split[-1] -= last_less
    # the stages take layers in order until none are left (the last ones may get fewer than their share)
    out, left = [], num_layers
    for s in split:
        out.append(min(s, left))
        left -= out[-1]
    out[-1] += left
    return tuple(out)


# How a framework splits layers that its pipeline's stages do not divide ([runs] pipeline_split of a stack):
#   first-last: one stage per rank, the first and/or last stage one layer fewer (`uneven_split`, deficit <= 2;
#               Megatron-LM's --decoder-first/last-pipeline-num-layers); several stages per rank need pp·chunks | L
#   torchtitan: `torchtitan_split` over the pp·chunks (virtual) stages, any schedule and deficit
PIPELINE_SPLITS = ("first-last", "torchtitan")


def default_split(num_layers: int, pp: int, chunks: int = 1, rule: str = "first-last") -> tuple[int, ...] | None:
    """Layers of each (virtual) stage when the pp·chunks stages do not divide `num_layers`, as the framework's
    `rule` (PIPELINE_SPLITS) splits them: one entry per rank for one stage per rank, one per virtual stage
    (layer order) otherwise; None where the stages divide the layers or the rule makes no split."""
    L, pp, chunks = int(num_layers), int(pp), int(chunks)
    S = pp * chunks
    if S <= 1 or L % S == 0:
        return None
    if rule == "torchtitan":
        if S > L:
            return None
        try:
            split = torchtitan_split(L, S)
        except InputError:
            return None
        return split if min(split) >= 1 else None  # (a stage without layers: not a split parasim models)
    return uneven_split(L, pp) if chunks == 1 else None


# the Layout fields (and scenario keys) of Megatron-Core's flags, with the part of the model each counts as a layer
ACCOUNT_FLAGS = {"account_for_embedding_in_pipeline_split": "embedding",
                 "account_for_loss_in_pipeline_split": "loss"}


def megatron_split(num_layers: int, pp: int, vpp: int = 1, *, embedding: bool = False,
                   loss: bool = False) -> tuple[int, ...]:
    """Transformer layers of each of the pp·vpp virtual stages (layer order: stage s on rank s mod pp)
    under Megatron-Core's `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split`:
    the embedding (loss: output layer + loss) counts as one layer, so n = L + [embedding] + [loss] "layers"
    are split evenly, n/(pp·vpp) per virtual stage, and the first (last) virtual stage builds one
    transformer layer fewer (it may build none: a standalone embedding or loss stage).

    Source: NVIDIA/Megatron-LM megatron/core/transformer/transformer_block.py `get_num_layers_to_build`
    (num_layers += 1 per flag; n % pp == 0; with vpp, (n/pp) % vpp == 0; minus one on the first virtual
    stage of pp rank 0 and the last of rank pp−1), the same checks in transformer_config.py
    `__post_init__` and training/arguments.py, and transformer_layer.py `get_transformer_layer_offset`
    (every later stage's offset minus one). E.g. L = 126, pp = 16, both flags: 128/16 = 8, so
    7, 8 × 14, 7; Megatron's test_cuda_graphs.py case L = 14, pp = 4, vpp = 2: 1, 2 × 6, 1.

    `vpp` is the model chunks per rank in layer order (the interleaved schedule's vpp; 2 for zb-v and
    dualpipev; 1 otherwise). InputError (one line naming the flags, and what to pass instead) when
    Megatron's divisibility check fails.
    """
    L, pp, vpp = int(num_layers), int(pp), int(vpp)
    n = L + bool(embedding) + bool(loss)
    if n % pp or (n // pp) % vpp:
        raise InputError(_megatron_split_error(L, pp, vpp, bool(embedding), bool(loss)))
    split = [n // (pp * vpp)] * (pp * vpp)
    if embedding:
        split[0] -= 1
    if loss:
        split[-1] -= 1
    return tuple(split)


def _megatron_split_error(L: int, pp: int, vpp: int, embedding: bool, loss: bool) -> str:
    """The message of a failed `megatron_split`: Megatron's check, then the flags (or pp·vpp) that work."""
    def flags(e, l):
        return " and ".join(f"--{k.replace('_', '-')}" for k, on in zip(ACCOUNT_FLAGS, (e, l)) if on)

    n, given = L + embedding + loss, flags(embedding, loss)
    parts = " and ".join(p for p, on in (("the embedding", embedding), ("the loss", loss)) if on)
    what = (f"is not divisible by pp({pp})" if n % pp else
            f"over pp({pp}) is {n // pp} per pipeline rank, not divisible by vpp({vpp})")
    msg = (f"{given}: num_hidden_layers({L}) + {embedding + loss} ({parts}) = {n} {what}" if given
           else f"num_hidden_layers({L}) {what}")
    S = pp * vpp
    works = [(e, l) for e in (True, False) for l in (True, False)
             if (e, l) != (embedding, loss) and (L + e + l) % S == 0]
    if works:
        e, l = works[0]
        fewer = " and ".join(w for w, on in (("first", e), ("last", l)) if on)
        return msg + (f"; pass only {flags(e, l)} ({(L + e + l) // S} layers per stage, one fewer on the {fewer})"
                      if e or l else f"; drop {given} ({L} layers split evenly, {L // S} per stage)")
    small = [d for d in range(2, math.isqrt(n) + 1) if n % d == 0]
    fits = sorted({*small, *(n // d for d in small), n})
    return msg + (f"; with {given or 'no flag'}, pp * vpp must divide {n}: "
                  + ", ".join(map(str, fits[:6])) + (", ..." if len(fits) > 6 else ""))


def stage_placement(model: ModelSpec, *, pp: int, vpp: int = 1, schedule: str = "1f1b",
                    layers_per_stage: tuple[int, ...] | None = None) -> StagePlacement:
    """Layers (dense/MoE), embedding and head copies held by each of the `pp` ranks."""
    pp, vpp = int(pp), int(vpp)
    fam = family(schedule)
    if fam.even_pp and pp % 2:
        raise InputError(f"schedule {schedule!r} needs an even pp, got pp({pp})")
    chunk_ranks = fam.stage_ranks(pp, vpp)
    n_chunks = len(chunk_ranks)
    L = model.num_layers
    moe_before = np.concatenate([[0], np.cumsum(model.moe_layer_mask, dtype=np.int64)]).tolist()  # MoE layers < i
    layers = np.zeros(pp, dtype=np.int64)
    moe = np.zeros(pp, dtype=np.int64)
    if layers_per_stage and (fam.geometry == "mirror" or len(layers_per_stage) == n_chunks):
        # one entry per chunk (virtual stage) in layer order, e.g. Megatron's accounted split
        # (megatron_split); DualPipe: the pp stages of the model, rank r holds r and pp−1−r
        counts = stage_layer_counts(L, n_chunks, tuple(layers_per_stage))
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for c, ranks in enumerate(chunk_ranks):
            for r in ranks:
                layers[r] += counts[c]
                moe[r] += moe_before[bounds[c + 1]] - moe_before[bounds[c]]
    elif layers_per_stage:
        # explicit per-rank totals: consecutive layers per rank (chunking does not move MoE layers)
        counts = stage_layer_counts(L, pp, tuple(layers_per_stage))
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for r in range(pp):
            layers[r] = counts[r]
            moe[r] = moe_before[bounds[r + 1]] - moe_before[bounds[r]]
    else:
        if L % n_chunks:
            raise InputError(f"num_hidden_layers({L}) is not divisible by the {n_chunks} pipeline chunks of "
                             f"schedule {schedule!r} with pp({pp})" + (f", vpp({vpp})" if vpp > 1 else ""))
        per = L // n_chunks
        for c, ranks in enumerate(chunk_ranks):
            n_moe = moe_before[(c + 1) * per] - moe_before[c * per]
            for r in ranks:
                layers[r] += per
                moe[r] += n_moe
    embedding = np.zeros(pp, dtype=np.int64)
    head = np.zeros(pp, dtype=np.int64)
    for r in chunk_ranks[0]:
        embedding[r] = 1
    for r in chunk_ranks[-1]:
        head[r] = 1
    tied = (head & (1 - embedding)) if model.tie_word_embeddings else np.zeros(pp, dtype=np.int64)
    chunks = fam.chunks_per_rank(vpp)
    return StagePlacement(layers=layers, moe_layers=moe, dense_layers=layers - moe, chunks=chunks,
                          embedding=embedding, head=head, tied_copy=tied)


def stage_layer_split(model: ModelSpec, *, pp: int, vpp: int = 1, schedule: str = "1f1b",
                      layers_per_stage=None) -> tuple[np.ndarray, np.ndarray]:
    """(dense layers, MoE layers) per virtual stage, in layer order, following `moe_layer_mask`.

    `layers_per_stage` (uneven split) has one entry per virtual stage, or one per pipeline rank (the
    Layout convention, as in the memory model): a rank's layers are then spread as evenly as possible
    over its chunks, earlier chunks taking the remainder (dualpipe: one entry per model stage).
    """
    fam = family(schedule)
    S = fam.num_stages(pp, vpp)
    if layers_per_stage is not None and len(layers_per_stage) == pp and S != pp:
        ranks = fam.stage_rank(pp, vpp)
        per_vs = np.zeros(S, dtype=np.int64)
        for r in range(pp):
            idx = np.flatnonzero(ranks == r)
            base, rem = divmod(int(layers_per_stage[r]), len(idx))
            per_vs[idx] = base + (np.arange(len(idx)) < rem)
        layers_per_stage = tuple(int(x) for x in per_vs)
    if layers_per_stage is not None and len(layers_per_stage) != S:
        raise InputError(f"layers_per_stage has {len(layers_per_stage)} entries, expected one per pipeline rank "
                         f"({pp}) or per virtual stage ({S} for pp={pp}, vpp={vpp}, schedule={schedule!r})")
    counts = stage_layer_counts(model.num_layers, S, tuple(layers_per_stage) if layers_per_stage else None)
    ends = np.cumsum(counts)
    starts = ends - counts
    c = np.concatenate([[0], np.cumsum(model.moe_layer_mask.astype(np.int64))])
    n_moe = c[ends] - c[starts]
    return (counts - n_moe).astype(float), n_moe.astype(float)


# ---- parameter categories ---------------------------------------------------------------------
def attention_param_split(model: ModelSpec) -> tuple[int, int]:
    """(TP-sharded, replicated) parameters of one attention block (sum = model.attention_params()).

    Replicated: the row-parallel output bias (h), QK-norm weights (2·d_h), and for MLA the down
    projections h·r_q and h·(r_kv + d_r) with their latent norms r_q + r_kv (Megatron-Core MLA builds
    them duplicated on every TP rank).
    """
    total = model.attention_params()
    rep = model.hidden_size if model.out_bias else 0
    if model.qk_norm:
        rep += 2 * model.head_dim
    if model.is_mla:
        h = model.hidden_size
        rep += h * (model.kv_lora_rank + model.qk_rope_head_dim) + model.kv_lora_rank
        if model.q_lora_rank:
            rep += h * model.q_lora_rank + model.q_lora_rank
    return total - rep, rep


def ffn_param_split(model: ModelSpec, ffn_hidden_size: int | None = None) -> tuple[int, int]:
    """(TP-sharded, replicated) parameters of one dense FFN: the down-projection bias (h) is replicated."""
    total = model.ffn_params(ffn_hidden_size)
    rep = model.hidden_size if model.mlp_bias else 0
    return total - rep, rep


def layer_param_split(model: ModelSpec) -> dict[str, np.ndarray]:
    """Per-layer parameter counts by sharding class for a dense and an MoE layer.

    Returns {'dense': (tp, rep, exp), 'moe': (tp, rep, exp)}: counts for one layer of each kind.
    The three parts add up to `model.layer_params()` of that layer kind.
    """
    a_tp, a_rep = attention_param_split(model)
    norms = model.norms_per_layer * model.norm_params
    f_tp, f_rep = ffn_param_split(model)
    dense = (a_tp + f_tp, a_rep + f_rep + norms, 0)
    if not model.is_moe:
        return {"dense": dense, "moe": dense}
    shared = model.glu_matrices * model.hidden_size * model.shared_expert_ffn_hidden_size
    moe = (a_tp + shared, a_rep + norms + model.router_params, model.num_experts * model.expert_params())
    return {"dense": dense, "moe": moe}


def stage_param_split(model: ModelSpec, placement: StagePlacement) -> dict[str, np.ndarray]:
    """Unsharded parameter counts per rank by sharding class: {'tp', 'rep', 'exp'}, each shape (pp,).

    Embedding V·h is vocab-parallel (TP-sharded); a learned position table is replicated; the head is
    the final norm (replicated) plus the untied LM head V·h (TP-sharded); `tied_copy` adds V·h on a
    head rank that does not hold the embedding (Megatron's last-stage copy of tied embeddings). The head
    rank also holds the D multi-token-prediction modules (ModelSpec.mtp_module_split) and, where it does not
    hold the embedding, its own copy of it: Megatron-Core's GPTModel builds the embedding on every rank that
    runs the MTP block (`if self.pre_process or self.mtp_process`, megatron/core/models/gpt/gpt_model.py).
    """
    split = layer_param_split(model)
    d, m = split["dense"], split["moe"]
    Vh = model.vocab_size * model.hidden_size
    pos = model.learned_position_embeddings * model.hidden_size
    head_tp = 0 if model.tie_word_embeddings else Vh
    mtp = model.mtp_layers * np.array(model.mtp_module_split()) if model.mtp_layers else np.zeros(3, dtype=np.int64)
    mtp_embedding = placement.head * (1 - placement.embedding) * (1 - placement.tied_copy) * (model.mtp_layers > 0)
    tp = (placement.dense_layers * d[0] + placement.moe_layers * m[0] + placement.embedding * Vh
          + placement.head * (head_tp + mtp[0]) + (placement.tied_copy + mtp_embedding) * Vh)
    rep = (placement.dense_layers * d[1] + placement.moe_layers * m[1] + placement.embedding * pos
           + placement.head * (model.norm_params + mtp[1]))
    exp = placement.moe_layers * m[2] + placement.head * mtp[2]
    return {"tp": tp.astype(np.int64), "rep": rep.astype(np.int64), "exp": exp.astype(np.int64)}


def params_per_rank(split: dict[str, np.ndarray], *, tp, ep, etp=None) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters resident on one rank: Ψ_tp/t + Ψ_rep and Ψ_exp/(e·u), u the experts'
    tensor-parallel degree `etp` (None: t, Megatron's default expert_tensor_parallel_size).

    Shapes: (pp,) for scalar tp/ep, (N, pp) for arrays of shape (N,). Source: formulas.md §1.5.
    """
    t = np.asarray(tp, dtype=float)[..., None]
    e = np.asarray(ep, dtype=float)[..., None]
    u = t if etp is None else np.asarray(etp, dtype=float)[..., None]
    dense = split["tp"] / t + split["rep"]
    expert = split["exp"] / (e * u)
    return dense, expert
