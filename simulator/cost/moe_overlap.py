"""What an MoE layer's shared experts hide of its expert-parallel all-to-alls (Megatron-Core
`--moe-shared-expert-overlap`; the stack's `moe_shared_expert_overlap`)."""
from __future__ import annotations

import numpy as np


def shared_expert_hidden_s(dispatch_s, combine_s, up_f_s, down_f_s, up_b_s, down_b_s):
    """(forward, backward) seconds of one MoE layer's EP all-to-alls that run beside its shared experts.

    Megatron-Core with `moe_shared_expert_overlap` (the alltoall and flex dispatchers,
    megatron/core/transformer/moe/token_dispatcher.py and shared_experts.py at d98e8a6) runs the shared
    experts on a second CUDA stream: in forward their FC1 and activation (`linear_fc1_forward_and_act`)
    while the dispatch all-to-all runs, their FC2 (`linear_fc2_forward`) while the combine runs. In backward
    the sequence numbers it sets launch each gradient all-to-all first, so FC2's backward runs beside the
    combine's gradient all-to-all and FC1's (after the routed FC1's, `_BackwardStreamWait`) beside the
    dispatch's. A collective hides under at most the GEMMs beside it:
        forward  = min(t_d, U_f) + min(t_c, D_f)
        backward = min(t_c', D_b) + min(t_c', U_b)
    with t_d, t_c the dispatch and combine all-to-alls, t_c' each backward one (both move combine-precision
    gradients: cost/comm.py ep_comm), U and D the shared FC1 and FC2 GEMM times (backward: input and weight
    gradients). The shared activation is left out of U (a lower bound of what hides: it is the shared
    experts' share of one memory-bound pass). Shapes broadcast."""
    d, c = np.asarray(dispatch_s, dtype=float), np.asarray(combine_s, dtype=float)
    fwd = np.minimum(d, up_f_s) + np.minimum(c, down_f_s)
    bwd = np.minimum(c, down_b_s) + np.minimum(c, up_b_s)
    return fwd, bwd


def combined_pair_period_s(pre_f, mlp_f, pre_b, pre_dw, mlp_b, mlp_dw, dispatch_f, combine_f, dispatch_b, combine_b,
                           *, pairs: int = 16):
    """Seconds per merged layer pair in the steady state of Megatron-Core's combined 1F1B
    (`--overlap-moe-expert-parallel-comm`): the forward of layer j of one micro-batch and the backward of a layer
    of another, on a compute and a communication stream, in the order of
    megatron/core/models/common/model_chunk_schedule_plan.py `TransformerLayerSchedulePlan.run` (d98e8a6):

        comm:    combine_b | dispatch_f -> dispatch_b | combine_f
        compute: pre_f     | mlp_b -> mlp_dw -> mlp_f | pre_b -> pre_dw

    (pre: the attention, pre-MLP norm, router and permute; mlp: the routed experts). Each op waits for its stream
    and its input: mlp_b for combine_b, dispatch_f for pre_f, dispatch_b for mlp_b, mlp_f for dispatch_f,
    combine_f for mlp_f, pre_b for dispatch_b; the next pair's combine_b for this pre_b (the backward's input
    gradient) and its pre_f for this combine_f (the forward's output). A chain of `pairs` is replayed (a max-plus
    recurrence: no closed form covers every ordering of the ten durations) and its steady period returned: the
    last half's time per pair. Without communication it is the compute's sum; with no compute, the comm's."""
    z = np.zeros(np.broadcast_shapes(*(np.shape(x) for x in (pre_f, mlp_f, pre_b, pre_dw, mlp_b, mlp_dw, dispatch_f,
                                                              combine_f, dispatch_b, combine_b))))
    comp = comm = pb_out = cf_out = z
    marks = []
    for _ in range(pairs):
        cb = np.maximum(comm, pb_out) + combine_b
        pf = np.maximum(comp, cf_out) + pre_f
        mb = np.maximum(pf, cb) + mlp_b
        df = np.maximum(cb, pf) + dispatch_f
        dw = mb + mlp_dw
        db = np.maximum(df, mb) + dispatch_b
        mf = np.maximum(dw, df) + mlp_f
        cf = np.maximum(db, mf) + combine_f
        pb = np.maximum(mf, db) + pre_b
        comp, comm, pb_out, cf_out = pb + pre_dw, cf, pb, cf
        marks.append(np.maximum(comp, comm))
    half = pairs // 2
    return (marks[-1] - marks[half - 1]) / (pairs - half)


def combined_1f1b_share(pp, vpp, num_microbatches):
    """The share of a rank's forward and backward passes that Megatron-Core's combined 1F1B merges, averaged over
    the pipeline ranks, (N,) from (N,) pp, vpp (model chunks per rank) and micro-batches m. Without pipelining
    (combined_1f1b.py `combined_1f1b_schedule_for_no_pipelining`) the first forward and the last backward run
    alone: (m − 1)/m. With it (interleaved, schedules.py `get_pp_rank_microbatches`), rank r runs
    w_r = min(m·v, 2(p − r − 1) + (v − 1)·p + 1) warm-up forwards (the + 1: the extra one the overlap schedules)
    and as many cool-down backwards alone: (m·v − w_r)/(m·v)."""
    pp, v, m = (np.asarray(x, dtype=float) for x in (pp, vpp, num_microbatches))
    total = m * v
    r = np.arange(int(np.max(pp, initial=1)))[None, :]
    warm = np.minimum(total[:, None], 2 * (pp[:, None] - r - 1) + (v[:, None] - 1) * pp[:, None] + 1)
    valid = r < pp[:, None]
    piped = np.where(valid, (total[:, None] - warm) / total[:, None], 0.0).sum(axis=1) / pp
    return np.where(pp > 1, piped, (m - 1) / m)
