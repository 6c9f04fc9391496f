"""Peak bytes per logit element above the bf16 logits of torch's cross-entropy forward + backward on CPU, from
torch.profiler's allocation events (every allocation inside the profile): F.cross_entropy(logits.float()) and
the same under torch's loss_parallel on vocabulary-sharded DTensor logits (one gloo rank). Prints JSON; run by
tests/test_activations_torch.py in a subprocess.

    python tests/helpers/loss_parallel_bytes.py PORT
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import loss_parallel
from torch.profiler import ProfilerActivity, profile

from profiler_peak import peak_bytes  # this script's folder (tests/helpers) is on sys.path

os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", sys.argv[1]
dist.init_process_group("gloo", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
T, V = 512, 4000
labels = torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(0))


def peak_per_element(parallel: bool) -> float:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        logits = torch.zeros(T, V, dtype=torch.bfloat16, requires_grad=True)
        if parallel:
            with loss_parallel():
                F.cross_entropy(DTensor.from_local(logits, mesh, [Shard(-1)]).float(), labels).backward()
        else:
            F.cross_entropy(logits.float(), labels).backward()
    return (peak_bytes(prof) - 2 * T * V) / (T * V)


print(json.dumps({"torch-fp32": peak_per_element(False), "loss_parallel": peak_per_element(True)}))
dist.destroy_process_group()
