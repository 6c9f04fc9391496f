"""Per-GPU, per-pipeline-stage memory model (bytes): model states, activations, KV cache, overheads.

Public entry points: `memory_breakdown` (one layout -> MemoryResult) and `stage_memory_arrays`
(many layouts at once, for sweeps), both in `breakdown.py`. docs/memory.md describes the model.
"""
from .breakdown import MemoryBreakdown, MemoryResult, memory_breakdown, stage_memory_arrays  # noqa: F401
from .overheads import Overheads  # noqa: F401
