"""Cost model: FLOPs and compute time (flops.py, compute.py; memory-bound op bytes in memory_ops.py, the
optimizer step in optimizer.py), topology and rank placement (topology.py), collective costs
(collectives.py) and per-parallelism communication (comm.py)."""
