"""One-rank FSDP2 (gloo, CPU) with gradient sync off for two backwards, as torch.distributed.pipelining runs an
FSDP2 stage: prints, as JSON, the parameters' element count and the bytes FSDP2 keeps for their unsharded
accumulated gradients, per reduce dtype. Run by tests/test_memory_states.py in a subprocess.

    python tests/helpers/fsdp2_accumulated_grads.py PORT
"""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", sys.argv[1]
dist.init_process_group("gloo", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
out = {}
for name, reduce_dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128, bias=False), torch.nn.Linear(128, 64, bias=False))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
    for layer in m:
        fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(m, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    m.set_requires_gradient_sync(False)  # what pipelining's backward_maybe_with_nosync sets
    m.set_reshard_after_backward(False)
    for _ in range(2):
        m(torch.randn(4, 64)).sum().backward()
    kept = 0
    for state in fully_shard.state(m)._state_ctx.all_states:
        for p in (state._fsdp_param_group.fsdp_params if state._fsdp_param_group else ()):
            a = p.unsharded_accumulated_grad
            g = p._unsharded_param.grad if a is None else a
            kept += g.numel() * g.element_size()
    out[name] = kept
out["params"] = sum(p.numel() for p in m.parameters())
print(json.dumps(out))
dist.destroy_process_group()
