"""Which layers, embeddings and heads live on each pipeline rank ("stage"), per schedule family.

Chunks (model slices of consecutive layers) are placed on ranks as the schedules do:
- gpipe, 1f1b, zb-h1, zb-h2, pipedream: pp chunks, chunk i on rank i (Megatron; an explicit uneven
  `layers_per_stage` gives rank i that many consecutive layers);
- interleaved: pp·v chunks, chunk c on rank c mod pp (Narayanan et al. 2021 §2.2.2);
- zb-v, dualpipev: 2·pp chunks in a V: rank i holds chunks i and 2pp−1−i (Qi et al. 2024, ZB-V;
  deepseek-ai/DualPipe README), so rank 0 holds both the embedding and the LM head;
- dualpipe: pp chunks, rank r holds chunks r and pp−1−r (two copies of the model in the pipeline:
  DeepSeek-V3 report §3.2.1, "2× parameters"), so ranks 0 and pp−1 hold embedding and head; an
  uneven `layers_per_stage` gives the layers of each of the pp chunks.
The input embedding sits with the first chunk, the final norm and LM head with the last chunk; a tied
embedding on a different rank than the head gets its own copy there (Megatron-LM keeps a copy of the
word embeddings on the last stage and all-reduces their gradients).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
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


def _chunk_ranks(schedule: str, pp: int, vpp: int) -> list[list[int]]:
    """For each chunk (in model order) the ranks holding it."""
    if schedule == "interleaved":
        return [[c % pp] for c in range(pp * vpp)]
    if schedule in ("zb-v", "dualpipev"):
        return [[c if c < pp else 2 * pp - 1 - c] for c in range(2 * pp)]
    if schedule == "dualpipe":
        if pp % 2:
            raise InputError(f"schedule 'dualpipe' needs an even pp, got pp({pp})")
        return [sorted({c, pp - 1 - c}) for c in range(pp)]
    return [[c] for c in range(pp)]


def stage_placement(model: ModelSpec, *, pp: int, vpp: int = 1, schedule: str = "1f1b",
                    layers_per_stage: tuple[int, ...] | None = None) -> StagePlacement:
    """Layers (dense/MoE), embedding and head copies held by each of the `pp` ranks."""
    pp, vpp = int(pp), int(vpp)
    chunk_ranks = _chunk_ranks(schedule, pp, vpp)
    n_chunks = len(chunk_ranks)
    L = model.num_layers
    moe_mask = model.moe_layer_mask
    layers = np.zeros(pp, dtype=np.int64)
    moe = np.zeros(pp, dtype=np.int64)
    if layers_per_stage and schedule == "dualpipe":
        # DualPipe: layers_per_stage gives the pp chunks (stages of the model); rank r holds r and pp−1−r
        counts = stage_layer_counts(L, pp, tuple(layers_per_stage))
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for c, ranks in enumerate(chunk_ranks):
            for r in ranks:
                layers[r] += counts[c]
                moe[r] += moe_mask[bounds[c]:bounds[c + 1]].sum()
    elif layers_per_stage:
        # explicit per-rank totals: consecutive layers per rank (chunking does not move MoE layers)
        counts = stage_layer_counts(L, pp, tuple(layers_per_stage))
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for r in range(pp):
            layers[r] = counts[r]
            moe[r] = moe_mask[bounds[r]:bounds[r + 1]].sum()
    else:
        if L % n_chunks:
            raise InputError(f"num_hidden_layers({L}) is not divisible by the {n_chunks} pipeline chunks of "
                             f"schedule {schedule!r} with pp({pp})" + (f", vpp({vpp})" if vpp > 1 else ""))
        per = L // n_chunks
        for c, ranks in enumerate(chunk_ranks):
            n_moe = int(moe_mask[c * per:(c + 1) * per].sum())
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
    chunks = {"interleaved": vpp, "zb-v": 2, "dualpipev": 2, "dualpipe": 2}.get(schedule, 1)
    return StagePlacement(layers=layers, moe_layers=moe, dense_layers=layers - moe, chunks=chunks,
                          embedding=embedding, head=head, tied_copy=tied)
