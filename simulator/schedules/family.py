"""What the rest of parasim needs to know about a pipeline schedule, in one record per schedule.

A `ScheduleFamily` says how the model's chunks sit on the ranks (the stage geometry), whether the
backward is split into B and W, whether the schedule flushes, how to build its op order, and the
flushed-schedule description the sweep uses to make its replay tables without building op lists,
and its closed forms:
- `inflight(p, m, i, v)`: peak microbatches in flight on rank i (p ranks, m microbatches as a float
  array of shape (..., 1), i = arange(p), v chunks per rank if the layout sets them), in units of one
  microbatch's activations over *all* the layers the rank holds (memory/inflight.py; exact for m ≥ p,
  the tests check them against the replayed op orders);
- `makespan(p, m, v, t, f, b, w, d=0.0)`: the makespan for uniform stages (formulas.md §5.2) with a
  p2p delay d on every hop between ranks (the replay's rule: an op whose input comes from another
  rank starts d after that input's op ends), with p, m, v, d (K,) arrays and t, f, b, w (K,) one
  microbatch's F+B+W, F, B, W on the slowest rank (over all its chunks). None for an asynchronous
  schedule (PipeDream: the steady state, kernel.py). Each family's module docstring derives its form
  from the op DAG (the makespan is the longest path; with uniform stages a path's length is
  n_F·F + n_B·B + n_W·W + n_hops·d, so the makespan is the largest of a few such linear forms);
- `p2p_exact(p, m, v, f, b, w, d)`: where that closed form is exact with d > 0 (bool (K,)); None where
  it never is: those families (ZB-H2, ZB-V, DualPipe, DualPipeV) add 2(p − 1)·d, the first forward's
  and the last backward's hops only, and the replay finds more (docs/pipeline.md).
Every module that used to test a schedule's name asks its family instead, so a new schedule is one
new module of this package that defines `FAMILIES` (the registry in `__init__` finds it).

Stage geometries (formulas.md §5.1; placement of chunks as the schedules' sources do):
- "line": pp·c stages in layer order, stage j on rank j mod pp (c = 1: GPipe, 1F1B, ZB-H1/H2,
  PipeDream; c = vpp: interleaved, Narayanan et al. 2021 §2.2.2);
- "v": 2·pp stages in a V, rank i holds stages i and 2pp−1−i (ZB-V, Qi et al. 2024; DualPipeV);
- "mirror": pp stages, each run by rank j for the microbatches entering at rank 0 and by rank pp−1−j
  for those entering at rank pp−1: two copies of the model, each rank holding two stages (DualPipe,
  DeepSeek-V3 report §3.2.1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

GEOMETRIES = ("line", "v", "mirror")


def exact_everywhere(p, m, v, f, b, w, d):
    """`p2p_exact` of a family whose closed form with p2p holds for every shape and delay."""
    return np.ones(np.broadcast(p, m, d).shape, dtype=bool)


@dataclass(frozen=True, kw_only=True)
class ScheduleFamily:
    name: str
    order: int  # position in listings and messages
    build: Callable  # (pp=, microbatches=, vpp=) -> Schedule
    geometry: str = "line"
    chunks: int | None = 1  # model chunks per rank; None: the layout's vpp (interleaved)
    split_backward: bool = False  # B (input gradient) and W (weight gradient) are separate ops
    synchronous: bool = True  # False: no flush (PipeDream), the steady state is what counts
    flush_spec: Callable | None = None  # (pp=, microbatches=) -> FlushSpec of a flushed one-stage-per-rank schedule
    hides_ep_comm: bool = False  # its overlapped F&B pairs hide the EP all-to-all (DualPipe, DeepSeek-V3 §3.2.1)
    even_pp: bool = False  # needs an even pp
    forwards_first: bool = False  # every forward before any backward (GPipe): all m microbatches' logits alive
    inflight: Callable | None = None  # closed form (p, m, i, v) -> peak in-flight microbatches on rank i
    makespan: Callable | None = None  # closed form (p, m, v, t, f, b, w, d=0) -> makespan, p2p delay d per hop
    p2p_exact: Callable | None = None  # (p, m, v, f, b, w, d) -> where `makespan` is exact with d > 0; None: nowhere
    source: str = ""

    def __post_init__(self):
        assert self.geometry in GEOMETRIES, self.geometry
        assert self.chunks is None or self.geometry == "line" or self.chunks == 2, (self.name, self.chunks)

    @property
    def takes_vpp(self) -> bool:
        """The layout's vpp sets its chunks per rank (interleaved)."""
        return self.chunks is None

    def chunks_per_rank(self, vpp=1):
        """Model chunks each rank holds: vpp (interleaved), 2 (V and mirror geometries), else 1."""
        return vpp if self.chunks is None else self.chunks

    @property
    def default_vpp(self) -> int:
        """vpp when the user gives none: 2 where the layout sets the chunks (interleaved), else 1."""
        return 2 if self.takes_vpp else 1

    def layer_parts_per_rank(self, vpp=1) -> int:
        """Parts a rank's share of the layers is cut into: its chunks, except "mirror", whose two chunks
        are copies of one stage (DualPipe: the share is one stage, held twice)."""
        return 1 if self.geometry == "mirror" else self.chunks_per_rank(vpp)

    def num_stages(self, pp, vpp=1):
        """Virtual stages in layer order: pp·chunks ("line"), 2·pp ("v"), pp ("mirror")."""
        if self.geometry == "mirror":
            return pp
        return pp * self.chunks_per_rank(vpp)

    def stage_rank(self, pp: int, vpp: int = 1) -> np.ndarray:
        """Rank running each virtual stage (for "mirror": for the microbatches entering at rank 0)."""
        j = np.arange(self.num_stages(pp, vpp))
        if self.geometry == "v":
            return np.where(j < pp, j, 2 * pp - 1 - j)
        return j % pp

    def mirror_rank(self, pp: int, vpp: int = 1) -> np.ndarray | None:
        """"mirror": the rank running each stage for the microbatches entering at rank pp−1; else None."""
        return pp - 1 - np.arange(pp) if self.geometry == "mirror" else None

    def stage_ranks(self, pp: int, vpp: int = 1) -> list[list[int]]:
        """For each virtual stage (in layer order) the ranks holding a copy of it."""
        first, mirror = self.stage_rank(pp, vpp).tolist(), self.mirror_rank(pp, vpp)
        if mirror is None:
            return [[r] for r in first]
        return [sorted({r, int(q)}) for r, q in zip(first, mirror)]

    def rank_matrix(self, pp: int, vpp: int = 1) -> np.ndarray:
        """(S, pp) 0/1 matrix of which ranks hold a copy of each virtual stage: `x @ M` turns
        per-stage quantities into per-rank sums."""
        ranks = self.stage_ranks(pp, vpp)
        M = np.zeros((len(ranks), pp))
        for j, rs in enumerate(ranks):
            M[j, rs] = 1.0
        return M

    @property
    def microbatch_share(self) -> float:
        """Share of the m microbatches each copy of a stage runs: 1/2 for "mirror" (half enter at each end)."""
        return 0.5 if self.geometry == "mirror" else 1.0

    @property
    def pp_stages(self) -> bool:
        """pp virtual stages whatever vpp ("line" with one chunk per rank, "mirror"): a split of the
        layers per rank is then a split per stage, and may be uneven."""
        return self.geometry == "mirror" or (self.geometry == "line" and self.chunks == 1)
