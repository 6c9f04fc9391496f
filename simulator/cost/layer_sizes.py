"""The named sizes of one transformer layer on one rank (split from elementwise.py): the values of the `Lin`
sizes its layer graph's tensors are built from, and those names for a model."""
from __future__ import annotations

from types import SimpleNamespace

from . import flops as F
from .elementwise_ops import Lin


def layer_sizes(model, training, *, moe, tp, cp, micro_batch_size, sequence_parallel, etp=None, ep=1) -> dict:
    """The named layer sizes per rank, in elements (T = b·s/c tokens, T_sp = T/t with sequence parallelism):
    scalars or arrays, the values of `layer_graph`'s `Lin` sizes. MoE: the routed token copies on a rank are
    k·T·u/t (u = `etp`, the experts' tensor-parallel degree, None: t; flops.moe_ops), each f_e/u wide; `sorted`,
    the routed copies the all-to-all dispatcher re-sorts by local expert, all of them with more than one local expert
    (E/ep > 1), none with one."""
    tp, cp, b = (F._f(x) for x in (tp, cp, micro_batch_size))
    s = float(training.seq_length)
    T = b * s / cp
    T_rep = T / tp if sequence_parallel else T  # tokens of a TP-replicated op (sequence-parallel: split)
    h = model.hidden_size
    out = dict(T=T, pos=s / cp, Th=T_rep * h, Tx=T * h, q=T * model.q_size / tp, kv=T * model.kv_size / tp,
               f=T * model.ffn_hidden_size / tp, S=b * model.num_heads / tp * (s / cp) * s, mask=b * (s / cp) * s)
    if model.is_mla:
        out.update(rope_q=T * model.num_heads * model.qk_rope_head_dim / tp, rope_k=T_rep * model.qk_rope_head_dim,
                   lat_q=T_rep * model.q_lora_rank, lat_kv=T_rep * model.kv_lora_rank)
    if moe:
        k = model.experts_per_token
        regroup = 1.0 if etp is None else F._f(etp) / tp  # u/t
        out.update(f=training.moe_load_factor * k * T * model.moe_ffn_hidden_size / tp
                   + T * model.shared_expert_ffn_hidden_size / tp, routed=k * T * regroup * h,
                   scores=T_rep * model.num_experts)
        out["sorted"] = out["routed"] * (model.local_experts(F._f(ep)) > 1.0)
    return out


_KEYS = ("T", "pos", "Th", "Tx", "q", "kv", "f", "S", "mask")


def layer_dims(model, e, *, moe, sequence_parallel) -> SimpleNamespace:
    """The layer's sizes as `Lin` names (`layer_sizes` gives their values) and its structural facts."""
    keys = (_KEYS + (("rope_q", "rope_k", "lat_q", "lat_kv") if model.is_mla else ())
            + (("routed", "scores", "sorted") if moe else ()))
    d = SimpleNamespace(**{k: Lin({k: 1.0}) for k in keys}, e=float(e), sp=sequence_parallel,
                        rope=model.learned_position_embeddings == 0,
                        rope_dim=model.qk_rope_head_dim if model.is_mla else model.head_dim)
    return d
