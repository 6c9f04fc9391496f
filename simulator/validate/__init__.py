"""Predicted vs measured: map published (or harness-recorded) runs to specs, predict, and score.

This is the one mapping of `published_runs.csv` rows to parasim inputs: `parasim validate`,
`validation/make_accuracy.py` (docs/accuracy.md) and `validation/memory_published.py`
(docs/memory.md) all call `map_run` and `simulator.estimate.estimate`, so they report the same
predictions. Rows that cannot be mapped are returned as skipped **with the reason**, never dropped.

Input: a CSV with the columns of the shared `published_runs.csv` (README of that data set). The cells
a row gives (shape, batch, layout, recompute, precision, schedule) are used as given. What a row
leaves out is filled **by source** (`source_id`, table `SOURCE_RULES`) from what the source's
framework did at the time, never from the errors; every such choice is recorded per row in
`MappedRun.assumptions` (the "assumptions" column of the results). Rows of an unknown source get the
generic family rules (families.py, mapping.py), also recorded.

The package is cut by concern, imports pointing one way (cells <- sources <- mapping <- predict):
- `cells`: readers of one CSV cell (blank, integer, text), shared by the others;
- `sources`: the per-source rules (`SourceRules`, `SOURCE_RULES`, with each source's assumptions and
  their sources), the family table and the gpu_type -> hardware preset table;
- `mapping`: `map_run`, the cell parsers and the generic cell rules;
- `predict`: `read_runs`, the measured quantities, `predict_runs` and the statistics.
This module re-exports the names callers use (`from simulator.validate import map_run`, ...).
"""
from __future__ import annotations

from .mapping import DEFAULT_MICRO_BATCH, DEFAULT_VOCAB, MappedRun, map_run
from .predict import (error_summary, measured_oom, measured_step, memory_counter, memory_counter_bytes,
                      memory_stages, predict_runs, predicted_memory, read_runs, signed_error, spearman)
from .families import GPU_PRESETS, SourceRules, hardware_for_gpu, pad_vocab
from .sources import SOURCE_RULES

# Public constants of the former single module that are not in __all__: still `simulator.validate.X`.
from .predict import GIB, REQUIRED_COLUMNS, RESULT_COLUMNS  # noqa: F401,E402
from .families import FAMILIES  # noqa: F401,E402

__all__ = [
    "GPU_PRESETS",
    "DEFAULT_VOCAB",
    "DEFAULT_MICRO_BATCH",
    "SourceRules",
    "SOURCE_RULES",
    "MappedRun",
    "map_run",
    "read_runs",
    "measured_step",
    "measured_oom",
    "memory_stages",
    "memory_counter",
    "memory_counter_bytes",
    "predicted_memory",
    "predict_runs",
    "error_summary",
    "spearman",
    "signed_error",
    "pad_vocab",
    "hardware_for_gpu",
]
