"""Per-parallelism communication volumes: hand-worked examples and limiting cases."""
import numpy as np
import pytest

from simulator.cost import collectives as C
from simulator.cost.comm import (cp_comm, data_parallel_single_process_comm, dp_comm, ep_comm, pp_comm, tp_comm)
from simulator.cost.topology import group_span
from simulator.errors import InputError
from simulator.spec.hardware import load_hardware

P = load_hardware("dgx-h100")
H, S, B, L = 8192, 4096, 1, 80
A = B * S * H * 2                       # bf16 activation of one micro-batch: 67,108,864 bytes


def span(group, **degs):
    return group_span(P, group=group, **degs)


def test_tp_one_means_no_traffic():
    c = tp_comm(P, span("tp", tp=1), hidden_size=H, seq_length=S, micro_batch_size=B, num_layers=L,
                bytes_per_element=2, sequence_parallel=True, recompute="selective")
    assert float(c.bytes_per_rank) == 0 and float(c.time_s) == 0


def test_tp_all_reduce_bytes_hand_worked():
    # 4 all-reduces per layer (2 fwd, 2 bwd), each 2(t-1)/t·A bytes per rank; t=8, L=80:
    # 80 · 4 · 2·7/8 · 67,108,864 = 37,580,963,840 bytes
    c = tp_comm(P, span("tp", tp=8), hidden_size=H, seq_length=S, micro_batch_size=B, num_layers=L,
                bytes_per_element=2, sequence_parallel=False)
    assert float(c.bytes_per_rank) == 80 * 4 * 2 * 7 / 8 * A == 37_580_963_840
    assert float(c.forward_s) == pytest.approx(80 * 2 * C.all_reduce_s(P, A, 8, 8))


def test_sp_moves_the_same_bytes_plus_the_backward_regather():
    kw = dict(hidden_size=H, seq_length=S, micro_batch_size=B, num_layers=L, bytes_per_element=2)
    no_sp = tp_comm(P, span("tp", tp=8), sequence_parallel=False, **kw)
    sp = tp_comm(P, span("tp", tp=8), sequence_parallel=True, regather_in_backward=False, **kw)
    sp_regather = tp_comm(P, span("tp", tp=8), sequence_parallel=True, **kw)
    assert float(sp.bytes_per_rank) == pytest.approx(float(no_sp.bytes_per_rank))
    # +2 all-gathers of (t-1)/t·A per layer
    assert float(sp_regather.bytes_per_rank - sp.bytes_per_rank) == pytest.approx(L * 2 * 7 / 8 * A)


def test_full_recompute_repeats_forward_collectives_in_backward():
    kw = dict(hidden_size=H, seq_length=S, micro_batch_size=B, num_layers=L, bytes_per_element=2, sequence_parallel=False)
    base = tp_comm(P, span("tp", tp=8), **kw)
    full = tp_comm(P, span("tp", tp=8), recompute="full", **kw)
    assert float(full.backward_bytes_per_rank) == pytest.approx(2 * float(base.backward_bytes_per_rank))


def test_zero3_moves_one_and_a_half_times_ddp():
    # ZeRO §7: DDP 2Ψ elements, ZeRO-3 3Ψ (equal dtypes, one micro-batch)
    psi = 1e9
    sp = span("dp", tp=8, dp=16)
    ddp = dp_comm(P, sp, params_per_rank=psi, grad_bytes_per_element=2, param_bytes_per_element=2, zero=0)
    z3 = dp_comm(P, sp, params_per_rank=psi, grad_bytes_per_element=2, param_bytes_per_element=2, zero=3)
    z1 = dp_comm(P, sp, params_per_rank=psi, grad_bytes_per_element=2, param_bytes_per_element=2, zero=1)
    assert float(z3.bytes_per_rank) == pytest.approx(1.5 * float(ddp.bytes_per_rank))
    assert float(z1.bytes_per_rank) == pytest.approx(float(ddp.bytes_per_rank))
    assert float(ddp.bytes_per_rank) == pytest.approx(2 * 15 / 16 * psi * 2)


def test_ddp_buckets_add_latency_but_not_bytes():
    sp = span("dp", tp=8, dp=16)
    one = dp_comm(P, sp, params_per_rank=1e9, zero=0, bucket_bytes=None)
    many = dp_comm(P, sp, params_per_rank=1e9, zero=0, bucket_bytes=25e6)
    assert float(many.bytes_per_rank) == float(one.bytes_per_rank)
    assert float(many.calls_backward) == 160                     # 4e9 bytes / 25e6
    assert float(many.time_s) > float(one.time_s)


def test_asynchronous_dp_does_not_wait():
    sp = span("dp", tp=8, dp=16)
    c = dp_comm(P, sp, params_per_rank=1e9, zero=0, asynchronous=True)
    assert float(c.wait_s) == 0 and float(c.time_s) > 0


def test_hsdp_adds_a_replica_all_reduce_of_the_shard():
    shard = group_span(P, group="dp", tp=1, dp=8)           # FSDP inside a node
    replica = group_span(P, group="pp", tp=1, dp=8, pp=4)   # replicas across nodes (stand-in dimension)
    base = dp_comm(P, shard, params_per_rank=8e9, zero=3, grad_bytes_per_element=2)
    hsdp = dp_comm(P, shard, params_per_rank=8e9, zero=3, grad_bytes_per_element=2, replica_span=replica)
    # all-reduce of Ψ/F·bytes = 8e9/8·2 = 2e9 bytes over 4 replicas: 2·3/4·2e9 = 3e9 bytes more
    assert float(hsdp.bytes_per_rank - base.bytes_per_rank) == pytest.approx(3e9)


def test_pp_p2p_hand_worked_with_interleaving():
    # SP with t=8: each hop sends A/8 = 8,388,608 bytes; v=2 chunks -> 2 hops each way
    c = pp_comm(P, span("pp", tp=8, pp=4), hidden_size=H, seq_length=S, micro_batch_size=B, bytes_per_element=2,
                tp=8, sequence_parallel=True, vpp=2)
    assert float(c.forward_bytes_per_rank) == 2 * A / 8
    assert float(c.forward_s) == pytest.approx(2 * C.p2p_s(P, A / 8, 2, 1))   # stages on different nodes
    none = pp_comm(P, span("pp", tp=8, pp=1), hidden_size=H, seq_length=S, micro_batch_size=B, bytes_per_element=2)
    assert float(none.time_s) == 0


def test_ring_cp_volume_hand_worked():
    # c=4, s/c=1024, kv = 8 heads·128 = 1024: K+V chunk = 2·1024·1·1024·2 = 4 MiB per step, 3 steps fwd
    c = cp_comm(P, span("cp", cp=4), seq_length=S, micro_batch_size=1, num_layers=1, kv_hidden=1024, hidden_size=H,
                bytes_per_element=2)
    assert float(c.forward_bytes_per_rank) == 3 * 4 * 2**20
    assert float(c.backward_bytes_per_rank) == 2 * 3 * 4 * 2**20


def test_ring_cp_sends_only_the_ranks_own_heads_under_tp():
    # tensor parallelism splits the KV heads: with t = 8 each GPU holds 1 of the 8 KV heads and exchanges that
    # head's K and V only (Transformer Engine's ring runs on the rank's [s/c, b, n_kv/t, d_h] tensors), so the
    # per-GPU volume is the hand-worked 4 MiB step of the test above over 8
    c = cp_comm(P, span("cp", tp=8, cp=4), seq_length=S, micro_batch_size=1, num_layers=1, kv_hidden=1024,
                hidden_size=H, bytes_per_element=2, tp=8)
    assert float(c.forward_bytes_per_rank) == 3 * 4 * 2**20 / 8
    u = cp_comm(P, span("cp", tp=8, cp=4), seq_length=S, micro_batch_size=1, num_layers=1, kv_hidden=1024,
                hidden_size=H, bytes_per_element=2, algorithm="ulysses", tp=8)
    q, kv = 1024 * H * 2 / 8, 1024 * 1024 * 2 / 8
    assert float(u.forward_bytes_per_rank) == pytest.approx(3 / 4 * (2 * q + 2 * kv))


def test_ulysses_uses_four_all_to_all_per_layer():
    c = cp_comm(P, span("cp", cp=4), seq_length=S, micro_batch_size=1, num_layers=2, kv_hidden=1024, hidden_size=H,
                bytes_per_element=2, algorithm="ulysses")
    assert float(c.calls_forward) == 8
    q, kv = 1024 * H * 2, 1024 * 1024 * 2
    assert float(c.forward_bytes_per_rank) == pytest.approx(2 * 3 / 4 * (2 * q + 2 * kv))


def test_ep_dispatch_combine_volume_with_capacity_factor():
    # T=4096 tokens, k=8, h=7168, fp8 dispatch / bf16 combine, e=8, cf=1.25
    c = ep_comm(P, span("ep", ep=8), tokens_per_rank=4096, hidden_size=7168, top_k=8, num_moe_layers=1,
                dispatch_bytes_per_element=1, combine_bytes_per_element=2, load_factor=1.25)
    tok = 1.25 * 8 * 4096
    assert float(c.forward_bytes_per_rank) == pytest.approx(7 / 8 * tok * 7168 * (1 + 2))
    assert float(c.calls_forward) == 2 and float(c.calls_backward) == 2


def test_dataparallel_funnels_everything_through_the_master():
    c = data_parallel_single_process_comm(P, n_gpus=8, params=1e9, input_bytes=1e6, output_bytes=1e6)
    # forward: 7 parameter copies of 4e9 bytes + 7/8 of inputs and outputs; backward: 7 gradient copies
    assert float(c.forward_bytes_per_rank) == pytest.approx(7 * 4e9 + 7 / 8 * 2e6)
    assert float(c.backward_bytes_per_rank) == pytest.approx(7 * 4e9)
    ddp = dp_comm(P, group_span(P, group="dp", dp=8), params_per_rank=1e9, zero=0)
    assert float(c.time_s) > 5 * float(ddp.time_s)
    with pytest.raises(InputError):
        data_parallel_single_process_comm(P, n_gpus=16, params=1e9, input_bytes=0, output_bytes=0)


def test_vectorised_over_layout_arrays():
    tp = np.array([1, 2, 4, 8])
    c = tp_comm(P, group_span(P, group="tp", tp=tp, dp=4), hidden_size=H, seq_length=S, micro_batch_size=B,
                num_layers=L, bytes_per_element=2, sequence_parallel=True)
    assert c.time_s.shape == (4,) and c.time_s[0] == 0 and np.all(np.diff(c.bytes_per_rank) > 0)


def test_a_pipelined_tp_rank_sends_its_slice_with_or_without_sequence_parallelism():
    # Megatron's scatter/gather optimisation (Narayanan et al. 2021 §4.1, on by default), DeepSpeed's
    # partitioned pipe tensors and SP's sharded activations all send A/t per TP rank across a stage boundary;
    # the step's p2p time is the same with and without SP (before, the kernel sent the whole A without SP)
    from simulator.cost import comm
    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware
    from simulator.spec.layout import Layout
    from simulator.spec.load import load_model
    from simulator.spec.training import Training

    a = dict(hidden_size=8192, seq_length=4096, micro_batch_size=2, bytes_per_element=2)
    full = comm.activation_bytes(**a)
    assert float(comm.pp_message_bytes(**a, tp=8)) == full / 8
    assert float(comm.pp_message_bytes(**a, tp=8, sequence_parallel=True)) == full / 8
    assert float(comm.pp_message_bytes(**a, tp=8, scatter_gather=False)) == full
    m, hw = load_model("llama3-70b"), load_hardware("dgx-h100")
    tr = Training(seq_length=4096, global_batch_size=32)
    p2p = [estimate(m, tr, Layout(num_gpus=64, tp=8, pp=8, sequence_parallel=sp), hw,
                    keep_stage_times=True).stage_times["p2p"] for sp in (False, True)]
    assert p2p[0] == pytest.approx(p2p[1]) and float(np.ravel(p2p[0])[0]) > 0
