"""Which ops a (virtual) pipeline stage runs per microbatch, grouped by kind (GEMMs, attention, memory-bound),
with how many times each runs in the stage's forward and in its recompute forward: the op list compute.py times.
The ops come from flops.py (GEMMs, attention), memory_ops.py (the stack's elementwise list, the embedding, the
head, FP8 casts) and cp_merge.py (ring context parallelism's merge)."""
from __future__ import annotations

import numpy as np

from . import flops as F
from .cp_merge import cp_merge_ops
from .memory_ops import _embedding_memory_ops, _head_memory_ops, fp8_cast_op, memory_ops, norm_ops

__all__ = ["stage_op_groups"]


def stage_op_groups(model, training, *, tp, cp, ep, micro_batch_size, sequence_parallel, n_dense, n_moe, first, last,
                     recompute, cp_algorithm="ring", etp=None, mtp=0.0):
    """Every op a virtual stage runs, grouped by kind, with per-stage multiplicities (`etp`: the routed experts'
    tensor-parallel degree, None: tp; flops.moe_ops). `mtp`: the multi-token-prediction modules a stage runs
    (ModelSpec.mtp_layers on the head stage): each a layer of the last layer's kind, its projection (flops.mtp_ops)
    and two norms, an embedding lookup and the head again (final norm, LM head, loss); its layer is recomputed as
    the model's layers are (Megatron-Core checkpoints it under recompute_granularity 'full':
    megatron/core/transformer/multi_token_prediction.py), the rest is not.

    Returns [(kind, ops, W, R)]: W[o, j] = how many times op o runs on virtual stage j per microbatch
    (layers holding it; 1 for the embedding on the first and the head on the last stage); R[o, j] = the
    same for the recompute forward, W times the op's `flops.recomputed_fraction` (selective: the stack's
    recompute_modules, of each layer's kind; full: every layer op; op: torchtitan's op-level selective AC; never
    the embedding or head).
    """
    kw = dict(seq_length=training.seq_length, tp=tp, cp=cp, micro_batch_size=micro_batch_size)
    mkw = dict(tp=tp, cp=cp, micro_batch_size=micro_batch_size)
    flash = training.flash_attention
    mtp = 0.0 * n_dense + mtp  # (the MTP modules' layers run as the model's last layer's kind)
    if model.mtp_layer_is_moe:
        n_moe = n_moe + mtp
    else:
        n_dense = n_dense + mtp
    L = n_dense + n_moe
    zero = 0.0 * L
    has_dense, has_moe = bool(np.any(n_dense)), bool(np.any(n_moe))

    def share(op, gemm=True, moe=False):  # the recompute forward's share of the op (flops.recomputed_fraction)
        return F.recomputed_fraction(op.name, recompute, model, core_attention=op.core_attention,
                                     flash_attention=flash, gemm=gemm, modules=training.stack.recompute_modules,
                                     moe_layer=moe, load_factor=training.moe_load_factor)

    def rerun(op, gemm=True):  # an op of every layer: its recompute count over the stage's dense and MoE layers
        return n_dense * share(op, gemm) + n_moe * share(op, gemm, moe=True)

    g_ops, g_w, g_r = [], [], []
    for op in F.projection_ops(model, sequence_parallel=sequence_parallel, **kw):
        g_ops.append(op); g_w.append(L); g_r.append(rerun(op))  # noqa: E702
    ffn = []
    if has_dense:
        ffn += [(op, n_dense, False) for op in F.dense_mlp_ops(model, **kw)]
    if has_moe:
        ffn += [(op, n_moe, True) for op in F.moe_ops(model, ep=ep, sequence_parallel=sequence_parallel,
                                                        load_factor=training.moe_load_factor, etp=etp, **kw)]
    for op, w, moe in ffn:
        g_ops.append(op); g_w.append(w); g_r.append(w * share(op, moe=moe))  # noqa: E702
    casts = [(fp8_cast_op(op, training), w, r) for op, w, r in zip(g_ops, g_w, g_r)
             if op.fp8 and training.precision == "fp8"]  # the FP8 GEMMs' casts (memory-bound, below)
    for op in F.head_ops(model, training, **mkw):
        g_ops.append(op); g_w.append(last + mtp); g_r.append(zero)  # noqa: E702
    if model.mtp_layers:
        for op in F.mtp_ops(model, training, **mkw):
            g_ops.append(op); g_w.append(mtp); g_r.append(zero)  # noqa: E702

    a_ops = list(F.attention_ops(model, attention_flops="causal" if flash else "full", flash_attention=flash, **kw))
    n_att = len(a_ops) if not flash else 1
    a_w = [L] * n_att
    a_r = [rerun(op) for op in a_ops[:n_att]]

    m_ops, m_w, m_r = [], [], []
    mem = memory_ops(model, training, moe=False, ep=ep, sequence_parallel=sequence_parallel, **mkw)
    for op in mem:
        if op.ffn and not has_dense:
            continue
        w, r = (n_dense, n_dense * share(op, gemm=False)) if op.ffn else (L, rerun(op, gemm=False))
        m_ops.append(op); m_w.append(w); m_r.append(r)  # noqa: E702
    if has_moe:
        for op in memory_ops(model, training, moe=True, ep=ep, sequence_parallel=sequence_parallel, etp=etp, **mkw):
            if op.ffn:
                m_ops.append(op); m_w.append(n_moe); m_r.append(n_moe * share(op, gemm=False, moe=True))  # noqa: E702
    for op, w, r in casts:
        m_ops.append(op); m_w.append(w); m_r.append(r)  # noqa: E702
    for op in cp_merge_ops(model, training, cp_algorithm=cp_algorithm, **mkw):  # ring CP's merge (cp_merge.py)
        m_ops.append(op); m_w.append(L); m_r.append(rerun(op, gemm=False))  # noqa: E702
    for op in _embedding_memory_ops(model, training, sequence_parallel=sequence_parallel, **mkw):
        m_ops.append(op); m_w.append(first + mtp); m_r.append(zero)  # noqa: E702
    for op in _head_memory_ops(model, training, sequence_parallel=sequence_parallel, **mkw):
        m_ops.append(op); m_w.append(last + mtp); m_r.append(zero)  # noqa: E702
    if model.mtp_layers:  # each module's enorm and hnorm over the rank's tokens (sequence-parallel shards with SP)
        tokens = micro_batch_size * training.seq_length / cp / (tp if sequence_parallel else 1)
        for op in norm_ops("mtp_norms", training, tokens * model.hidden_size, norm=model.norm):
            m_ops.append(op); m_w.append(2 * mtp); m_r.append(zero)  # noqa: E702
    return [("gemm", g_ops, np.array(g_w), np.array(g_r)), ("attention", a_ops, np.array(a_w), np.array(a_r)),
            ("memory", m_ops, np.array(m_w), np.array(m_r))]
