"""Bytes torch DistributedDataParallel keeps allocated on CPU (one gloo rank) after its construction and one
backward, with the gradients copied into DDP's buckets (`copied`: gradient_as_bucket_view=False, DDP's
default) or as views of them (`views`), from torch.profiler's allocation events; and the gradients' bytes.
One mode per process (an earlier DDP freed inside the profile would be counted). Prints JSON; run by
tests/test_memory_phases.py in a subprocess.

    python tests/helpers/ddp_bucket_bytes.py PORT copied|views
"""
import gc
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile

from profiler_peak import live_bytes  # this script's folder (tests/helpers) is on sys.path

os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", sys.argv[1]
dist.init_process_group("gloo", rank=0, world_size=1)


def layers():
    return [m for _ in range(8) for m in (torch.nn.Linear(512, 512), torch.nn.GELU())]


def kept_bytes(view: bool) -> int:
    torch.manual_seed(0)
    net = torch.nn.Sequential(*layers())
    x = torch.randn(16, 512)
    gc.disable()  # nothing but this step is freed inside the profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        # init_sync=False: no broadcast of the module's states, whose flat buffer is freed at an unknown time
        ddp = DDP(net, gradient_as_bucket_view=view, bucket_cap_mb=1, init_sync=False)
        ddp(x).square().mean().backward()
        dist.barrier()  # the bucket all-reduces have finished
    return live_bytes(prof)[0]


params = list(torch.nn.Sequential(*layers()).parameters())
grads = sum(p.numel() * p.element_size() for p in params)
print(json.dumps({"kept": kept_bytes(sys.argv[2] == "views"), "grads": grads}))
dist.destroy_process_group()
