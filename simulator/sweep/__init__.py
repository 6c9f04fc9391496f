"""Layout sweeps: every valid layout of a scenario, evaluated vectorised, ranked.

space.py      `SweepSpace`: the values each layout field may take, and constraints
enumerate.py  `enumerate_layouts`: the candidate table (numpy)
run.py        `run_sweep`: chunks, resume, this process or Dask; `evaluate_candidates`
rank.py       `rank_results`: the total order of the results
results.py    `write_results` / `read_results`
Reading the results (why the winner wins, Pareto front) is `simulator.report.winner`.
"""
from ..spec.placement import uneven_split
from .enumerate import CANDIDATE_COLUMNS, divisors, enumerate_layouts
from .rank import layout_labels, rank_results
from .results import TEXT_COLUMNS, read_results, write_results
from .run import evaluate_candidates, run_sweep, schedule_refusal
from .space import AUTO, LIST_FIELDS, SweepSpace

__all__ = ["AUTO", "CANDIDATE_COLUMNS", "LIST_FIELDS", "TEXT_COLUMNS", "SweepSpace", "divisors", "enumerate_layouts",
           "evaluate_candidates", "layout_labels", "rank_results", "read_results", "run_sweep", "schedule_refusal",
           "uneven_split", "write_results"]
