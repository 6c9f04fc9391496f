"""The memory-bound work of ring context-parallel attention beside its attention kernels: each step's partial
output merged by its log-sum-exp in the forward, the gradients accumulated over the steps in the backward, and
the copies the implementation makes of K and V (Stack.cp_ring_merge names the implementation).

Per layer pass on the slowest rank (rank c-1 of the load-balanced ring, whose steps after the first all keep
every query row), with Q = b·(s/c)·q/t and K = b·(s/c)·kv/t elements (the rank's queries and its key, or value,
heads as the attention call gets them) and e the activation bytes. Tensors of O(tokens·heads) elements (the
log-sum-exps, L = b·(s/c)·heads/t fp32 values) are a row of their own: few bytes, but one small kernel per
update (Transformer Engine: one fused correction per step, 12·L; torch: five, 56·L per step).

"te": Transformer Engine's AttnFuncWithCPAndKVP2P (transformer_engine/pytorch/attention.py, v1.x; Megatron-Core's
  context parallelism). Forward: K and V concatenated into the first P2P buffer (read + write, 4e·K), the first
  step's output corrected into `out` (`flash_attn_fwd_out_correction_init`, one fused kernel: read + write, 2e·Q)
  and each later step's added (`flash_attn_fwd_out_correction`, jit-fused: read out_i and out, write out, 3e·Q):
      fwd = 4e·K + e·Q·(2 + 3·(c-1))
  Backward: step 0 copies dq (2e·Q), concatenates dk and dv into one dkv (cuDNN fused attention, 4e·K) and copies it
  (4e·K); each later step adds into dq and dkv, either all query rows with the first half of the key rows or the
  second half of the query rows with all key rows (the slower of the two on some rank sets the step):
      bwd = 2e·Q + 8e·K + (c-1)·max(3e·Q + 5e·K, 1.5e·Q + 10e·K)
  Read from the code, not run here (Transformer Engine needs a GPU).

"torch": torch.distributed.tensor.experimental context_parallel (`_templated_ring_attention` and its backward,
  _SDPAMerger with convert_to_f32 = True, the default; torchtitan's and accelerate's context parallelism).
  Forward: key and value made contiguous (torchtitan passes transposed views, 4e·K), K and V concatenated to be sent
  at every step but the last (4e·K each), each step's output cast to fp32 ((e + 4)·Q), each later step merged in
  fp32 as out - sigmoid(lse_i - lse)·(out - out_i) (two subtractions of 12·Q, a broadcast multiply of 8·Q), the
  result cast back ((4 + e)·Q):
      fwd = 4e·K·c + (e + 4)·Q·c + 32·Q·(c-1) + (4 + e)·Q
  Backward: fp32 zero-filled gradient accumulators (4·Q + 8·K), key and value made contiguous (4e·K), K and V
  concatenated to be sent (4e·K per step but the last), at step 0 dk, dv added into the accumulators (2(8 + e)·K),
  flattened (the accumulators keep the views' strides: 16·K) and concatenated in fp32 to be sent (16·K); at each
  later step dk, dv added into the first half of the received ones with a concatenation back ((8 + e)·K + 16·K) and
  the fp32 concatenation sent (16·K); dq added every step ((8 + e)·Q each); the results cast back ((4 + e)·Q,
  (8 + 2e)·K):
      bwd = 4·Q + 8·K + 4e·K·c + 2(8 + e)·K + 32·K + (c-1)·((8 + e)·K + 32·K)
            + (8 + e)·Q·c + (4 + e)·Q + (8 + 2e)·K
  Checked exactly against torch's own functions run on CPU as the last rank of a fake process group, every aten
  op's tensors recorded (tests/test_cp_merge.py).

The forward's broadcast multiply (torch) runs torch's generic elementwise loop: its bytes are a row of their own
(`memory_strided`). Ulysses context parallelism exchanges heads with all-to-alls and runs one attention call:
no merge."""
from __future__ import annotations

import numpy as np

from ..spec.stack import CP_RING_MERGES


def ring_merge_bytes(impl: str, *, q_elems, kv_elems, cp, e: float, lse_elems=0.0) -> dict:
    """{forward, backward, forward_strided, forward_lse, forward_kernels, backward_kernels, lse_kernels} of one
    layer pass's ring merge (module docstring): bytes of the contiguous-operand kernels, of the broadcast ones and
    of the log-sum-exp updates (`lse_elems` = b·(s/c)·heads/t fp32 values: few bytes, one small kernel each), and
    kernel counts; all 0 at cp = 1. `q_elems`, `kv_elems`, `lse_elems`, `cp`: scalars or arrays."""
    Q, K, L, c = (np.asarray(x, dtype=float) for x in (q_elems, kv_elems, lse_elems, cp))
    on = c > 1
    steps = np.maximum(c - 1.0, 0.0)
    if impl == "te":
        fwd = 4 * e * K + e * Q * (2 + 3 * steps)
        bwd = 2 * e * Q + 8 * e * K + steps * np.maximum(3 * e * Q + 5 * e * K, 1.5 * e * Q + 10 * e * K)
        strided, kf, kb = 0.0 * Q, 1 + c, 3 * c
        lse, kl = 12 * L * steps, steps  # flash_attn_fwd_softmax_lse_correction: read 2, write 1 (fp32), fused
    elif impl == "torch":
        lse, kl = 56 * L * steps, 5 * steps  # sub, sigmoid, logsigmoid (its buffer too), two subs, fp32
        fwd = 4 * e * K * c + (e + 4) * Q * c + 24 * Q * steps + (4 + e) * Q
        strided = (8 * Q + 4 * L) * steps  # the multiply reads the broadcast sigmoid (L) beside out - out_i
        bwd = (4 * Q + 8 * K + 4 * e * K * c + 2 * (8 + e) * K + 32 * K + steps * ((8 + e) * K + 32 * K)
               + (8 + e) * Q * c + (4 + e) * Q + (8 + 2 * e) * K)
        kf = 2 + steps + c + 3 * steps + 1
        kb = 3 + 2 + steps + 5 + 5 * steps + c + 2
    else:
        raise ValueError(f"cp_ring_merge must be one of {', '.join(CP_RING_MERGES)}, got {impl!r}")
    z = 0.0 * Q
    return {"forward": np.where(on, fwd, z), "backward": np.where(on, bwd, z),
            "forward_strided": np.where(on, strided, z), "forward_lse": np.where(on, lse, z),
            "forward_kernels": np.where(on, kf, 1.0), "backward_kernels": np.where(on, kb, 1.0),
            "lse_kernels": np.where(on, kl, 1.0)}


def cp_merge_ops(model, training, *, tp, cp, micro_batch_size, cp_algorithm: str) -> tuple:
    """The ring merge of one layer pass as MemoryOps (core attention: a recomputed attention merges again): the
    contiguous-operand kernels, and the broadcast ones in a `memory_strided` row. Empty without ring CP or
    FlashAttention (ring CP runs FlashAttention-style kernels that return their log-sum-exps)."""
    from ..memory.activations import attention_widths
    from .memory_ops import MemoryOp

    if cp_algorithm != "ring" or not training.flash_attention or not np.any(np.asarray(cp) > 1):
        return ()
    w = attention_widths(model)
    t, c, b = (np.asarray(x, dtype=float) for x in (tp, cp, micro_batch_size))
    tokens = b * training.seq_length / c
    by = ring_merge_bytes(training.stack.cp_ring_merge, q_elems=tokens * w["o"] / t,
                          kv_elems=tokens * (w["k"] + w["v"]) / 2.0 / t, cp=c, e=float(training.activation_bytes),
                          lse_elems=tokens * w["heads"] / t)
    ops = [MemoryOp(name="cp_merge", forward_bytes=by["forward"], backward_bytes=by["backward"],
                    kernels=by["forward_kernels"], backward_kernels=by["backward_kernels"], core_attention=True),
           MemoryOp(name="cp_merge (lse)", forward_bytes=by["forward_lse"], backward_bytes=0.0 * t,
                    kernels=by["lse_kernels"], core_attention=True)]
    if training.stack.cp_ring_merge == "torch":
        ops.append(MemoryOp(name="cp_merge (strided)", forward_bytes=by["forward_strided"], backward_bytes=0.0 * t,
                            kernels=np.maximum(c - 1.0, 1.0), core_attention=True, table="memory_strided"))
    return tuple(ops)
