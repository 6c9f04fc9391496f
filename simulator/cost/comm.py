"""Communication of each parallelism: bytes each rank sends and the time it takes.

Inputs are plain numbers or numpy arrays (hidden size, sequence, micro-batch, bytes per element,
parameters per rank, degrees) plus a `topology.GroupSpan` for the group that communicates; categorical
options (sequence_parallel, recompute, zero stage, CP algorithm) are scalars. Results are `CommCost`
records of arrays. "bytes per rank" is what one rank puts on the wire per direction (the nccl-tests
bus volume: ring all-reduce 2(n-1)/n·M, AG/RS/all-to-all (n-1)/n·M, p2p M).
Volumes follow formulas.md §4.6 (Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2;
Narayanan et al. 2021 §2.2, §4.1; Rajbhandari et al. 2020 §7; Jacobs et al. 2023; DeepSeek-V3 §3.3).
Overlap is not decided here: `wait_s` is the time the step has to wait if nothing overlaps
(0 for asynchronous data parallelism); kernel.py decides what hides under compute.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..spec.hardware import HardwareProfile
from ..spec.rules import RECOMPUTE, check_choice
from . import collectives as C

__all__ = ["CommCost", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bucketed", "data_parallel_single_process_comm",
           "activation_bytes"]


@dataclass(frozen=True, kw_only=True)
class CommCost:
    """Communication of one parallel group, forward/backward split (arrays broadcast over layouts).

    per: 'microbatch' (TP, CP, EP, PP: per micro-batch per rank, all layers of the rank) or 'step'
    (DP: once per optimizer step). calls_*: number of collective calls. wait_s: time the rank must
    wait for it if not overlapped (= time_s, except asynchronous DP: 0).
    """

    group: str
    collective: str
    per: str
    forward_bytes_per_rank: np.ndarray
    backward_bytes_per_rank: np.ndarray
    forward_s: np.ndarray
    backward_s: np.ndarray
    calls_forward: np.ndarray
    calls_backward: np.ndarray
    wait_s: np.ndarray

    @property
    def bytes_per_rank(self) -> np.ndarray:
        return self.forward_bytes_per_rank + self.backward_bytes_per_rank

    @property
    def time_s(self) -> np.ndarray:
        return self.forward_s + self.backward_s


def _f(x):
    return np.asarray(x, dtype=float)


def _nonneg(name, v):
    a = _f(v)
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise InputError(f"{name} must be finite and >= 0, got {np.asarray(v).ravel()[:4].tolist()}")
    return a


def activation_bytes(*, hidden_size, seq_length, micro_batch_size, bytes_per_element, cp=1):
    """A = b · (s/c) · h · bytes: one activation tensor of a micro-batch on one CP rank (formulas.md §4.6)."""
    return (_nonneg("micro_batch_size", micro_batch_size) * _nonneg("seq_length", seq_length) / _f(cp)
            * _nonneg("hidden_size", hidden_size) * _nonneg("bytes_per_element", bytes_per_element))


def _cost(group, collective, per, fb, bb, fs, bs, cf, cb, wait=None):
    shape = np.broadcast(fb, bb, fs, bs, cf, cb).shape
    b = lambda x: np.broadcast_to(_f(x), shape)
    return CommCost(group=group, collective=collective, per=per, forward_bytes_per_rank=b(fb),
                    backward_bytes_per_rank=b(bb), forward_s=b(fs), backward_s=b(bs), calls_forward=b(cf),
                    calls_backward=b(cb), wait_s=b(fs + bs if wait is None else wait))


def tp_comm(profile: HardwareProfile, span, *, hidden_size, seq_length, micro_batch_size, num_layers,
            bytes_per_element, sequence_parallel: bool, recompute: str = "none", cp=1,
            regather_in_backward: bool = True, algorithm: str = "auto") -> CommCost:
    """Tensor-parallel communication per micro-batch over the rank's `num_layers` layers.

    Without SP (Shoeybi et al. 2019 §3): 2 all-reduces of A per layer forward (attention out-proj,
    MLP down-proj) and 2 backward (inputs of QKV and fc1); bytes/rank per AR 2(t-1)/t·A.
    With SP (Korthikanti §4.2.2): each AR becomes all-gather + reduce-scatter of A (same bytes,
    twice the calls); Megatron re-gathers the sequence-sharded input in backward instead of storing
    it (`regather_in_backward`, default True): +2 AG per layer backward.
    Full recompute re-runs the forward inside backward: its collectives are repeated there. torchtitan's
    op-level selective AC ('op') saves the reduce-scatter outputs (its `_save_list`) and re-runs the rest:
    the two all-gathers with SP, the two all-reduces without.
    A = b·(s/cp)·h·bytes. t = 1 ⇒ zero traffic.
    """
    check_choice("recompute", recompute, RECOMPUTE)
    A = activation_bytes(hidden_size=hidden_size, seq_length=seq_length, micro_batch_size=micro_batch_size,
                         bytes_per_element=bytes_per_element, cp=cp)
    L = _nonneg("num_layers", num_layers)
    t = _f(span.size)
    rerun = 1.0 if recompute in ("full", "op") else 0.0  # the forward's all-gathers / all-reduces again
    rerun_rs = 1.0 if recompute == "full" else 0.0  # its reduce-scatters ('op' saves their outputs)
    if sequence_parallel:
        ag = C.all_gather_s(profile, A, span, algorithm=algorithm)
        rs = C.reduce_scatter_s(profile, A, span, algorithm=algorithm)
        per_call = (t - 1.0) / t * A
        n_fwd = 4.0                                     # 2 AG + 2 RS
        n_bwd = 4.0 + (2.0 if regather_in_backward else 0.0) + 2.0 * (rerun + rerun_rs)
        fwd_s = 2.0 * (ag + rs)
        bwd_s = 2.0 * (ag + rs) + (2.0 * ag if regather_in_backward else 0.0) + 2.0 * (rerun * ag + rerun_rs * rs)
        name = "all_gather+reduce_scatter"
    else:
        ar = C.all_reduce_s(profile, A, span, algorithm=algorithm)
        per_call = 2.0 * (t - 1.0) / t * A
        n_fwd, n_bwd = 2.0, 2.0 + rerun * 2.0
        fwd_s, bwd_s = 2.0 * ar, (2.0 + rerun * 2.0) * ar
        name = "all_reduce"
    return _cost("tp", name, "microbatch", L * n_fwd * per_call, L * n_bwd * per_call, L * fwd_s, L * bwd_s,
                 L * n_fwd * (t > 1), L * n_bwd * (t > 1))


def cp_comm(profile: HardwareProfile, span, *, seq_length, micro_batch_size, num_layers, kv_hidden,
            hidden_size, bytes_per_element, algorithm: str = "ring", tp=1) -> CommCost:
    """Context-parallel communication per micro-batch over `num_layers` layers, per GPU.

    ring (Megatron CP / ring attention; formulas.md §4.6 [derived]): forward per layer c-1 p2p
    steps, each sending the local K and V chunk 2·(s/c)·b·kv·bytes (kv = n_kv·d_h / t: tensor
    parallelism splits the heads, and each GPU exchanges only its own heads' K and V — Transformer
    Engine's attention with CP runs on the rank's [s/c, b, n_kv/t, d_h] tensors; exact, as the layout
    rules require n_kv % t == 0, spec/validate.py); backward twice
    that (K,V again + dK,dV). Time of a step = the slowest hop of the ring (p2p over the span).
    ulysses (Jacobs et al. 2023): 4 all-to-all per layer forward (Q, K, V before attention, O after)
    and 4 backward; per-rank buffers (s/c)·b·h/t·bytes for Q and O, (s/c)·b·kv·bytes for K and V.
    c = 1 ⇒ zero.
    """
    c = _f(span.size)
    L = _nonneg("num_layers", num_layers)
    t = _f(tp)
    sb = _nonneg("micro_batch_size", micro_batch_size) * _nonneg("seq_length", seq_length) / c * _nonneg("bytes_per_element", bytes_per_element)
    kv = sb * _nonneg("kv_hidden", kv_hidden) / t
    if algorithm == "ring":
        step = 2.0 * kv
        t_step = C.p2p_s(profile, step, span)
        steps = c - 1.0
        return _cost("cp", "p2p_ring", "microbatch", L * steps * step, L * 2.0 * steps * step,
                     L * steps * t_step, L * 2.0 * steps * t_step, L * steps, L * 2.0 * steps)
    if algorithm == "ulysses":
        q = sb * _nonneg("hidden_size", hidden_size) / t
        t_q = C.all_to_all_s(profile, q, span)
        t_kv = C.all_to_all_s(profile, kv, span)
        vol = (c - 1.0) / c * (2.0 * q + 2.0 * kv)
        t = 2.0 * t_q + 2.0 * t_kv
        return _cost("cp", "all_to_all", "microbatch", L * vol, L * vol, L * t, L * t, L * 4.0 * (c > 1), L * 4.0 * (c > 1))
    raise InputError(f"cp algorithm must be 'ring' or 'ulysses', got {algorithm!r}")


def ep_comm(profile: HardwareProfile, span, *, tokens_per_rank, hidden_size, top_k, num_moe_layers,
            dispatch_bytes_per_element, combine_bytes_per_element=None, load_factor=1.0, by_node=None) -> CommCost:
    """Expert-parallel all-to-all per micro-batch over `num_moe_layers` MoE layers.

    Per layer forward: dispatch + combine all-to-all; backward: their gradients (2 more) — 4 per
    layer (Playbook EP; scaling-book). Per-rank buffer: dispatch k·T·h·bytes_dispatch, combine
    k·T·h·bytes_combine (DeepSeek-V3 §3.3 dispatches FP8, combines BF16), times `load_factor`
    (Training.moe_load_factor: buffers padded to a capacity factor, or the busiest rank's share of
    dropless routing, which every rank of the all-to-all waits for). (e-1)/e of it leaves the rank.
    Backward: dispatch-gradient in combine precision, combine-gradient in combine precision.
    `by_node` (num_experts, router_groups, router_group_topk): DeepEP / HybridEP, each token sent once per
    destination node and forwarded over NVLink (cost/ep_dispatch.py flex_all_to_all_s), the same four transfers.
    """
    if by_node is not None:
        from .ep_dispatch import flex_all_to_all_s

        E, G, M = by_node
        T = _nonneg("tokens_per_rank", tokens_per_rank) * _nonneg("load_factor", load_factor)
        h, L = _nonneg("hidden_size", hidden_size), _nonneg("num_moe_layers", num_moe_layers)
        bd = _nonneg("dispatch_bytes_per_element", dispatch_bytes_per_element)
        bc = bd if combine_bytes_per_element is None else _nonneg("combine_bytes_per_element",
                                                                   combine_bytes_per_element)
        kw = dict(num_experts=E, top_k=int(top_k), groups=G, group_topk=M)
        t_d, m_d = flex_all_to_all_s(profile, span, tokens=T, bytes_per_token=h * bd, **kw)
        t_c, m_c = flex_all_to_all_s(profile, span, tokens=T, bytes_per_token=h * bc, **kw)
        e = _f(span.size)
        return _cost("ep", "all_to_all", "microbatch", L * (m_d + m_c), L * 2.0 * m_c, L * (t_d + t_c),
                     L * 2.0 * t_c, L * 2.0 * (e > 1), L * 2.0 * (e > 1))
    e = _f(span.size)
    T = _nonneg("tokens_per_rank", tokens_per_rank)
    k = _nonneg("top_k", top_k)
    h = _nonneg("hidden_size", hidden_size)
    L = _nonneg("num_moe_layers", num_moe_layers)
    bd = _nonneg("dispatch_bytes_per_element", dispatch_bytes_per_element)
    bc = bd if combine_bytes_per_element is None else _nonneg("combine_bytes_per_element", combine_bytes_per_element)
    cf = _nonneg("load_factor", load_factor)
    tokens = cf * k * T
    m_d, m_c = tokens * h * bd, tokens * h * bc
    t_d, t_c = C.all_to_all_s(profile, m_d, span), C.all_to_all_s(profile, m_c, span)
    frac = (e - 1.0) / e
    return _cost("ep", "all_to_all", "microbatch", L * frac * (m_d + m_c), L * frac * 2.0 * m_c,
                 L * (t_d + t_c), L * 2.0 * t_c, L * 2.0 * (e > 1), L * 2.0 * (e > 1))


def loss_gather_s(profile: HardwareProfile, span, *, vocab_size, seq_length, micro_batch_size, bytes_per_element,
                  cp=1):
    """Seconds of the forward all-gather of the logits on the last stage, per micro-batch, where every TP rank
    runs the loss on the whole logits (Stack.loss_parallel false: transformers' `lm_head: colwise_rep`, whose
    column shards are gathered into replicated logits; its backward keeps the local slice of the gradient, no
    collective): an all-gather whose output is M = e·T·V bytes, T = b·s/cp tokens. 0 for a TP group of 1."""
    M = _f(bytes_per_element) * _f(micro_batch_size) * _f(seq_length) / _f(cp) * float(vocab_size)
    return np.where(_f(span.size) > 1, C.all_gather_s(profile, M, span), 0.0)


def pp_message_bytes(*, hidden_size, seq_length, micro_batch_size, bytes_per_element, tp=1, cp=1,
                     sequence_parallel=False, scatter_gather: bool = True):
    """Bytes each TP rank sends across a stage boundary per micro-batch and direction (Narayanan et al. 2021
    §4.1): the activation A (`activation_bytes`), or A/t with sequence parallelism (the tensor is already
    split over the TP ranks) or Megatron's scatter/gather optimisation (each TP rank sends its 1/t slice and
    the receiving stage all-gathers it over NVLink, not counted here; on by default in Megatron-LM, and what
    DeepSpeed's partitioned pipe tensors and torchtitan's sequence-sharded stage outputs send too). Shapes
    broadcast."""
    A = activation_bytes(hidden_size=hidden_size, seq_length=seq_length, micro_batch_size=micro_batch_size,
                         bytes_per_element=bytes_per_element, cp=cp)
    return np.where(np.asarray(sequence_parallel) | scatter_gather, A / _f(tp), A)


def pp_comm(profile: HardwareProfile, span, *, hidden_size, seq_length, micro_batch_size, bytes_per_element,
            tp=1, sequence_parallel: bool = False, scatter_gather: bool = True, vpp=1, cp=1) -> CommCost:
    """Pipeline p2p per micro-batch per rank (Narayanan et al. 2021 §2.2, §4.1).

    Each stage boundary sends the activation A forward and its gradient A backward (`pp_message_bytes` per TP
    rank); with interleaving every one of the v model chunks is a hop (×v). Time per hop: p2p over the slowest
    adjacent pair of the PP span. The first/last stage send one direction only; this returns the
    interior-stage (busiest) rank. p = 1 ⇒ zero.
    """
    msg = pp_message_bytes(hidden_size=hidden_size, seq_length=seq_length, micro_batch_size=micro_batch_size,
                           bytes_per_element=bytes_per_element, tp=tp, cp=cp, sequence_parallel=sequence_parallel,
                           scatter_gather=scatter_gather)
    p = _f(span.size)
    hops = _f(vpp) * (p > 1)
    t = C.p2p_s(profile, msg, span)
    return _cost("pp", "p2p", "microbatch", hops * msg, hops * msg, hops * t, hops * t, hops, hops)


def bucketed(fn, profile, total_bytes, span, bucket_bytes, algorithm="auto"):
    """(time, calls) of `total_bytes` sent as full buckets of `bucket_bytes` plus one remainder bucket, each
    its own collective `fn` (cost/collectives.py) over `span`; one collective when bucket_bytes is None."""
    total = _f(total_bytes)
    if bucket_bytes is None:
        return fn(profile, total, span, algorithm=algorithm), np.where(total > 0, 1.0, 0.0)
    bb = float(bucket_bytes)
    if not bb > 0:
        raise InputError(f"bucket_bytes must be > 0, got {bucket_bytes!r}")
    full = np.floor(total / bb)
    rem = total - full * bb
    t = full * fn(profile, np.full_like(total, bb), span, algorithm=algorithm) + np.where(rem > 0, fn(profile, rem, span, algorithm=algorithm), 0.0)
    return t, full + (rem > 0)


def dp_comm(profile: HardwareProfile, span, *, params_per_rank, grad_bytes_per_element=4, param_bytes_per_element=2,
            zero: int = 0, num_microbatches=1, bucket_bytes=25e6, replica_span=None, asynchronous: bool = False,
            algorithm: str = "auto") -> CommCost:
    """Data-parallel communication per optimizer step (formulas.md §4.6; ZeRO §7).

    zero 0 (DDP): all-reduce of the gradients, Ψ·bytes_grad, in buckets (PyTorch DDP default 25 MB);
        bytes/rank 2(d-1)/d·Ψ·bytes_grad.
    zero 1, 2 (and Megatron's distributed optimizer): reduce-scatter of the gradients + all-gather of
        the updated parameters: (d-1)/d·Ψ·(bytes_grad + bytes_param) — the same element volume as DDP.
    zero 3 (FSDP FULL_SHARD): per micro-batch all-gather of the parameters in forward and again in
        backward, and reduce-scatter of the gradients: (d-1)/d·Ψ·(2·bytes_param + bytes_grad) per
        micro-batch — 3Ψ vs DDP's 2Ψ elements (1.5×) at equal dtypes and one micro-batch.
    HSDP (`replica_span` given with zero 3): the above inside the shard group `span`, plus an
        all-reduce of the Ψ/F gradient shard across the replicas (`replica_span`) once per step.
    Forward = parameter all-gathers (ZeRO-3), backward = gradient reduction (+ ZeRO-1/2 parameter
    all-gather, counted with backward: it ends the step). asynchronous=True (asynchronous DP /
    PipeDream-style): same bytes, but the step does not wait on it (wait_s = 0).
    """
    if zero not in (0, 1, 2, 3):
        raise InputError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    psi = _nonneg("params_per_rank", params_per_rank)
    bg = _nonneg("grad_bytes_per_element", grad_bytes_per_element)
    bp = _nonneg("param_bytes_per_element", param_bytes_per_element)
    m = _nonneg("num_microbatches", num_microbatches)
    d = _f(span.size)
    frac = (d - 1.0) / d
    if zero == 0:
        t, calls = bucketed(C.all_reduce_s, profile, psi * bg, span, bucket_bytes, algorithm)
        fb, bb, fs, bs, cf, cb, name = 0.0, 2.0 * frac * psi * bg, 0.0, t, 0.0, calls, "all_reduce"
    elif zero in (1, 2):
        t_rs, c_rs = bucketed(C.reduce_scatter_s, profile, psi * bg, span, bucket_bytes, algorithm)
        t_ag, c_ag = bucketed(C.all_gather_s, profile, psi * bp, span, bucket_bytes, algorithm)
        fb, bb, fs, bs, cf, cb = 0.0, frac * psi * (bg + bp), 0.0, t_rs + t_ag, 0.0, c_rs + c_ag
        name = "reduce_scatter+all_gather"
    else:
        t_ag, c_ag = bucketed(C.all_gather_s, profile, psi * bp, span, bucket_bytes, algorithm)
        t_rs, c_rs = bucketed(C.reduce_scatter_s, profile, psi * bg, span, bucket_bytes, algorithm)
        fb, bb = m * frac * psi * bp, m * frac * psi * (bp + bg)
        fs, bs, cf, cb = m * t_ag, m * (t_ag + t_rs), m * c_ag, m * (c_ag + c_rs)
        name = "all_gather+reduce_scatter"
        if replica_span is not None:
            r = _f(replica_span.size)
            shard = psi * bg / d
            t_ar, c_ar = bucketed(C.all_reduce_s, profile, shard, replica_span, bucket_bytes, algorithm)
            bb = bb + 2.0 * (r - 1.0) / r * shard
            bs, cb = bs + t_ar, cb + c_ar
            name += "+replica_all_reduce"
    wait = np.zeros_like(_f(fs) + _f(bs)) if asynchronous else None
    return _cost("dp", name, "step", fb, bb, fs, bs, cf, cb, wait)


def data_parallel_single_process_comm(profile: HardwareProfile, *, n_gpus, params, param_bytes_per_element=4,
                                      grad_bytes_per_element=4, input_bytes, output_bytes) -> CommCost:
    """torch.nn.DataParallel (single process, one master GPU) per step, vs DDP's all-reduce.

    Every forward the master broadcasts the parameters to the n-1 replicas, scatters the inputs
    and gathers the outputs; backward the replicas' gradients are summed onto the master
    (PyTorch `torch/nn/parallel/data_parallel.py`: replicate -> scatter -> parallel_apply -> gather;
    gradients reduce-add onto device 0). All of it goes through the master's links, so the master
    moves (n-1)·Ψ·bytes_param + (n-1)/n·(inputs + outputs) out/in forward and (n-1)·Ψ·bytes_grad in
    backward, serialised on its p2p bandwidth. Single node only (n_gpus <= gpus_per_node).
    """
    n = _f(n_gpus)
    if np.any(n < 1) or np.any(n > profile.gpus_per_node):
        raise InputError(f"DataParallel runs in one process on one node: n_gpus must be in 1..{profile.gpus_per_node}, got {np.asarray(n_gpus).ravel()[:4].tolist()}")
    psi = _nonneg("params", params)
    fwd = (n - 1.0) * psi * _nonneg("param_bytes_per_element", param_bytes_per_element) + (n - 1.0) / n * (
        _nonneg("input_bytes", input_bytes) + _nonneg("output_bytes", output_bytes))
    bwd = (n - 1.0) * psi * _nonneg("grad_bytes_per_element", grad_bytes_per_element)
    # each replica's share is a separate p2p from/to the master: serial on the master's link
    per_f = np.where(n > 1, fwd / np.maximum(n - 1.0, 1.0), 0.0)
    per_b = np.where(n > 1, bwd / np.maximum(n - 1.0, 1.0), 0.0)
    fs = (n - 1.0) * C.p2p_s(profile, per_f, 2, 2)
    bs = (n - 1.0) * C.p2p_s(profile, per_b, 2, 2)
    return _cost("dp", "dataparallel_master", "step", fwd, bwd, fs, bs, 3.0 * (n - 1.0), n - 1.0)
