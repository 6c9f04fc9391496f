"""Cost model: FLOPs and compute time (flops.py, compute.py), topology and rank placement
(topology.py), collective costs (collectives.py) and per-parallelism communication (comm.py)."""
