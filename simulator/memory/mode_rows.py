"""Evaluate a per-layout activation term once per distinct (recompute, sequence parallelism, layout values) row
of N layouts and gather it back: the memory breakdown's activation terms depend on few distinct rows."""
from __future__ import annotations

import numpy as np

from ..dedup import distinct_rows, factorize


class ModeRows:
    """The distinct rows of (recompute, SP, the array-valued `kw`) of N layouts, found once: per-row
    activation terms are then evaluated on those rows only and gathered back (`per_mode`)."""

    def __init__(self, recompute, sequence_parallel, kw: dict):
        self.kw = kw
        self.scalar = np.ndim(recompute) == 0 and np.ndim(sequence_parallel) == 0
        if self.scalar:
            self.recompute, self.sp = recompute, sequence_parallel
            return
        n = max(len(np.atleast_1d(x)) for x in (recompute, sequence_parallel))
        rc = np.broadcast_to(np.asarray(recompute, dtype=object), (n,))
        sp = np.broadcast_to(np.asarray(sequence_parallel, dtype=bool), (n,))
        rc_code = factorize(rc)[0]
        cols = [np.broadcast_to(np.asarray(v), (n,)) for v in kw.values() if np.ndim(v)]
        first, self.inv = distinct_rows(rc_code, sp, *cols)
        self.recompute, self.sp = rc[first], sp[first]
        self.args = {k: (np.broadcast_to(np.asarray(v), (n,))[first] if np.ndim(v) else v) for k, v in kw.items()}
        self.modes = rc_code[first] * 2 + self.sp

    def per_mode(self, fn, model, training, rc=None, **extra) -> np.ndarray:
        """fn(model, training, recompute=..., sequence_parallel=..., **kw) per layout, once per distinct
        (recompute, SP) pair (rc: a scalar recompute for every row; False: fn takes no recompute)."""
        def call(r, sp, args):
            r = {} if r is False else {"recompute": r}
            return np.asarray(fn(model, training, sequence_parallel=bool(sp), **r, **args, **extra), dtype=float)

        if self.scalar:
            return call(self.recompute if rc is None else rc, self.sp, self.kw)
        vals = np.empty(len(self.modes))
        for c in np.unique(self.modes):
            idx = np.flatnonzero(self.modes == c)
            args = {k: (v[idx] if np.ndim(v) else v) for k, v in self.args.items()}
            vals[idx] = np.broadcast_to(call(self.recompute[idx[0]] if rc is None else rc, self.sp[idx[0]], args),
                                        (len(idx),))
        return vals[self.inv]
