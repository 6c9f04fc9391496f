"""Per-GPU, per-pipeline-stage memory model (bytes): model states, activations, KV cache, overheads.

Public entry points: `memory_breakdown` (one layout -> MemoryResult) and `stage_memory_arrays`
(many layouts at once, for the kernel), in `breakdown.py`; the result types in `result.py`.
docs/memory.md describes the model.
"""
from .breakdown import memory_breakdown, stage_memory_arrays  # noqa: F401
from .result import MemoryBreakdown, MemoryResult  # noqa: F401
from .overheads import Overheads  # noqa: F401
