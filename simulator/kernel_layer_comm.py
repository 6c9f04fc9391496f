"""The kernel's per-layer communication of K layouts (kernel.py composes it): TP collectives (with what the
chunked overlap of the stack's `tp_comm_overlap` hides and what selective recompute re-runs), ring CP and the
core attention that hides it, the EP all-to-all, and the PP p2p time of one stage boundary. The rules are in
cost/comm.py, cost/collectives.py and cost/topology.py."""
from __future__ import annotations

import numpy as np

from .cost import collectives as C
from .cost import comm
from .cost.compute import layer_op_times
from .cost.fsdp import chunked_overlap_exposed_s
from .cost.moe_overlap import combined_pair_period_s, shared_expert_hidden_s
from .cost.recompute import recomputed_fraction
from .cost.topology import group_span
from .dedup import categories, distinct_rows
from .spec.layout import expert_dp


def _layer_comm(model, training, hardware, opt, cp_algorithm, *, tp, cp, ep, etp, dp, mbs, pp, sp, rec) -> dict:
    """Per-layer, per-microbatch communication of K layouts, (K,) arrays: TP forward/backward
    (cost/comm.tp_comm; `tp_head_f` the last stage's gather of the logits, comm.loss_gather_s), CP
    (cp_comm) and the core-attention time that hides ring CP, EP all-to-all (ep_comm, per MoE layer; `ep_rerun`: its
    forward again where recompute re-runs the MoE block, full or the module moe; `ep_sh_f`/`_b`: what of it runs
    beside the shared experts under the stack's `moe_shared_expert_overlap`; `ep_pair`: the share of it a merged layer
    pair of the stack's `moe_a2a_overlap` hides; `tp_rerun_d`/`_m`: the MLP's/MoE's
    forward TP pair again under the modules mlp/moe), and
    the PP p2p time of one stage boundary (0 without pipelining). `tp_moe_f`/`tp_moe_b`: what an MoE layer's
    TP collectives differ from a dense layer's where the experts' tensor-parallel degree etp is not tp: the
    attention keeps its pair over tp, the FFN's pair runs over the etp group of the expert grid instead
    (none for etp = 1), half of tp_comm each (Megatron-Core: the expert layers' TP group is the expert
    RankGenerator's, parallel_state.py). The EP group is that grid's too: ep ranks etp apart, the grid
    regrouping a stage's tp·cp·dp ranks as etp × ep × expert-dp (with etp = tp and cp = 1, ranks tp apart)."""
    k = len(tp)
    ab = training.activation_bytes
    s = training.seq_length
    place = dict(order=opt.placement)
    out = {key: np.zeros(k) for key in ("tp_f", "tp_b", "tp_hid_f", "tp_hid_b", "cp_f", "cp_b", "att_f", "att_b",
                                        "ep_f", "ep_b", "p2p", "tp_head_f", "tp_moe_f", "tp_moe_b", "tp_rerun_d",
                                        "tp_rerun_m", "ep_rerun", "ep_sh_f", "ep_sh_b", "ep_pair")}
    def rerun(op: str, r: str, moe: bool) -> float:  # the recompute forward's share of the FFN op (the one rule)
        return recomputed_fraction(op, r, model, modules=training.stack.recompute_modules, moe_layer=moe)

    grid = expert_dp(tp, cp, dp, ep, etp)  # the expert-data-parallel degree of the expert grid
    span_tp = group_span(hardware, group="tp", tp=tp, cp=cp, ep=1, dp=dp, pp=pp, **place)
    if not training.stack.loss_parallel and (tp > 1).any():  # the head's logits gathered for the loss
        out["tp_head_f"][:] = comm.loss_gather_s(hardware, span_tp, vocab_size=model.vocab_size, seq_length=s,
                                                 micro_batch_size=mbs.astype(float), bytes_per_element=ab, cp=cp)
    for (r, spv), idx in categories(rec, sp):
        c = comm.tp_comm(hardware, span_tp.rows(idx), hidden_size=model.hidden_size, seq_length=s,
                         micro_batch_size=mbs[idx].astype(float), num_layers=1.0, bytes_per_element=ab,
                         sequence_parallel=bool(spv), recompute=r, cp=cp[idx])
        out["tp_f"][idx], out["tp_b"][idx] = c.forward_s, c.backward_s
        if model.is_moe and (etp[idx] != tp[idx]).any():  # the FFN's pair over the etp group, not tp
            span_etp = group_span(hardware, group="tp", tp=etp[idx], cp=1, ep=ep[idx], dp=grid[idx], pp=pp[idx],
                                  **place)
            ce = comm.tp_comm(hardware, span_etp, hidden_size=model.hidden_size, seq_length=s,
                              micro_batch_size=mbs[idx].astype(float), num_layers=1.0, bytes_per_element=ab,
                              sequence_parallel=bool(spv), recompute=r, cp=cp[idx])
            moved = etp[idx] != tp[idx]
            out["tp_moe_f"][idx] = np.where(moved, 0.5 * (ce.forward_s - c.forward_s), 0.0)
            out["tp_moe_b"][idx] = np.where(moved, 0.5 * (ce.backward_s - c.backward_s), 0.0)
        if r == "selective":  # its MLP / MoE block re-runs the forward pair (full, op: tp_comm re-runs the layer's)
            out["tp_rerun_d"][idx] = 0.5 * c.forward_s * rerun("mlp_up", r, False)
            out["tp_rerun_m"][idx] = 0.5 * (c.forward_s + 2.0 * out["tp_moe_f"][idx]) * rerun("expert_up", r, True)
        if opt.tp_overlap is not None:  # a given fraction hidden
            out["tp_hid_f"][idx], out["tp_hid_b"][idx] = opt.tp_overlap * c.forward_s, opt.tp_overlap * c.backward_s
        elif training.stack.tp_comm_overlap and (tp[idx] > 1).any():
            out["tp_hid_f"][idx], out["tp_hid_b"][idx] = _tp_chunked_hidden(
                model, training, hardware, opt, tp[idx], cp[idx], mbs[idx], bool(spv), c)
    if (cp > 1).any():
        span_cp = group_span(hardware, group="cp", tp=tp, cp=cp, ep=1, dp=dp, pp=pp, **place)
        c = comm.cp_comm(hardware, span_cp, seq_length=s, micro_batch_size=mbs.astype(float), num_layers=1.0,
                         kv_hidden=model.num_kv_heads * model.head_dim, hidden_size=model.hidden_size,
                         bytes_per_element=ab, algorithm=cp_algorithm, tp=tp.astype(float))
        out["cp_f"][:], out["cp_b"][:] = c.forward_s, c.backward_s
        if cp_algorithm == "ring" and opt.cp_overlap:
            for (spv,), idx in categories(sp):  # once per distinct (tp, cp, micro-batch)
                u, inv = distinct_rows(tp[idx], cp[idx], mbs[idx])
                f, b = _core_attention_s(model, training, hardware, tp[idx[u]], cp[idx[u]], mbs[idx[u]], bool(spv),
                                         opt.roofline)
                out["att_f"][idx], out["att_b"][idx] = f[inv], b[inv]
    if model.is_moe and (ep > 1).any():
        span_ep = group_span(hardware, group="ep", tp=etp, cp=1, ep=ep, dp=grid, pp=pp, **place)
        c = comm.ep_comm(hardware, span_ep, tokens_per_rank=mbs * s / cp / np.where(sp, tp, 1),
                         hidden_size=model.hidden_size, top_k=model.experts_per_token, num_moe_layers=1.0,
                         dispatch_bytes_per_element=training.ep_dispatch_bytes,
                         combine_bytes_per_element=ab, load_factor=training.moe_load_factor,
                         by_node=((model.num_experts, model.router_groups, model.router_group_topk)
                                  if training.stack.moe_dispatcher == "flex" else None))
        out["ep_f"][:], out["ep_b"][:] = c.forward_s, c.backward_s
        for (r,), idx in categories(rec):  # the MoE block's forward again where the recompute re-runs its experts
            out["ep_rerun"][idx] = np.broadcast_to(c.forward_s, (k,))[idx] * rerun("expert_up", r, True)
        if training.stack.moe_shared_expert_overlap and model.shared_expert_ffn_hidden_size:
            out["ep_sh_f"][:], out["ep_sh_b"][:] = _shared_expert_hidden(model, training, hardware, opt, c, tp=tp,
                                                                        cp=cp, mbs=mbs, sp=sp)
        if training.stack.moe_a2a_overlap:
            out["ep_pair"][:] = _merged_pair_hidden_share(model, training, hardware, opt, c, tp=tp, cp=cp, ep=ep,
                                                          etp=etp, mbs=mbs, sp=sp)
    piped = np.flatnonzero(pp > 1)
    if len(piped):
        span_pp = group_span(hardware, group="pp", tp=tp[piped], cp=cp[piped], ep=1, dp=dp[piped], pp=pp[piped], **place)
        msg = comm.pp_message_bytes(hidden_size=model.hidden_size, seq_length=s, micro_batch_size=mbs[piped],
                                    bytes_per_element=ab, tp=tp[piped], cp=cp[piped], sequence_parallel=sp[piped])
        out["p2p"][piped] = C.p2p_s(hardware, np.asarray(msg, dtype=float), span_pp)
    return out


# The GEMMs each TP collective of a layer feeds or drains, as positions in the layer's GEMM list (flops.py:
# the attention projections ending with out_proj, then the MLP's up and down; Megatron-LM / torchtitan TP
# plans). With sequence parallelism: forward all-gather -> the attention's input GEMMs (QKV, or MLA's
# projections) and FC1, reduce-scatter <- out_proj and FC2; backward the transposes, each against the same
# GEMM's input- and weight-gradient products. Without it: one all-reduce after out_proj and one after FC2
# (forward), after the attention-input and FC1 input gradients (backward).
def _tp_collective_gemms(gemms: list, sequence_parallel: bool) -> tuple[tuple, tuple]:
    """(forward groups, backward groups) of OpTimes, one group per TP collective of the layer."""
    attn_in, out, up, down = gemms[:-3], gemms[-3:-2], gemms[-2:-1], gemms[-1:]
    assert out[0].name == "out_proj", [g.name for g in gemms]  # flops.attention_ops ends with it
    if sequence_parallel:
        return (attn_in, out, up, down), (attn_in, out, up, down)
    return (out, down), (attn_in, up)


def _tp_chunked_hidden(model, training, hardware, opt, tp, cp, mbs, sequence_parallel, c):
    """The TP communication per layer that the chunked pipeline of the stack's `tp_comm_overlap` hides,
    (forward, backward): each of the layer's TP collectives (4 with SP, 2 all-reduces without; equal
    messages, s·b·h) split into tp chunks against the GEMM it feeds or drains (`_tp_collective_gemms`:
    forward its forward GEMM, backward its input- and weight-gradient GEMMs), cost/fsdp.py
    chunked_overlap_exposed_s; hidden = total − exposed. A collective whose GEMM is shorter than it stays
    partly exposed whatever the other GEMMs of the layer take."""
    u, inv = distinct_rows(tp, cp, mbs)
    k = 4 if sequence_parallel else 2
    gf, gb = np.zeros((len(u), k)), np.zeros((len(u), k))
    for j, i in enumerate(u):  # scalar layouts: one op table each (few distinct (tp, cp, micro-batch))
        gemms = [o for o in layer_op_times(model, training, hardware, tp=float(tp[i]), cp=float(cp[i]),
                                           micro_batch_size=float(mbs[i]), sequence_parallel=sequence_parallel,
                                           roofline=opt.roofline) if o.kind == "gemm"]
        fwd, bwd = _tp_collective_gemms(gemms, bool(sequence_parallel))
        for q in range(k):
            gf[j, q] = sum(float(o.forward_s) for o in fwd[q])
            gb[j, q] = sum(float(o.backward_s) + float(o.weight_s) for o in bwd[q])
    gf, gb = gf[inv], gb[inv]
    hidden = []
    for total, g in ((np.asarray(c.forward_s, dtype=float), gf), (np.asarray(c.backward_s, dtype=float), gb)):
        total = np.broadcast_to(total, tp.shape)
        exposed = sum(chunked_overlap_exposed_s(total / k, g[:, q], tp.astype(float)) for q in range(k))
        hidden.append(np.where(tp > 1, np.maximum(total - exposed, 0.0), 0.0))
    return hidden[0], hidden[1]


def _shared_expert_hidden(model, training, hardware, opt, c, *, tp, cp, mbs, sp):
    """Per MoE layer, (forward, backward) EP all-to-all seconds beside the shared experts
    (cost/moe_overlap.py shared_expert_hidden_s), (K,) arrays: the dispatch and combine times from ep_comm's
    (forward = t_d + t_c, backward = 2·t_c per layer), the shared FC1 / FC2 GEMMs timed once per distinct
    (tp, cp, micro-batch, sequence parallelism)."""
    t_c = np.broadcast_to(np.asarray(c.backward_s, dtype=float), tp.shape) / 2.0
    t_d = np.broadcast_to(np.asarray(c.forward_s, dtype=float), tp.shape) - t_c
    u, inv = distinct_rows(tp, cp, mbs, sp)
    g = np.zeros((len(u), 4))  # up forward, down forward, up backward, down backward
    for j, i in enumerate(u):
        ops = {o.name: o for o in layer_op_times(model, training, hardware, moe=True, tp=float(tp[i]),
                                                 cp=float(cp[i]), micro_batch_size=float(mbs[i]),
                                                 sequence_parallel=bool(sp[i]), roofline=opt.roofline)}
        up, down = ops["shared_up"], ops["shared_down"]
        g[j] = (float(up.forward_s), float(down.forward_s), float(up.backward_s) + float(up.weight_s),
                float(down.backward_s) + float(down.weight_s))
    g = g[inv]
    return shared_expert_hidden_s(t_d, t_c, g[:, 0], g[:, 1], g[:, 2], g[:, 3])


# an MoE layer's ops that run between its dispatch and its combine (the routed experts: Megatron-Core's `mlp` node
# of the combined 1F1B, fine_grained_callables.py submodule_moe_forward); the others run before the dispatch
_ROUTED = ("expert_up", "expert_down", "mlp_activation", "expert_bias")


def _merged_pair_hidden_share(model, training, hardware, opt, c, *, tp, cp, ep, etp, mbs, sp):
    """Per row, the share of an MoE layer's four all-to-alls that the steady state of Megatron-Core's combined 1F1B
    hides (the stack's `moe_a2a_overlap`), (K,): (S − period) / A for a merged pair of MoE layers, S its ops one
    after another, A its all-to-alls (dispatch t_d and combine t_c forward, two of t_c backward: ep_comm), the
    period from cost/moe_overlap.py combined_pair_period_s. The routed experts (_ROUTED) are its `mlp` node, the
    rest of the layer its `pre_dispatch` node; their weight gradients run after the input gradients, the
    experts' split off with `moe_delay_wgrad`. Ops timed once per distinct (tp, cp, ep, etp, micro-batch, SP)."""
    t_c = np.broadcast_to(np.asarray(c.backward_s, dtype=float), tp.shape) / 2.0
    t_d = np.broadcast_to(np.asarray(c.forward_s, dtype=float), tp.shape) - t_c
    u, inv = distinct_rows(tp, cp, ep, etp, mbs, sp)
    g = np.zeros((len(u), 6))  # pre f, mlp f, pre b (input grads), pre weight grads, mlp b, mlp weight grads
    for j, i in enumerate(u):
        for o in layer_op_times(model, training, hardware, moe=True, tp=float(tp[i]), cp=float(cp[i]),
                                ep=float(ep[i]), etp=float(etp[i]), micro_batch_size=float(mbs[i]),
                                sequence_parallel=bool(sp[i]), roofline=opt.roofline):
            f, b, w = float(o.forward_s), float(o.backward_s), float(o.weight_s)
            g[j] += (0, f, 0, 0, b, w) if o.name in _ROUTED else (f, 0, b, w, 0, 0)
    g = g[inv]
    if not training.stack.moe_delay_wgrad:  # the experts' weight gradients inside their backward
        g[:, 4], g[:, 5] = g[:, 4] + g[:, 5], 0.0
    a2a = t_d + 3.0 * t_c
    period = combined_pair_period_s(g[:, 0], g[:, 1], g[:, 2], g[:, 3], g[:, 4], g[:, 5], t_d, t_c, t_c, t_c)
    hidden = g.sum(axis=1) + a2a - period
    return np.clip(np.divide(hidden, a2a, out=np.zeros_like(a2a), where=a2a > 0), 0.0, 1.0)


def _core_attention_s(model, training, hardware, tp, cp, mbs, sequence_parallel, roofline):
    """Forward and backward time of one layer's core attention per microbatch, (n,) arrays."""
    ops = layer_op_times(model, training, hardware, tp=tp[:, None].astype(float), cp=cp[:, None].astype(float),
                         micro_batch_size=mbs[:, None].astype(float), sequence_parallel=sequence_parallel,
                         roofline=roofline, core_attention_only=True)
    f = sum(np.asarray(o.forward_s, dtype=float) for o in ops if o.core_attention)
    b = sum(np.asarray(o.backward_s, dtype=float) for o in ops if o.core_attention)
    n = len(tp)
    return np.broadcast_to(np.reshape(f, (-1,))[:n] if np.size(f) >= n else f, (n,)), \
        np.broadcast_to(np.reshape(b, (-1,))[:n] if np.size(b) >= n else b, (n,))
