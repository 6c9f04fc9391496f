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
