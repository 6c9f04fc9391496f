"""N layouts as columns: what the kernel evaluates (`kernel.evaluate`).

A `LayoutBatch` comes from one `Layout` (`of_layout`: the one-row batch `estimate` evaluates) or from
columns (`of_columns`: sweep candidates, every layout field a scalar or an (N,) array). The cluster
setup (cp_algorithm, dp_mode, shard_group_size) is shared by every row. Building a batch checks only
what its columns could not say otherwise (lengths, choices); the layout rules themselves are
`spec/validate.py`'s, checked by the caller (a sweep's enumeration only makes valid rows).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .errors import InputError
from .schedules import SCHEDULE_NAMES
from .spec.layout import Layout
from .spec.rules import RECOMPUTE, check_choices

INT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch_size", "zero")
ROW_FIELDS = (*INT_FIELDS, "recompute", "sequence_parallel", "schedule", "layers_per_stage")


def _objects(items) -> np.ndarray:
    """A 1-D object array holding `items` as they are (tuples stay elements, not rows)."""
    out = np.empty(len(items), dtype=object)
    for i, x in enumerate(items):
        out[i] = x
    return out


def _splits(layers_per_stage, n) -> np.ndarray:
    """(N,) per-row uneven splits from None, one tuple for every row, or (N,) tuples / "a,b,..." / None."""
    if layers_per_stage is None:
        return np.full(n, None, dtype=object)
    if isinstance(layers_per_stage, np.ndarray) and layers_per_stage.dtype == object and layers_per_stage.shape == (n,):
        return layers_per_stage
    if isinstance(layers_per_stage, np.ndarray) or (isinstance(layers_per_stage, (list, tuple)) and len(layers_per_stage)
                                                    and not isinstance(layers_per_stage[0], (int, np.integer))):
        if len(layers_per_stage) != n:
            raise InputError(f"layers_per_stage has {len(layers_per_stage)} rows for {n} layouts")
        return _objects(list(layers_per_stage))
    return _objects([tuple(layers_per_stage)] * n)


@dataclass(frozen=True, kw_only=True, eq=False)
class LayoutBatch:
    """N layouts, one (N,) column per layout field, and the cluster setup they share."""

    num_gpus: int
    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray  # the routed experts' tensor-parallel degree (Layout.etp; = tp unless given)
    vpp: np.ndarray
    micro_batch_size: np.ndarray
    zero: np.ndarray
    recompute: np.ndarray  # object: names
    sequence_parallel: np.ndarray  # bool
    schedule: np.ndarray  # object: names
    layers_per_stage: np.ndarray  # object: None (even) or a tuple / "a,b,..." per row
    cp_algorithm: str = "ring"
    dp_mode: str = "ddp"
    shard_group_size: int | None = None
    recompute_layers: int = 0  # Layout.recompute_layers, for every row with recompute 'full'
    recompute_group: int = 1  # Layout.recompute_group, likewise

    @classmethod
    def of_columns(cls, *, num_gpus: int, tp=1, pp=1, dp=1, cp=1, ep=1, etp=None, vpp=1, micro_batch_size=1, zero=0,
                   recompute="none", sequence_parallel=False, schedule="1f1b", layers_per_stage=None,
                   cp_algorithm: str = "ring", dp_mode: str = "ddp",
                   shard_group_size: int | None = None, recompute_layers: int = 0,
                   recompute_group: int = 1) -> "LayoutBatch":
        """A batch from scalars and (N,) arrays, broadcast to one length; schedule and recompute names
        are checked (one message for the first unknown one)."""
        given = dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=tp if etp is None else etp, vpp=vpp,
                     micro_batch_size=micro_batch_size, zero=zero,
                     recompute=recompute, sequence_parallel=sequence_parallel, schedule=schedule)
        n = int(np.prod(np.broadcast_shapes(*(np.shape(v) for v in given.values())), dtype=np.int64))
        cols = {k: np.broadcast_to(np.asarray(given[k]), (n,)).astype(np.int64) for k in INT_FIELDS}
        sched, rec = (np.broadcast_to(np.asarray(given[k], dtype=object), (n,)) for k in ("schedule", "recompute"))
        check_choices("schedule", sched, SCHEDULE_NAMES)
        check_choices("recompute", rec, RECOMPUTE)
        return cls(num_gpus=int(num_gpus), **cols, recompute=rec, schedule=sched,
                   sequence_parallel=np.broadcast_to(np.asarray(sequence_parallel, dtype=bool), (n,)),
                   layers_per_stage=_splits(layers_per_stage, n), cp_algorithm=cp_algorithm, dp_mode=dp_mode,
                   shard_group_size=shard_group_size, recompute_layers=int(recompute_layers),
                   recompute_group=int(recompute_group))

    @classmethod
    def of_layout(cls, layout: Layout) -> "LayoutBatch":
        """The one-row batch of `layout` (already checked by `Layout` and `spec.validate`)."""
        return cls.of_columns(num_gpus=layout.num_gpus, **{k: getattr(layout, k) for k in ROW_FIELDS
                                                           if k != "layers_per_stage"},
                              layers_per_stage=_objects([layout.layers_per_stage]), cp_algorithm=layout.cp_algorithm,
                              dp_mode=layout.dp_mode, shard_group_size=layout.shard_group_size,
                              recompute_layers=layout.recompute_layers, recompute_group=layout.recompute_group)

    def __len__(self) -> int:
        return len(self.tp)

    def take(self, idx) -> "LayoutBatch":
        """The rows `idx` (an index array), same setup."""
        return replace(self, **{k: getattr(self, k)[idx] for k in ROW_FIELDS})

    def num_microbatches(self, global_batch_size: int) -> np.ndarray:
        """(N,) m = B / (dp·b) (exact for valid rows: spec/validate.py checks divisibility)."""
        return global_batch_size // (self.dp * self.micro_batch_size)
