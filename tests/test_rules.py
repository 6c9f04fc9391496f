"""spec/rules.py: the ZeRO/FSDP sharding degrees, worked by hand, and memory and time using the same ones."""
import numpy as np
import pytest

from simulator.errors import InputError
from simulator.spec.rules import check_choice, shard_degrees


def test_expert_states_shard_only_over_copies_inside_one_shard_group():
    # dp = 8 ranks, ep = 4, HSDP shard groups of 2 (mesh (replicate 4, shard 2): groups {0,1}, {2,3}, ...).
    # EP groups are ranks {0..3} and {4..7}; expert slot k lives on ranks k and 4 + k. A shard group {0, 1}
    # holds slots 0 and 1: one copy each, so nothing of an expert shards inside it -> d_e = 1.
    d, d_e = shard_degrees(dp=8, cp=1, ep=4, shard_group_size=2)
    assert (d, d_e) == (2, 1)
    # shard groups of 4 ({0..3}, {4..7}) with ep = 2: slot k on ranks k, 2 + k, 4 + k, 6 + k -> two copies
    # of each slot inside a group -> d_e = 2
    assert shard_degrees(dp=8, cp=1, ep=2, shard_group_size=4) == (4, 2)
    # no HSDP: Megatron's expert data parallel group dp·cp/ep
    assert shard_degrees(dp=16, cp=2, ep=8) == (32, 4)


def _moe_estimate(shard_group_size):
    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware
    from simulator.spec.layout import Layout
    from simulator.spec.load import load_model
    from simulator.spec.training import Training

    from simulator.spec.stack import load_stack

    model = load_model("mixtral-8x7b")
    lay = Layout(num_gpus=64, tp=2, pp=4, ep=4, zero=1, shard_group_size=shard_group_size, micro_batch_size=1)
    # gradients set to None: the optimizer step's time is the step alone, without zeroing kept gradients
    tr = Training(seq_length=4096, global_batch_size=64, stack=load_stack("megatron", grad_buffer="set-to-none"))
    return model, estimate(model, tr, lay, load_hardware("dgx-h100"))


def test_the_optimizer_step_time_shards_expert_state_as_memory_does():
    """Under HSDP (dp = 8, shard groups of 2, ep = 4) each expert's optimizer state is whole on its rank
    (d_e = 1): memory holds it unsharded, and the optimizer step must touch all of it. The step's time
    over the optimizer bytes per rank is the same memory-bound rate with and without the experts
    sharded, so time / bytes agree between the HSDP layout and plain ZeRO-1 to a few per cent only if
    both use the same degrees (the old time rule, dp·cp/ep = 2, halved the expert part of the time)."""
    _, hsdp = _moe_estimate(2)
    _, flat = _moe_estimate(None)
    rate_hsdp = hsdp.to_dict()["time"]["optimizer_s"] / hsdp.memory.worst.optimizer_bytes
    rate_flat = flat.to_dict()["time"]["optimizer_s"] / flat.memory.worst.optimizer_bytes
    assert hsdp.memory.worst.optimizer_bytes > 1.5 * flat.memory.worst.optimizer_bytes  # experts unsharded
    assert rate_hsdp / rate_flat == pytest.approx(1.0, rel=0.1)


def test_a_choice_outside_its_values_names_the_field_the_values_and_the_value():
    with pytest.raises(InputError, match="recompute must be one of none, selective, full, got 'some'"):
        check_choice("recompute", "some", ("none", "selective", "full"))
    with pytest.raises(InputError):
        check_choice("zero", True, (0, 1))
    assert check_choice("zero", np.int64(1), (0, 1)) is None
