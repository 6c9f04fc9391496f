"""FSDP2's copies on CPU, two gloo ranks: per forward + backward of a model of `units` fully_shard'ed linear layers
(bf16 parameters, fp32 reduce), how many all-gather copy-outs and reduce-scatter copy-ins run and how many bytes
each copies (the all-gather output they read, the reduce-scatter input they write), recorded by wrapping
torch's own functions. Prints JSON from rank 0; run by tests/test_fsdp_units.py in a subprocess.

    python tests/helpers/fsdp2_copies.py PORT
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

UNITS, WIDTH = 4, 256


def run(rank: int, port: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives, _fsdp_param_group

    seen = {"copy_out": [], "copy_in": []}
    out_fn, in_fn = _fsdp_param_group.foreach_all_gather_copy_out, _fsdp_collectives.foreach_reduce_scatter_copy_in

    def copy_out(result, *a, **k):
        seen["copy_out"].append(result.all_gather_output.numel() * result.all_gather_output.element_size())
        return out_fn(result, *a, **k)

    def copy_in(grads, rs_input, *a, **k):
        seen["copy_in"].append(rs_input.numel() * rs_input.element_size())
        return in_fn(grads, rs_input, *a, **k)

    _fsdp_param_group.foreach_all_gather_copy_out, _fsdp_collectives.foreach_reduce_scatter_copy_in = copy_out, copy_in
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(UNITS)])
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for m in net:
        fully_shard(m, mp_policy=mp_policy, reshard_after_forward=True)
    fully_shard(net, mp_policy=mp_policy)
    net(torch.randn(8, WIDTH)).float().square().mean().backward()
    if rank == 0:
        print(json.dumps({"units": UNITS, "unit_params": WIDTH * WIDTH, **seen}), flush=True)
    dist.barrier()  # both ranks done before either tears the group down (a rank left alone aborts)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(sys.argv[1],), nprocs=2)
