"""Layout sweeps: enumerate every valid layout of a scenario, evaluate them vectorised, rank them.

Pipeline of a sweep (docs/sweep.md has the user's view):

1. `SweepSpace` says which values each layout field may take (a list, or "auto") and a few
   constraints; it comes from the scenario's `[sweep]` table and/or CLI flags (unknown keys rejected).
2. `enumerate_layouts` builds the candidates with numpy: every factorization num_gpus = tp·cp·pp·dp
   (ep carved out of dp·cp for MoE), crossed with micro-batch sizes, schedules, vpp, sequence
   parallelism, ZeRO stage and recompute mode, and keeps those that `spec.validate.layout_valid_mask`
   (the one place for divisibility rules) accepts. Rows come out in a deterministic order, grouped
   by virtual stages (pp x model chunks per rank), pp and the categorical fields.
3. `run_sweep` cuts the candidates into fixed chunks (chunk k = rows [k·size, (k+1)·size)), evaluates
   each chunk with one call of the vectorised kernel (`kernel.evaluate_layouts`, every field an array),
   and writes each finished chunk atomically (temp file + os.replace) into `<out>.parts/`, so an
   interrupted sweep resumes without losing or duplicating rows. Chunks can run on Dask.
4. Results are ranked: feasible first, tokens/s descending, ties broken by the label and then every
   other layout field (a total order, so the ranking is the same on every run).

"auto" defaults (chosen to keep the space to layouts a practitioner would run; pass explicit lists
to widen it):

| field             | auto means                                                                   |
|-------------------|------------------------------------------------------------------------------|
| tp                | divisors of num_gpus up to the NVLink domain (`nvlink_domain_gpus`, 8 on DGX) |
| pp                | divisors of num_gpus up to num_layers (a stage holds at least one layer)       |
| cp                | divisors of num_gpus keeping >= `min_tokens_per_cp_rank` (2048) tokens per rank |
| dp                | whatever is left: num_gpus / (tp·cp·pp)                                      |
| ep                | 1 for dense models; divisors of num_experts that divide dp·cp for MoE          |
| vpp               | interleaved only: every vpp >= 2 with num_layers % (pp·vpp) == 0             |
| micro_batch_size  | divisors of global_batch_size in [min_micro_batch_size, max_micro_batch_size] (1..8) |
| zero              | 0, 1, 2, 3 (zero > 0 only where dp·cp > 1: with nothing to shard it equals 0) |
| recompute         | none, selective, full                                                        |
| sequence_parallel | false, true (true only with tp > 1: it is a no-op without TP)               |
| schedule          | 1f1b, interleaved; pp = 1 rows always carry 1f1b (there is no pipeline)       |

A list given for `vpp` applies to the interleaved schedule only (vpp >= 2); the other schedules run
with vpp = 1 (zb-v, dualpipe and dualpipev hold their two chunks implicitly).

Uneven pipeline splits (`uneven_layers`, default on): with one chunk per rank (all schedules but
interleaved, zb-v, dualpipev), a pp that does not divide num_layers is kept when ceil(L/pp)·pp − L
<= 2, i.e. when the first and/or last stage can hold one layer fewer than the others, as Llama 3
405B ran 126 layers on 16 stages (7 + 14×8 + 7; Dubey et al. 2024 §3.3.2). With one layer to spare
the last stage (which also holds the LM head and the loss) gets it. `layers_per_stage` is then a
column ("7,8,...,7"; "" for an even split).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import multiprocessing as mp
import mmap
import os
import pickle
import shutil
import signal
import sys
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from functools import lru_cache
from types import MappingProxyType
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from .cores import available_cores, core_ids, huge_page_heap, release_freed_memory
from .cost.compute import num_virtual_stages
from .dedup import distinct_rows, factorize
from .errors import InputError, WorkerError
from .frames import text_column as _text
from .spec.layout import RECOMPUTE, SCHEDULES
from .spec.validate import layout_valid_mask

AUTO = "auto"
LIST_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "zero", "recompute",
               "sequence_parallel", "schedule")
NUMERIC_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "zero")
DEFAULT_SCHEDULES = ("1f1b", "interleaved")
# columns of a candidate table, in order (layout fields + derived num_microbatches)
CANDIDATE_COLUMNS = ("tp", "cp", "pp", "dp", "ep", "vpp", "micro_batch_size", "num_microbatches", "zero",
                     "recompute", "sequence_parallel", "schedule", "layers_per_stage")
ONE_CHUNK_SCHEDULES = ("gpipe", "1f1b", "zb-h1", "zb-h2", "dualpipe", "pipedream")
# columns of strings, held as object dtype (frames.text_column)
TEXT_COLUMNS = ("label", "recompute", "schedule", "layers_per_stage", "reason")
# step-time components compared by `winner_comparison` (those the kernel returns)
TIME_COMPONENTS = ("compute_s", "bubble_s", "exposed_comm_s")


# ---------------------------------------------------------------------------------------------
# the space
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SweepSpace:
    """Values each layout field may take ("auto" or a tuple) and constraints; see the module table.

    Constraints: `max_tp`, `max_pp`, `max_cp`, `max_ep`, `max_vpp` (upper bounds, None = none);
    `max_tp_within_node` (tp <= gpus_per_node); `min_micro_batch_size`/`max_micro_batch_size`
    (bounds of the auto micro-batch sizes and of given lists); `min_tokens_per_cp_rank` (auto cp only).
    """

    tp: tuple | str = AUTO
    pp: tuple | str = AUTO
    dp: tuple | str = AUTO
    cp: tuple | str = AUTO
    ep: tuple | str = AUTO
    vpp: tuple | str = AUTO
    micro_batch_size: tuple | str = AUTO
    zero: tuple | str = AUTO
    recompute: tuple | str = AUTO
    sequence_parallel: tuple | str = AUTO
    schedule: tuple | str = AUTO
    max_tp: int | None = None
    max_tp_within_node: bool = False
    max_pp: int | None = None
    max_cp: int | None = None
    max_ep: int | None = None
    max_vpp: int | None = None
    min_micro_batch_size: int = 1
    max_micro_batch_size: int = 8
    min_tokens_per_cp_rank: int = 2048
    uneven_layers: bool = True

    def __post_init__(self):
        for name in LIST_FIELDS:
            object.__setattr__(self, name, _normalise_values(name, getattr(self, name)))
        for name in ("max_tp", "max_pp", "max_cp", "max_ep", "max_vpp"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InputError(f"sweep {name} must be an integer >= 1, got {v!r}")
        for name in ("min_micro_batch_size", "max_micro_batch_size", "min_tokens_per_cp_rank"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"sweep {name} must be an integer >= 1, got {v!r}")
        if self.min_micro_batch_size > self.max_micro_batch_size:
            raise InputError(f"sweep min_micro_batch_size({self.min_micro_batch_size}) > "
                             f"max_micro_batch_size({self.max_micro_batch_size})")
        for name in ("max_tp_within_node", "uneven_layers"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"sweep {name} must be true or false, got {getattr(self, name)!r}")

    @classmethod
    def from_table(cls, table: dict | None, *, where: str = "[sweep]") -> "SweepSpace":
        """Build from a scenario's `[sweep]` table; unknown keys raise InputError naming the closest."""
        table = dict(table or {})
        known = [f.name for f in fields(cls)]
        for k in table:
            if k not in known:
                import difflib

                close = difflib.get_close_matches(k, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}"
                raise InputError(f"unknown key {k!r} in {where}{hint}")
        return cls(**table)

    def replace(self, **changes) -> "SweepSpace":
        """A copy with some fields changed; None values are ignored (convenient for CLI flags)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def _normalise_values(name: str, v):
    if isinstance(v, str):
        if v.strip().lower() == AUTO:
            return AUTO
        v = [x for x in v.split(",") if x.strip()]
    if isinstance(v, (int, bool, np.integer)):
        v = [v]
    if not isinstance(v, (list, tuple)) or not v:
        raise InputError(f"sweep {name} must be 'auto' or a non-empty list, got {v!r}")
    out = []
    for x in v:
        if name == "recompute":
            x = str(x).strip().lower()
            if x not in RECOMPUTE:
                raise InputError(f"sweep recompute value {x!r} is not one of {', '.join(RECOMPUTE)}")
        elif name == "schedule":
            x = str(x).strip().lower()
            if x not in SCHEDULES:
                raise InputError(f"sweep schedule value {x!r} is not one of {', '.join(SCHEDULES)}")
        elif name == "sequence_parallel":
            if isinstance(x, str):
                s = x.strip().lower()
                if s not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise InputError(f"sweep sequence_parallel value {x!r} is not true or false")
                x = s in ("true", "1", "yes", "on")
            elif not isinstance(x, (bool, np.bool_)):
                raise InputError(f"sweep sequence_parallel value {x!r} is not true or false")
            x = bool(x)
        else:
            try:
                xi = int(str(x).strip()) if isinstance(x, str) else x
            except ValueError:
                raise InputError(f"sweep {name} value {x!r} is not an integer") from None
            if isinstance(xi, bool) or not isinstance(xi, (int, np.integer)) or xi != int(xi):
                raise InputError(f"sweep {name} value {x!r} is not an integer")
            xi = int(xi)
            lo = 0 if name == "zero" else 1
            if xi < lo or (name == "zero" and xi > 3):
                raise InputError(f"sweep {name} value {xi} is out of range")
            x = xi
        if x not in out:
            out.append(x)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# enumeration
# ---------------------------------------------------------------------------------------------
def divisors(n: int) -> np.ndarray:
    """Sorted positive divisors of n."""
    n = int(n)
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return np.array(sorted(set(small + [n // d for d in small])), dtype=np.int64)


def _pick(values, auto: np.ndarray) -> np.ndarray:
    return auto if values == AUTO else np.array(sorted(values), dtype=np.int64)


def _numeric_candidates(model, training, hardware, num_gpus: int, space: SweepSpace) -> dict:
    """tp, cp, pp, dp, ep, micro_batch_size arrays of every factorization before schedule choices."""
    N = int(num_gpus)
    divs = divisors(N)
    tp_cap = space.max_tp or int(getattr(hardware, "nvlink_domain_gpus", getattr(hardware, "gpus_per_node", N)))
    if space.tp != AUTO and space.max_tp is None:
        tp_cap = N
    if space.max_tp_within_node:
        tp_cap = min(tp_cap, int(hardware.gpus_per_node))
    tp = _pick(space.tp, divs)
    tp = tp[tp <= tp_cap]
    pp = _pick(space.pp, divs[divs <= model.num_layers])
    if space.max_pp:
        pp = pp[pp <= space.max_pp]
    s = training.seq_length
    cp = _pick(space.cp, divs[(divs == 1) | (s // divs >= space.min_tokens_per_cp_rank)])
    if space.max_cp:
        cp = cp[cp <= space.max_cp]
    T, C, P = np.meshgrid(tp, cp, pp, indexing="ij")
    T, C, P = T.ravel(), C.ravel(), P.ravel()
    prod = T * C * P
    ok = N % prod == 0
    T, C, P = T[ok], C[ok], P[ok]
    D = N // (T * C * P)
    if space.dp != AUTO:
        ok = np.isin(D, np.array(space.dp, dtype=np.int64))
        T, C, P, D = T[ok], C[ok], P[ok], D[ok]
    # ep: carved out of dp·cp (Layout rule), only for MoE
    if model.is_moe:
        ep_auto = divisors(model.num_experts)
        ep = _pick(space.ep, ep_auto)
        if space.max_ep:
            ep = ep[ep <= space.max_ep]
    else:
        ep = np.array([1], dtype=np.int64) if space.ep == AUTO else np.array(sorted(space.ep), dtype=np.int64)
    n, k = len(T), len(ep)
    T, C, P, D = (np.repeat(a, k) for a in (T, C, P, D))
    E = np.tile(ep, n)
    ok = (D * C) % E == 0
    T, C, P, D, E = T[ok], C[ok], P[ok], D[ok], E[ok]
    # micro-batch sizes
    B = training.global_batch_size
    mb = _pick(space.micro_batch_size, divisors(B))
    mb = mb[(mb >= space.min_micro_batch_size) & (mb <= space.max_micro_batch_size)]
    n, k = len(T), len(mb)
    T, C, P, D, E = (np.repeat(a, k) for a in (T, C, P, D, E))
    M = np.tile(mb, n)
    return {"tp": T, "cp": C, "pp": P, "dp": D, "ep": E, "micro_batch_size": M}


def uneven_split(num_layers: int, pp: int) -> tuple[int, ...] | None:
    """Layers per stage when pp does not divide num_layers: ceil(L/pp) everywhere, one fewer on the last
    stage, then also on the first (deficit ceil(L/pp)·pp − L of 1 or 2); None when the deficit is larger
    (or when pp divides L)."""
    L, pp = int(num_layers), int(pp)
    if L % pp == 0 or pp > L:
        return None
    base = -(-L // pp)
    deficit = base * pp - L
    if deficit > 2 or pp < deficit:
        return None
    split = [base] * pp
    split[-1] -= 1
    if deficit == 2:
        split[0] -= 1
    return tuple(split)


def _schedule_choices(model, space: SweepSpace) -> list[tuple[str, int]]:
    """(schedule, vpp) pairs in sweep order."""
    scheds = DEFAULT_SCHEDULES if space.schedule == AUTO else space.schedule
    out = []
    for s in scheds:
        if s == "interleaved":
            vpps = range(2, model.num_layers + 1) if space.vpp == AUTO else [v for v in space.vpp if v >= 2]
            for v in vpps:
                if space.max_vpp is None or v <= space.max_vpp:
                    out.append((s, int(v)))
        else:
            out.append((s, 1))
    return out


def enumerate_layouts(model, training, num_gpus: int, space: SweepSpace | None = None, *,
                      hardware=None) -> pd.DataFrame:
    """Every valid layout of the space, one row each, in sweep order (see module docstring).

    Columns: CANDIDATE_COLUMNS (`schedule` and `recompute` as strings, `sequence_parallel` bool,
    `num_microbatches` = global_batch_size / (dp·micro_batch_size)). `hardware` gives the auto tp
    cap (NVLink domain) and `max_tp_within_node`; without it tp is capped only by the space.
    """
    space = space or SweepSpace()
    if hardware is None:
        hardware = _NoHardware(num_gpus)
    base = _numeric_candidates(model, training, hardware, num_gpus, space)
    zeros = (0, 1, 2, 3) if space.zero == AUTO else space.zero
    recs = RECOMPUTE if space.recompute == AUTO else space.recompute
    sps = (False, True) if space.sequence_parallel == AUTO else space.sequence_parallel
    choices = _schedule_choices(model, space)
    if not any(s == "1f1b" for s, _ in choices):
        choices = [("1f1b", 1)] + choices  # pp = 1 rows (no pipeline) carry 1f1b; see below
    user_has_1f1b = space.schedule == AUTO or "1f1b" in space.schedule
    blocks = []
    tp, cp, pp, dp, ep, mb = (base[k] for k in ("tp", "cp", "pp", "dp", "ep", "micro_batch_size"))
    L = model.num_layers
    pps = np.unique(pp)
    splittable = pps[(L % pps == 0) | np.array([uneven_split(L, int(p)) is not None for p in pps], dtype=bool)]
    split_text = {int(p): ",".join(map(str, uneven_split(L, int(p)) or ())) for p in pps}
    # the rules once per (schedule, sp) for all of its vpp values (a column each: the rules broadcast)
    vpps = {}
    for sched, vpp in choices:
        vpps.setdefault(sched, []).append(vpp)
    col = {(sched, vpp): j for sched, vs in vpps.items() for j, vpp in enumerate(vs)}
    valid = {(sched, sp): layout_valid_mask(model, training, tp=tp[:, None], pp=pp[:, None], dp=dp[:, None],
                                            cp=cp[:, None], ep=ep[:, None], vpp=np.array(vs)[None, :],
                                            micro_batch_size=mb[:, None], sequence_parallel=sp, schedule=sched,
                                            uneven_layers=space.uneven_layers and sched in ONE_CHUNK_SCHEDULES)
             for sched, vs in vpps.items() for sp in sps}
    for sched, vpp in choices:
        for sp in sps:
            uneven = space.uneven_layers and sched in ONE_CHUNK_SCHEDULES
            mask = valid[sched, sp][:, col[sched, vpp]].copy()
            if uneven:
                mask &= np.isin(pp, splittable)
            if sp:
                mask &= tp > 1
            if sched == "1f1b":
                if not user_has_1f1b:
                    mask &= pp == 1
            else:
                mask &= pp > 1
            if sched in ("dualpipe", "dualpipev"):
                mask &= pp % 2 == 0
            if not mask.any():
                continue
            idx = np.flatnonzero(mask)
            shard = (dp[idx] * cp[idx]) > 1
            for r in recs:  # zero innermost: the kernel takes it as an array, so these blocks share a call
                for z in zeros:
                    zidx = idx if z == 0 else idx[shard]
                    if not len(zidx):
                        continue
                    blocks.append((sched, vpp, sp, z, r, zidx))
    if not blocks:
        return _empty_candidates()
    sizes = np.array([len(b[5]) for b in blocks])
    rows = np.concatenate([b[5] for b in blocks])
    block_id = np.repeat(np.arange(len(blocks)), sizes)
    # virtual stages outermost (the kernel pads a chunk's stage axis to its widest row), then pp, then block
    # (schedule, vpp, sp, recompute, zero), then base order (tp, cp, pp, dp, ep, mb): the blocks are in
    # that order already, so a stable sort by (virtual stages, pp) (one key: 3x faster than lexsort)
    chunks = np.array([num_virtual_stages(1, b[1], b[0]) for b in blocks], dtype=np.int64)[block_id]
    p_rows = pp[rows]
    order = np.argsort(p_rows * chunks * (int(p_rows.max()) + 1) + p_rows, kind="stable")
    rows, block_id = rows[order], block_id[order]

    def per_block(i, dtype):
        return np.array([b[i] for b in blocks], dtype=dtype), block_id

    # pp and an even/uneven split go together (interleaved and V schedules need pp·chunks | L)
    split_of = np.array([split_text[int(p)] for p in pps], dtype=object)  # per distinct pp, gathered
    # each column written once, into its place in the table's blocks (_blocks_frame: ~5x pd.DataFrame here)
    return _blocks_frame({
        "tp": (tp, rows), "cp": (cp, rows), "pp": (pp, rows), "dp": (dp, rows), "ep": (ep, rows),
        "vpp": per_block(1, np.int64), "micro_batch_size": (mb, rows),
        "num_microbatches": (training.global_batch_size // (dp * mb), rows),
        "zero": per_block(3, np.int64), "recompute": per_block(4, object), "sequence_parallel": per_block(2, bool),
        "schedule": per_block(0, object), "layers_per_stage": (split_of, np.searchsorted(pps, pp)[rows]),
    }, len(rows))


class _NoHardware:
    def __init__(self, n):
        self.nvlink_domain_gpus = self.gpus_per_node = int(n)


def _empty_candidates() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=object if c in ("recompute", "schedule", "layers_per_stage") else
                                      (bool if c == "sequence_parallel" else np.int64)) for c in CANDIDATE_COLUMNS})


def group_runs(cands: pd.DataFrame) -> list[tuple[int, int]]:
    """[start, stop) row ranges of consecutive rows sharing pp, vpp, schedule, recompute, sp (the kernel's
    scalar fields; zero is array-valued in `estimate.evaluate_layouts`)."""
    n = len(cands)
    if n == 0:
        return []
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in ("pp", "vpp", "sequence_parallel", "schedule", "recompute", "layers_per_stage"):
        if c not in cands:
            continue
        a = cands[c].to_numpy()
        change[1:] |= a[1:] != a[:-1]
    starts = np.flatnonzero(change)
    stops = np.append(starts[1:], n)
    return list(zip(starts.tolist(), stops.tolist()))


def layout_labels(df: pd.DataFrame) -> np.ndarray:
    """Canonical labels (`Layout.label`: `TP8-CP1-PP4-DP16`, `-EP8` if ep > 1, `-V2` if vpp > 1), vectorised
    over the distinct (tp, cp, pp, dp, ep, vpp) combinations."""
    if len(df) == 0:
        return np.array([], dtype=object)

    distinct, inv = _distinct_labels(df)
    return distinct[inv]


def _distinct_labels(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct labels, each row's index into them): the label strings are built once each."""
    keys = df[["tp", "cp", "pp", "dp", "ep", "vpp"]].to_numpy(dtype=np.int64)
    first, inv = distinct_rows(*keys.T)
    labels = []
    for tp, cp, pp, dp, ep, vpp in keys[first].tolist():
        s = f"TP{tp}-CP{cp}-PP{pp}-DP{dp}"
        if ep > 1:
            s += f"-EP{ep}"
        if vpp > 1:
            s += f"-V{vpp}"
        labels.append(s)
    return np.array(labels, dtype=object), np.asarray(inv).ravel()


# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------
def _default_evaluator():
    from . import estimate

    fn = getattr(estimate, "evaluate_layouts", None)
    if fn is None:
        raise InputError("simulator.estimate.evaluate_layouts is not available yet")
    return fn


@lru_cache(maxsize=8192)
def schedule_refusal(schedule: str, pp: int, vpp: int, microbatches: int) -> str:
    """'' if `schedules.build` accepts this schedule shape, else its one-line reason (e.g. dualpipe needs
    an even m >= 2·pp). Asking the builder keeps its rules in one place; memoised (pure function). An
    accepted shape is built and compiled through the kernel's cache, so the replay reuses it."""
    from .kernel import _shape_tables

    try:
        _shape_tables(str(schedule), int(pp), int(microbatches), int(vpp))
    except InputError as exc:
        return str(exc).splitlines()[0]
    return ""


def evaluate_candidates(model, training, hardware, num_gpus: int, cands: pd.DataFrame, *,
                        evaluator: Callable | None = None, joined: bool = True) -> pd.DataFrame:
    """Evaluate candidate rows. Rows whose schedule shape the schedule builder refuses
    (`schedule_refusal`) are not sent to the kernel; they come back infeasible with the builder's
    reason. A kernel taking every layout field as an array (`array_fields = True`, as
    `estimate.evaluate_layouts`) gets all other rows in one call; any other evaluator one call per run
    of equal scalar fields (`group_runs`). Returns the candidate columns followed by the kernel's
    columns, in the candidates' order (index 0..n-1); with `joined=False`, the kernel's other columns
    only (`_join` adds the candidates': a worker process hands back less)."""
    join = _join if joined else (lambda _, res, __: _kernel_only(res))
    evaluator = evaluator or _default_evaluator()
    col = {c: cands[c].to_numpy() for c in CANDIDATE_COLUMNS}
    n = len(cands)
    if n and getattr(getattr(evaluator, "func", evaluator), "array_fields", False):
        res = _evaluate_arrays(model, training, hardware, num_gpus, col, evaluator)
        if res is not None:
            return join(cands, res, hardware)

    def split_kw(text):
        # only uneven rows pass layers_per_stage, so kernels without that keyword still serve even splits
        return {"layers_per_stage": tuple(int(x) for x in str(text).split(","))} if text else {}

    def call(idx):
        i0 = idx.start if isinstance(idx, slice) else idx[0]
        res = evaluator(model, training, hardware, num_gpus=int(num_gpus), pp=int(col["pp"][i0]),
                        vpp=int(col["vpp"][i0]), schedule=str(col["schedule"][i0]), zero=col["zero"][idx],
                        recompute=str(col["recompute"][i0]), sequence_parallel=bool(col["sequence_parallel"][i0]),
                        tp=col["tp"][idx], dp=col["dp"][idx], cp=col["cp"][idx], ep=col["ep"][idx],
                        micro_batch_size=col["micro_batch_size"][idx], **split_kw(col["layers_per_stage"][i0]))
        if len(res) != len(col["tp"][idx]):
            raise AssertionError(f"evaluator returned {len(res)} rows for {len(col['tp'][idx])} layouts")
        return res.reset_index(drop=True)

    parts = []
    for a, b in group_runs(cands):
        m = col["num_microbatches"][a:b]
        sched, pp, vpp = str(col["schedule"][a]), int(col["pp"][a]), int(col["vpp"][a])
        reason = {int(v): schedule_refusal(sched, pp, vpp, int(v)) for v in np.unique(m)}
        if not any(reason.values()):
            try:
                parts.append(call(slice(a, b)))
                continue
            except InputError:
                pass  # the kernel refused something the builder accepted: find out per microbatch count
        parts.append(_evaluate_per_microbatch_count(m, a, call, reason))
    if not parts:
        return cands.reset_index(drop=True) if joined else pd.DataFrame(index=pd.RangeIndex(0))
    return join(cands, pd.concat(parts, ignore_index=True), hardware)


def _kernel_only(res: pd.DataFrame, candidates=CANDIDATE_COLUMNS) -> pd.DataFrame:
    """The kernel's columns less the candidate columns it echoes (the candidates' own are joined back)."""
    echoed = [c for c in res.columns if c in candidates]
    return res.drop(columns=echoed) if echoed else res


def _join(cands: pd.DataFrame, res: pd.DataFrame, hardware) -> pd.DataFrame:
    res = _kernel_only(res, cands.columns)
    out = pd.concat([cands.reset_index(drop=True), res.reset_index(drop=True)], axis=1)
    hbm = getattr(hardware, "hbm_bytes", None)
    if hbm is not None and "peak_bytes" in out:
        out["memory_headroom_bytes"] = float(hbm) - out["peak_bytes"].to_numpy(dtype=float)
    return out


def _evaluate_arrays(model, training, hardware, num_gpus, col: dict, evaluator) -> pd.DataFrame | None:
    """All rows in one kernel call (the refused schedule shapes left out and marked); None if the
    kernel raises InputError, so the caller falls back to the grouped path that isolates it."""
    n = len(col["tp"])
    sch, pp, vpp, m = (col[k] for k in ("schedule", "pp", "vpp", "num_microbatches"))
    first, inv = distinct_rows(sch, pp, vpp, m)  # the builder is asked once per shape
    why_u = np.array([schedule_refusal(str(sch[i]), int(pp[i]), int(vpp[i]), int(m[i])) for i in first], dtype=object)
    why = why_u[inv] if len(first) else np.full(n, "", dtype=object)
    ok = np.flatnonzero(why == "")
    if not len(ok):  # every row refused by the schedule builder
        return pd.DataFrame({"tokens_per_s": np.full(n, np.nan), "feasible": np.zeros(n, bool), "reason": why})
    split = np.where(col["layers_per_stage"][ok] == "", None, col["layers_per_stage"][ok]).astype(object)
    try:
        res = evaluator(model, training, hardware, num_gpus=int(num_gpus), pp=col["pp"][ok], vpp=col["vpp"][ok],
                        schedule=col["schedule"][ok], zero=col["zero"][ok], recompute=col["recompute"][ok],
                        sequence_parallel=col["sequence_parallel"][ok].astype(bool), tp=col["tp"][ok],
                        dp=col["dp"][ok], cp=col["cp"][ok], ep=col["ep"][ok],
                        micro_batch_size=col["micro_batch_size"][ok], layers_per_stage=split)
    except InputError:
        return None
    if len(res) != len(ok):
        raise AssertionError(f"evaluator returned {len(res)} rows for {len(ok)} layouts")
    if len(ok) == n:
        return res.reset_index(drop=True)
    res.index = ok
    res = res.reindex(np.arange(n))
    refused = why != ""
    res["feasible"] = np.where(refused, False, res["feasible"].to_numpy()).astype(bool)
    res["reason"] = _text(np.where(refused, why, res["reason"].to_numpy()))
    return res


def _evaluate_per_microbatch_count(m: np.ndarray, offset: int, call, reason: dict) -> pd.DataFrame:
    """Evaluate a group one microbatch count at a time; counts refused (by the schedule builder, in
    `reason`, or by the kernel raising InputError) give infeasible rows carrying the reason."""
    refused = np.zeros(len(m), dtype=bool)
    why = np.full(len(m), "", dtype=object)
    ok_parts, ok_pos = [], []
    for v, msg in reason.items():
        if msg:
            refused[m == v] = True
            why[m == v] = msg
    rest = np.flatnonzero(~refused)
    try:  # first, the rows the builder accepts in one call
        if len(rest) and any(reason.values()):
            ok_parts.append(call(offset + rest))
            ok_pos.append(rest)
    except InputError:
        ok_parts, ok_pos = [], []
    todo = [] if ok_parts else [v for v in np.unique(m) if not reason.get(int(v), "")]
    for v in todo:
        pos = np.flatnonzero(m == v)
        try:
            ok_parts.append(call(offset + pos))
            ok_pos.append(pos)
        except InputError as exc:
            refused[pos] = True
            why[pos] = str(exc).splitlines()[0]
    if ok_parts:
        res = pd.concat(ok_parts, ignore_index=True)
        res.index = np.concatenate(ok_pos)
        res = res.reindex(np.arange(len(m)))
    else:
        res = pd.DataFrame({"tokens_per_s": np.full(len(m), np.nan)})
    res["feasible"] = np.where(refused, False, res["feasible"].to_numpy() if "feasible" in res else False).astype(bool)
    res["reason"] = _text(np.where(refused, why, res["reason"].to_numpy() if "reason" in res else ""))
    return res.reset_index(drop=True)


def rank_results(df: pd.DataFrame, ties: tuple | None = None) -> pd.DataFrame:
    """Sort: feasible first, tokens_per_s descending (untimed rows last), the layouts that do not fit
    by peak memory ascending, then label and every layout field ascending (a total order: identical
    inputs give identical rankings). Adds `label` if missing and a 1-based `rank`. `ties`:
    `_rank_ties(df)` worked out beforehand (a sweep worker does it while the last rows are evaluated;
    it reads only the layout columns)."""
    _, labels, by_tie = ties if ties is not None else _rank_ties(df)
    order = _rank_order(~df["feasible"].to_numpy(dtype=bool), df["tokens_per_s"].to_numpy(dtype=float),
                        df["peak_bytes"].to_numpy(dtype=float) if "peak_bytes" in df else None, by_tie)
    old = [c for c in ("rank", "label") if c in df]
    out = (df.drop(columns=old) if old else df).take(order).reset_index(drop=True)
    ranked = labels[0][labels[1][order]] if isinstance(labels, tuple) else np.asarray(labels, dtype=object)[order]
    out.insert(0, "label", _text(ranked))
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    return out


def _rank_order(infeasible: np.ndarray, tput: np.ndarray, peak: np.ndarray | None, by_tie: np.ndarray) -> np.ndarray:
    """The rows in rank order (rank_results): the order of the lexicographic sort on (infeasible,
    −tokens_per_s with NaN last, peak bytes of the layouts that do not fit with NaN last, tie keys),
    from `by_tie` (the rows sorted by the tie keys, `_rank_ties`) by stable sorts of the two groups
    on their few keys: fewer and smaller passes than one lexsort of every key over every row."""
    key = -np.where(np.isnan(tput), -np.inf, tput)
    bad = infeasible[by_tie]
    fit, rest = by_tie[~bad], by_tie[bad]
    fit = fit[np.argsort(key[fit], kind="stable")]
    k = key[rest]
    if peak is None:
        rest = rest[np.argsort(k, kind="stable")]
    else:
        pk = np.where(np.isnan(peak[rest]), np.inf, peak[rest])
        rest = rest[np.argsort(pk, kind="stable") if (k == k[:1]).all() else np.lexsort((pk, k))]  # (untimed: by peak)
    return np.concatenate([fit, rest])


def _rank_ties(df: pd.DataFrame) -> tuple[list, object, np.ndarray]:
    """The tie-breaking keys of `rank_results` (label, then schedule, vpp, micro_batch_size, zero,
    recompute, sequence_parallel, ep, layers_per_stage ascending; strings by their sorted codes, the
    same order as sorting the strings), folded into one mixed-radix integer where it fits (same order,
    fewer sort passes); the labels (the `label` column, or (distinct labels, each row's index)); and
    the rows sorted by the keys (stable)."""
    def key(v):  # strings by their sorted codes (same order as sorting the strings), numbers as they are
        v = np.asarray(v)
        if v.dtype == bool or np.issubdtype(v.dtype, np.number):
            return v
        codes, uniques = factorize(v)  # (the few distinct values sorted, not every row: pandas' sort=True codes)
        try:
            order = np.argsort(uniques, kind="stable")
        except TypeError:  # mixed types: pandas' order (numbers first), else compare as text
            try:
                return pd.factorize(v, sort=True)[0]
            except TypeError:
                return pd.factorize(v.astype(str), sort=True)[0]
        rank = np.full(len(uniques) + 1, -1, dtype=np.int64)  # (the last entry: a missing value's -1 stays -1)
        rank[order] = np.arange(len(uniques))
        return rank[codes]

    extra = [c for c in ("schedule", "vpp", "micro_batch_size", "zero", "recompute", "sequence_parallel", "ep",
                         "layers_per_stage") if c in df]
    if "label" in df:
        labels = df["label"].to_numpy()
        label_key = key(labels)
    elif len(df):  # sort the few distinct labels, not every row's
        distinct, inv = _distinct_labels(df)
        labels, label_key = (distinct, inv), np.argsort(np.argsort(distinct, kind="stable"))[inv]
    else:
        labels = label_key = np.array([], dtype=object)
    ties = [label_key] + [key(df[c].to_numpy()) for c in extra]
    tie = np.zeros(len(df), dtype=np.int64)  # the tie keys as one mixed-radix integer (same order, fewer passes)
    for k in ties:
        if np.asarray(k).dtype.kind not in "biu":  # not integer codes: keep the keys apart
            return ties, labels, np.lexsort(ties[::-1])
        k = np.asarray(k, dtype=np.int64)
        lo, span = (int(k.min()), int(k.max()) - int(k.min()) + 1) if len(k) else (0, 1)
        if span >= 2**62 // max(int(tie.max(initial=0)) + 1, 1):  # would overflow: keep the keys apart
            return ties, labels, np.lexsort(ties[::-1])
        tie = tie * span + (k - lo)
    return [tie], labels, np.argsort(tie, kind="stable")


_FIRST_COLUMNS = ("rank", "label", "tp", "cp", "pp", "dp", "ep", "vpp", "micro_batch_size", "num_microbatches", "zero",
                  "recompute", "sequence_parallel", "schedule", "layers_per_stage", "feasible", "reason", "tokens_per_s",
                  "mfu", "step_s", "peak_bytes", "memory_headroom_bytes")


def _column_order(columns) -> list:
    """The result table's column order: _FIRST_COLUMNS, then the others as they come."""
    return [c for c in _FIRST_COLUMNS if c in columns] + [c for c in columns if c not in _FIRST_COLUMNS]


def _order_columns(df: pd.DataFrame) -> pd.DataFrame:
    cols = _column_order(list(df.columns))
    fix = {c: _text(df[c].to_numpy(dtype=object)) for c in TEXT_COLUMNS if c in df and df[c].dtype != object}
    if list(df.columns) != cols:  # reordering copies a fragmented frame's columns
        df = df[cols]
    return df.assign(**fix) if fix else df  # one text dtype whichever evaluator made the column


def _ranked_frame(cands: pd.DataFrame, pieces: list, hardware, ties: tuple | None) -> pd.DataFrame | None:
    """The ranked result table from the kernel's columns of row ranges `pieces` ((a, b, frame), covering
    every candidate row once): what joining them to the candidates, putting the chunks together,
    ordering the columns and ranking give (`_join`, `_order_columns`, `rank_results`), with each
    column written once, straight into its place in the table's blocks (`_blocks_frame`), instead of
    copied five times: fresh memory costs a page fault per 4 KiB, which took most of that work's time.
    None (the caller takes that way) when the pieces do not cover the rows or their columns differ,
    repeat candidate columns, or lack what the rank reads."""
    pieces = sorted(pieces, key=lambda p: p[0])
    n, cols = len(cands), list(pieces[0][2].columns)
    bounds = [0] + [x for a, b, _ in pieces for x in (a, b)] + [n]  # each range ends where the next starts
    if (bounds[0::2] != bounds[1::2] or any(len(r) != b - a for a, b, r in pieces)
            or any(list(r.columns) != cols or not r.dtypes.equals(pieces[0][2].dtypes) for _, _, r in pieces)
            or set(cols) & (set(cands.columns) | {"rank", "label"}) or not {"tokens_per_s", "feasible"} <= set(cols)):
        return None
    parts = [{c: r[c].to_numpy() for c in cols} for _, _, r in pieces]

    def whole(c):  # a kernel column of every row (only those the rank reads)
        return np.concatenate([p[c] for p in parts])

    tput, feasible = whole("tokens_per_s").astype(float), whole("feasible").astype(bool)
    peak = whole("peak_bytes").astype(float) if "peak_bytes" in cols else None
    _, labels, by_tie = ties if ties is not None else _rank_ties(cands)
    order = _rank_order(~feasible, tput, peak, by_tie)
    where = np.empty(n, dtype=np.int64)  # each candidate row's place in the table
    where[order] = np.arange(n)
    label = labels[0][labels[1][order]] if isinstance(labels, tuple) else np.asarray(labels, dtype=object)[order]
    columns = {"rank": (np.arange(1, n + 1), None), "label": (label, None)}
    columns.update((c, (cands[c].to_numpy(), order)) for c in cands.columns)
    columns.update((c, ([p[c] for p in parts], [where[a:b] for a, b, _ in pieces])) for c in cols)
    hbm = getattr(hardware, "hbm_bytes", None)
    if hbm is not None and peak is not None:  # (_join)
        columns["memory_headroom_bytes"] = (float(hbm) - peak, order)
    return _blocks_frame({c: columns[c] for c in _column_order(list(columns))}, n)


def _blocks_frame(columns: dict, n: int) -> pd.DataFrame:
    """A DataFrame of n rows from `columns` (name -> (values, rows)): values[rows] when rows is an index
    array, values as they are when None, or, for lists, each piece values[k] scattered to rows[k];
    text columns as Python strings (object dtype, frames.text_column). Columns of one dtype share one
    2-D block, filled in place (pandas.api.internals.create_dataframe_from_blocks where pandas has it)."""
    def dtype(v):
        d = (v[0] if isinstance(v, list) else v).dtype
        return np.dtype(object) if d.kind in "OUS" else d

    groups: dict = {}
    for j, (c, (v, _)) in enumerate(columns.items()):
        groups.setdefault(dtype(v), []).append(j)
    names = list(columns)
    blocks = []
    for d, js in groups.items():
        block = np.empty((len(js), n), dtype=d)
        for row, j in zip(block, js):
            v, rows = columns[names[j]]
            if isinstance(v, list):
                for piece, at in zip(v, rows):
                    row[at] = piece
            elif rows is None:
                row[:] = v
            else:
                np.take(v, rows, out=row)
        blocks.append((block, np.array(js, dtype=np.intp)))
    try:
        from pandas.api.internals import create_dataframe_from_blocks
    except ImportError:  # older pandas: the plain constructor (one more copy)
        out = [None] * len(names)
        for block, js in blocks:
            for row, j in zip(block, js):
                out[j] = row
        return pd.DataFrame({c: _text(v) if v.dtype == object else v for c, v in zip(names, out)})
    return create_dataframe_from_blocks(blocks, index=pd.RangeIndex(n), columns=pd.Index(names))


# ---------------------------------------------------------------------------------------------
# chunked, resumable, optionally distributed run
# ---------------------------------------------------------------------------------------------
def _portable(obj):
    """A picklable stand-in for a frozen spec whose Mapping fields are read-only proxies (which
    pickle refuses): the class and its init fields, rebuilt by `_rebuild` on a Dask worker."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        kw = {}
        for f in fields(obj):
            if not f.init:
                continue
            v = getattr(obj, f.name)
            kw[f.name] = dict(v) if isinstance(v, MappingProxyType) else v
        return ("__portable__", type(obj), kw)
    return obj


def _rebuild(obj):
    if isinstance(obj, tuple) and len(obj) == 3 and obj[0] == "__portable__":
        return obj[1](**obj[2])
    return obj


def _timing(evaluator: Callable, time_infeasible: bool) -> Callable:
    """`evaluator` with its `time_infeasible` keyword set, when it has one (estimate.evaluate_layouts)."""
    fn = getattr(evaluator, "func", evaluator)
    try:
        takes = "time_infeasible" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a callable without a signature
        takes = False
    return functools.partial(evaluator, time_infeasible=time_infeasible) if takes else evaluator


def _evaluate_chunk_task(ctx, cands: pd.DataFrame) -> pd.DataFrame:
    model, training, hardware, num_gpus, evaluator = (_rebuild(x) for x in ctx)
    return evaluate_candidates(model, training, hardware, num_gpus, cands, evaluator=evaluator)


def _fingerprint(model, training, hardware, num_gpus, cands: pd.DataFrame, settings) -> str:
    h = hashlib.sha256()
    h.update(repr((model, training, getattr(hardware, "name", repr(hardware)), num_gpus, settings)).encode())
    h.update(repr(hardware).encode())
    h.update(pd.util.hash_pandas_object(cands, index=False).to_numpy().tobytes())
    return h.hexdigest()


def _parts_dir(out: str | os.PathLike) -> Path:
    return Path(str(out) + ".parts")


def _chunk_path(parts: Path, k: int) -> Path:
    return parts / f"chunk-{k:06d}.pkl"


def _write_atomic_pickle(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    df.to_pickle(tmp)
    os.replace(tmp, path)


def write_results(df: pd.DataFrame, out: str | os.PathLike) -> None:
    """Write a results table to .csv or .parquet (atomically: temp file + os.replace). CSV goes through
    pyarrow's writer (about 10x faster than pandas' on a sweep's float columns; every value reads back
    exactly, floats in shortest round-trip form)."""
    import pyarrow
    import pyarrow.csv

    out = Path(out)
    suffix = out.suffix.lower()
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    if suffix == ".csv":
        pyarrow.csv.write_csv(pyarrow.Table.from_pandas(df, preserve_index=False), tmp)
    elif suffix in (".parquet", ".pq"):
        df.to_parquet(tmp, index=False)
    else:
        raise InputError(f"--out must end in .csv or .parquet, got {str(out)!r}")
    os.replace(tmp, out)


def read_results(path: str | os.PathLike) -> pd.DataFrame:
    """Read a results table written by `write_results` (.csv or .parquet)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"file not found: {path}")
    if p.suffix.lower() == ".csv":
        df = pd.read_csv(p, keep_default_na=False, na_values=[""], dtype={c: str for c in TEXT_COLUMNS})
        for c in TEXT_COLUMNS:  # as the sweep returns them: object strings, "" where empty
            if c in df:
                df[c] = _text(df[c].astype(object).where(df[c].notna(), "").to_numpy(dtype=object))
        counts = ("rank", "tp", "cp", "pp", "dp", "ep", "vpp", "micro_batch_size", "num_microbatches", "zero",
                  "worst_stage")
        for c in df.columns:  # a float column of whole numbers (all 0, say) reads back as int: restore it
            if c not in counts and df[c].dtype.kind in "iu":
                df[c] = df[c].astype(float)
        return df
    if p.suffix.lower() in (".parquet", ".pq"):
        df = pd.read_parquet(p)
        for c in TEXT_COLUMNS:
            if c in df:
                df[c] = _text(df[c].to_numpy(dtype=object))
        return df
    raise InputError(f"results file must be .csv or .parquet, got {str(path)!r}")


def run_sweep(scenario, space: SweepSpace | None = None, *, executor: str = "local", scheduler=None,
              out: str | os.PathLike | None = None, chunk_size: int = 10_000, resume: bool = True,
              progress: bool | Callable[[int], None] = False, evaluator: Callable | None = None,
              keep_parts: bool = False, stop_after_chunks: int | None = None,
              workers: int | None = None, time_infeasible: bool = False) -> pd.DataFrame:
    """Enumerate, evaluate and rank every layout of `scenario` within `space`.

    - `space`: default `SweepSpace.from_table(scenario.sweep)`.
    - `executor`: "local" (this machine: `workers` processes, default one per available core and
      at most one per chunk: this one and `workers - 1` forked ones on Linux; 1, or another OS,
      evaluates in this process only) or
      "dask"; `scheduler`: a Dask scheduler address, a `distributed.Client`, or None (a LocalCluster
      with one single-threaded worker process per core is started for the run). Chunks are the
      unit of distribution: keep `chunk_size` well below the number of layouts to use many workers.
    - `out`: results file (.csv/.parquet). Finished chunks go to `<out>.parts/chunk-NNNNNN.pkl`
      (written atomically); with `resume` the chunks already there are reused (the parts folder
      carries a fingerprint of the sweep and is refused if it belongs to a different one); the
      folder is removed once `out` is written unless `keep_parts`.
    - `progress`: True for a tqdm bar on stderr, or a callable receiving the rows finished.
    - `evaluator`: the vectorised kernel (default `simulator.estimate.evaluate_layouts`).
    - `stop_after_chunks`: evaluate at most this many new chunks, then raise KeyboardInterrupt
      (tests and demos of resumption).
    - `time_infeasible`: also work out the step time of the layouts that do not fit (default: their
      time and throughput columns are NaN; memory is evaluated first and the time only where it fits,
      which the kernel's `time_infeasible` does; an evaluator without that keyword times what it times).
    Returns the ranked DataFrame (`rank_results`), one row per layout.
    """
    if executor not in ("local", "dask"):
        raise InputError(f"executor must be local or dask, got {executor!r}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InputError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InputError(f"workers must be an integer >= 1, got {workers!r}")
    space = space if space is not None else SweepSpace.from_table(getattr(scenario, "sweep", {}))
    model, training, hardware, N = scenario.model, scenario.training, scenario.hardware, scenario.num_gpus
    evaluator = _timing(evaluator or _default_evaluator(), bool(time_infeasible))
    cands = enumerate_layouts(model, training, N, space, hardware=hardware)
    n = len(cands)
    nchunks = -(-n // chunk_size)
    results: dict[int, pd.DataFrame] = {}

    parts = None
    if out is not None:
        suffix = Path(out).suffix.lower()
        if suffix not in (".csv", ".parquet", ".pq"):
            raise InputError(f"--out must end in .csv or .parquet, got {str(out)!r}")
        parts = _parts_dir(out)
        fp = _fingerprint(model, training, hardware, N, cands, (chunk_size, bool(time_infeasible)))
        manifest = parts / "manifest.json"
        if parts.exists() and not resume:
            shutil.rmtree(parts)
        if parts.exists():
            try:
                old = json.loads(manifest.read_text())
            except (OSError, ValueError):
                old = {}
            if old.get("fingerprint") != fp:
                raise InputError(f"{parts} holds chunks of a different sweep; delete it or run without resume")
            for k in range(nchunks):
                p = _chunk_path(parts, k)
                if p.is_file():
                    results[k] = pd.read_pickle(p)
        else:
            parts.mkdir(parents=True)
            tmp = manifest.with_name("manifest.json.tmp")
            tmp.write_text(json.dumps({"fingerprint": fp, "rows": n, "chunk_size": chunk_size, "chunks": nchunks}))
            os.replace(tmp, manifest)

    todo = [k for k in range(nchunks) if k not in results]
    bar = None
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, initial=sum(len(r) for r in results.values()), unit="layout", unit_scale=True,
                   desc="sweep", leave=False)
        tick = bar.update
    elif callable(progress):
        tick = progress
    else:
        tick = None

    def finish(k, df):
        results[k] = df
        if parts is not None:
            _write_atomic_pickle(df, _chunk_path(parts, k))
        if tick:
            tick(len(df))

    def chunk(k):
        return cands.iloc[k * chunk_size:(k + 1) * chunk_size]

    budget = len(todo) if stop_after_chunks is None else stop_after_chunks
    pieces: list = []  # (a, b, the kernel's columns of candidate rows a..b-1): a local sweep without chunk files
    ties: list = []  # the rank's tie keys, when a local pool works them out (_rank_ties)
    closing: list[threading.Thread] = []  # a local pool's stop, finishing while the rows are ranked
    try:
        try:
            if executor == "local":
                nproc = min(workers or available_cores(), len(todo[:budget]))
                if not sys.platform.startswith("linux"):  # fork is the safe default only on Linux
                    nproc = 1
                ctx = (model, training, hardware, N, evaluator)
                # several processes: with the rank's tie keys (_TIES) when every row is evaluated here
                tasks = _tasks(todo[:budget], chunk_size, _chunk_stages(cands), cands["num_microbatches"].to_numpy(),
                               nproc, time_infeasible=time_infeasible, ties=budget == len(todo))
                if parts is None:  # no chunk files: the kernel's columns kept per range, ranked at once
                    def deliver(a, b, res):
                        pieces.append((a, b, res))
                        if tick:
                            tick(b - a)
                else:
                    assemble = _Assembler(chunk_size, n, finish)

                    def deliver(a, b, res):
                        assemble(a, _join(cands.iloc[a:b], res, hardware))
                if nproc > 1:
                    _run_processes(tasks, cands, deliver, ctx, nproc, closing, keep=ties.append)
                else:
                    huge_page_heap()  # (cores.huge_page_heap; only where the parasim command kept freed memory)
                    for a, b in tasks:
                        deliver(a, b, _evaluate_rows(cands, a, b, ctx, joined=False))
            else:
                _run_dask(todo[:budget], chunk, finish, (model, training, hardware, N, evaluator), scheduler)
            if budget < len(todo):
                raise KeyboardInterrupt(f"stopped after {budget} chunks")
        finally:
            if bar is not None:
                bar.close()

        df = _ranked_frame(cands, pieces, hardware, ties[0] if ties else None) if pieces else None
        if df is None:
            if n == 0:
                df = _empty_candidates()
                for c in ("feasible",):
                    df[c] = pd.Series([], dtype=bool)
                df["reason"] = pd.Series([], dtype=object)
                df["tokens_per_s"] = pd.Series([], dtype=float)
            else:
                if pieces:  # kernel columns _ranked_frame does not take: through the chunks (ticked already)
                    assemble = _Assembler(chunk_size, n, results.__setitem__)
                    for a, b, res in pieces:
                        assemble(a, _join(cands.iloc[a:b], res, hardware))
                df = pd.concat([results[k] for k in range(nchunks)], ignore_index=True)
            # columns ordered first: one copy, by the rank
            df = _order_columns(rank_results(_order_columns(df), ties=ties[0] if ties else None))
        if out is not None:
            write_results(df, out)
            if not keep_parts:
                shutil.rmtree(parts, ignore_errors=True)
        return df
    finally:
        for t in closing:
            t.join()


_WORKER: dict = {}  # in a forked worker process: the candidates, the evaluation context, the result slots


def _init_worker(cands, ctx, cores, parent_pid, slots) -> None:
    _exit_with_parent(parent_pid)
    _WORKER.update(cands=cands, ctx=ctx, slots=slots)
    k = slots.ticket()  # the workers number themselves 0, 1, ...
    huge_page_heap()  # after the fork (cores.huge_page_heap; only where the parasim command kept freed memory)
    if cores:  # one core per worker (round robin): its replay then runs one thread
        os.sched_setaffinity(0, {cores[k % len(cores)]})


def _exit_with_parent(parent_pid: int) -> None:
    """Linux: the kernel sends this worker SIGTERM when the sweep process dies. A sweep killed with
    SIGKILL (or by the OOM killer) cannot shut its pool down, and its workers, which hold each other's
    end of the task queue, would wait on it forever."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG (linux/prctl.h)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def _worker_task(task: tuple[int, int], slot: int):
    """(a, b, the kernel's columns) of candidate rows task = (a, b), pickled into result slot `slot`
    of the shared memory (`_ResultSlots`; returns (slot, size)), or returned through the pool's pipe
    if they do not fit. The candidate columns stay out: the sweep process has them, and their text
    columns took most of the pickling. The `_TIES` task: (None, None, `_rank_ties` of every candidate)."""
    if task == _TIES:
        return _WORKER["slots"].put(slot, (None, None, _rank_ties(_WORKER["cands"])))
    a, b = task
    return _WORKER["slots"].put(slot, (a, b, _evaluate_rows(_WORKER["cands"], a, b, _WORKER["ctx"], joined=False)))


class _ResultSlots:
    """Shared memory through which the forked workers hand back their results: one slot per batch in
    flight, in an anonymous shared mapping made before the fork (so nothing to clean up; it goes with
    the processes). The pool's pipe moves ~3 MB of a chunk's results 64 KiB at a time, each piece read
    by the pool thread of the sweeping process, which must take the GIL from the evaluation running
    there: a batch's results took 100-250 ms to arrive, and the worker got its next batch only then.
    Here the pipe carries (slot, size), and the results are copied out of the slot in one piece."""

    def __init__(self, slots: int, slot_bytes: int):
        self.size = int(slot_bytes)
        self.buf = mmap.mmap(-1, 8 + max(1, slots) * self.size)  # MAP_SHARED | MAP_ANONYMOUS; a counter first
        self.free = list(range(slots))
        self.lock = mp.get_context("fork").Lock()  # a semaphore (multiprocessing.Value took 17 ms to set up)

    def ticket(self) -> int:
        """0, 1, 2, ... across the processes sharing the slots (the shared counter, under the lock)."""
        with self.lock:
            k = int.from_bytes(self.buf[:8], "little")
            self.buf[:8] = (k + 1).to_bytes(8, "little")
        return k

    def put(self, slot: int, answer) -> tuple:
        """In a worker: `answer` into the slot: (slot, bytes); (None, answer) if it does not fit."""
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > self.size:
            return None, answer
        at = 8 + slot * self.size
        self.buf[at:at + len(data)] = data
        return slot, len(data)

    def take(self, got: tuple):
        """In the sweep process: a worker's answer (`put`), read out of its slot (which the caller then
        frees)."""
        slot, x = got
        return x if slot is None else pickle.loads(self.buf[8 + slot * self.size:8 + slot * self.size + x])


def _evaluate_rows(cands: pd.DataFrame, a: int, b: int, ctx, joined: bool = True) -> pd.DataFrame:
    """Candidate rows a..b-1 in one kernel call (fewer calls, more shared evaluations: a call costs
    ~20 ms besides its rows; `joined` as in evaluate_candidates). The kernel works row by row, and its
    sums over the padded axes run left to right, so a row's results do not depend on its company, to
    the bit (tests/test_sweep.py checks it)."""
    model, training, hardware, num_gpus, evaluator = ctx
    return evaluate_candidates(model, training, hardware, num_gpus, cands.iloc[a:b], evaluator=evaluator,
                               joined=joined)


class _Assembler:
    """Results arrive as row ranges (`deliver(a, rows)`: candidate rows a, a+1, ...), which may split
    chunks; each chunk goes to `finish(k, rows)` once all its rows are in, in order."""

    def __init__(self, chunk_size: int, n: int, finish):
        self.size, self.n, self.finish, self.got = chunk_size, n, finish, {}

    def __call__(self, a: int, df: pd.DataFrame) -> None:
        for k in range(a // self.size, (a + len(df) - 1) // self.size + 1):
            lo, hi = max(a, k * self.size), min(a + len(df), (k + 1) * self.size)
            have = self.got.setdefault(k, [])
            have.append((lo, df.iloc[lo - a:hi - a]))
            if sum(len(p) for _, p in have) == min(self.size, self.n - k * self.size):
                del self.got[k]
                have.sort(key=lambda x: x[0])
                rows = pd.concat([p for _, p in have]) if len(have) > 1 else have[0][1]
                self.finish(k, rows.reset_index(drop=True))


def _chunk_stages(cands: pd.DataFrame) -> np.ndarray:
    """Virtual stages of each candidate row (cost.compute.num_virtual_stages, once per distinct shape)."""
    sched, pp, vpp = (cands[c].to_numpy() for c in ("schedule", "pp", "vpp"))
    first, inv = distinct_rows(sched, pp, vpp)
    return np.array([num_virtual_stages(int(pp[i]), int(vpp[i]), str(sched[i])) for i in first],
                    dtype=np.int64)[inv]


def _tasks(todo: list[int], chunk_size: int, stages: np.ndarray, micro: np.ndarray, nproc: int,
           cells: int = 4_000_000, time_infeasible: bool = False, ties: bool = False) -> list:
    """The kernel calls of a local sweep: candidate row ranges (a, b), in the order the processes take
    them; a call costs ~20 ms besides its rows, so calls are few. Several processes: the rows cut
    into `nproc` ranges of equal predicted time (`_balanced` with SPLIT_CALL[time_infeasible]), one
    call per process; if a range would pass `cells`, `_batches` (whole chunks: a long sweep, many
    calls, heaviest first, shared out as they finish). With `ties` (several processes), also the
    rank's tie keys, last (_TIES): whichever process is idle first works them out. One process:
    whichever predicts the least time in all, calls included (`_plan_s` with WARM_CALL): the chunk
    batches, or the rows cut into one to four more ranges than there are runs of consecutive chunks
    (no `_TIES`: the rank works the keys out)."""
    n = len(stages)

    def span(ks):
        return ks[0] * chunk_size, min((ks[-1] + 1) * chunk_size, n)

    def batches():
        return [span(b) for b in _batches(todo, chunk_size, stages, nproc, cells)] if todo else []

    runs, cur = [], []  # consecutive chunks: their rows are contiguous
    for k in todo:
        if cur and k != cur[-1] + 1:
            runs.append(span(cur))
            cur = []
        cur.append(k)
    if cur:
        runs.append(span(cur))
    if nproc > 1:
        got = _balanced(runs, stages, micro, nproc, cells, SPLIT_CALL[bool(time_infeasible)])
        return (batches() if got is None else got) + ([_TIES] if ties else [])
    # one process: the fewest predicted seconds in all, calls included (a few cuts, or the chunk batches)
    plans = [batches()] + [got for extra in range(4) if (got := _balanced(runs, stages, micro, len(runs) + extra,
                                                                          cells, WARM_CALL)) is not None]
    return min(plans, key=lambda plan: _plan_s(plan, stages, micro, WARM_CALL))


@dataclass(frozen=True)
class CallCost:
    """Predicted seconds of one kernel call on candidate rows a..b-1:
    call_s + Σ_rows (row_s + op_s · virtual stages · microbatches) + cell_s · (b − a) · widest stage
    count, plus sent_s per row for a worker's rows (pickling its answer into the result slot).
    The padded cells (rows x widest virtual-stage count) are the size of the call's per-stage arrays;
    stages x microbatches counts a row's replay ops (~3 per stage and microbatch). Least-squares fits
    of measured calls on the 2-core benchmark machine (benchmarks/fit_kernel_cost.py, data in
    benchmarks/results/kernel_cost-*.jsonl)."""

    call_s: float
    row_s: float
    cell_s: float
    op_s: float
    sent_s: float = 0.0

    def own_s(self, stages: np.ndarray, micro: np.ndarray) -> np.ndarray:
        """Each row's own predicted seconds: row_s + op_s · virtual stages · microbatches."""
        return self.row_s + self.op_s * stages * micro


# One process choosing its calls: 42 warm single calls of 2,000-30,000 rows of the three benchmark
# sweeps (shapes in memory; `collect`, kernel_cost-fit-2026-11-22.jsonl): median error 4.7 %, 5.2 % on 41
# held-out calls (kernel_cost-heldout-2026-11-22.jsonl, max 24 %).
WARM_CALL = CallCost(call_s=38.22e-3, row_s=3.728e-6, cell_s=3.788e-8, op_s=2.527e-9)
# Rows cut among processes: real two-process sweeps of the three benchmark sweeps, one fresh process
# each, their rows cut at a random c, each side's kernel call timed where it runs (`collect-split`, wall
# seconds, 60 cuts per mode; kernel_cost-split[-all]-fit-2026-11-22.jsonl), keyed by time_infeasible:
# median error 5.2 % / 15 %, held out (42 cuts each, kernel_cost-split[-all]-heldout-*) 7.6 % / 8.3 %;
# the two sides' time ratio, predicted over measured, median 1.06 / 1.02 (quartiles 0.96-1.14 /
# 0.92-1.16; WARM_CALL: 0.97 / 1.02, as close). sent_s: the worker's pickling of its answer, 0.37 / 0.36
# us a row (this process's unpickling and join follow both ranges whatever the cut; so do the tie keys,
# worked out by the first process idle).
SPLIT_CALL = {False: CallCost(call_s=59.47e-3, row_s=5.151e-6, cell_s=2.385e-8, op_s=3.445e-9, sent_s=0.3668e-6),
              True: CallCost(call_s=71.95e-3, row_s=6.214e-6, cell_s=5.038e-8, op_s=4.530e-9, sent_s=0.3642e-6)}


def _plan_s(plan: list[tuple[int, int]], stages: np.ndarray, micro: np.ndarray, cost: CallCost) -> float:
    """Predicted seconds of kernel calls on row ranges `plan` in one process, calls included (CallCost)."""
    own = cost.own_s(stages, micro)
    return sum(cost.call_s + cost.cell_s * (b - a) * float(stages[a:b].max()) + float(own[a:b].sum())
               for a, b in plan)


def _balanced(runs: list[tuple[int, int]], stages: np.ndarray, micro: np.ndarray, parts: int, cells: int,
              cost: CallCost):
    """At most `parts` ranges within the row runs `runs`, of about equal predicted time (`cost`), or
    None if one would pass `cells` (rows x widest virtual-stage count). The first range, in row order,
    is the sweeping process's and is listed last (`_run_processes` feeds the workers first); the
    others' rows also count `cost.sent_s`. The bound on the predicted time is found by bisection, the
    ranges greedily, over the rows grouped in segments of equal stage count."""
    seg = []  # (first row, past the last row, stage count, run end) of equal stage counts
    for a, b in runs:
        st = stages[a:b]
        cut = np.flatnonzero(np.diff(st)) + 1
        starts, stops = np.r_[0, cut], np.r_[cut, len(st)]
        seg += [(a + int(i), a + int(j), int(st[i]), b) for i, j in zip(starts, stops)]
    if not seg:
        return []
    cum = np.zeros(len(stages) + 1)  # the rows' own costs, summed
    np.cumsum(cost.own_s(stages, micro), out=cum[1:])
    cum = cum.tolist()
    cell_s, sent_s = cost.cell_s, cost.sent_s

    def seconds(a, b, widest, back=True):  # (the call constant, the same for every range: left out)
        return (b - a) * (cell_s * widest + sent_s * back) + cum[b] - cum[a]

    def split(limit):  # the ranges, greedily: each as long as `limit` allows; the first is this process's
        out, i, pos = [], 0, seg[0][0]
        while i < len(seg):
            start, widest, j, back = pos, 0, i, bool(out)
            while True:
                lo, hi, w, end = seg[j]
                wide = max(widest, w)
                if seconds(start, hi, wide, back) <= limit:  # the rest of segment j fits
                    widest, pos, j = wide, hi, j + 1
                    if hi == end or j == len(seg):  # its run ends: so does the range
                        break
                    continue
                first, last = max(lo, start), hi  # the last row of it that fits: bisection
                while last - first > 1:
                    mid = (first + last) // 2
                    first, last = (mid, last) if seconds(start, mid, wide, back) <= limit else (first, mid)
                if first > max(lo, start):  # part of it fits
                    widest, pos = wide, first
                elif lo <= start:  # not one row fits: that row alone
                    widest, pos = wide, start + 1
                else:  # the range ends before segment j
                    pos = lo
                break
            out.append((start, pos, widest))
            i = j
            while i < len(seg) and pos >= seg[i][1]:
                i += 1
            if i < len(seg):
                pos = max(pos, seg[i][0])
        return out

    low, high = 0.0, float(sum(seconds(a, b, max(x[2] for x in seg)) for a, b in runs))
    for _ in range(24):  # the least bound giving at most `parts` ranges (to 6e-8 of the total)
        mid = (low + high) / 2
        if len(split(mid)) <= parts:
            high = mid
        else:
            low = mid
    got = split(high)
    if any((b - a) * w > cells for a, b, w in got):
        return None
    return [(a, b) for a, b, _ in got[1:] + got[:1]]  # the workers take theirs first


def _batches(todo: list[int], chunk_size: int, stages: np.ndarray, nproc: int,
             cells: int = 4_000_000) -> list[tuple[int, ...]]:
    """Group consecutive chunks into kernel calls: a batch's rows x its widest virtual-stage count
    (the size of its padded per-stage arrays) stays within `cells` (4 M: 32 MB per float array) and
    within 1.1x the padded size of its parts called apart (chunks of much wider shapes stay apart), and
    with several processes a batch holds at most 1/(2·nproc) of the work (virtual stages summed over
    rows), so the workers can share it out evenly. Heaviest batch first (the order workers take them)."""
    stages = {k: stages[k * chunk_size:(k + 1) * chunk_size] for k in todo}
    work = {k: int(v.sum()) for k, v in stages.items()}
    target = sum(work.values()) / (2 * nproc) if nproc > 1 else float("inf")
    out, cur, rows, widest, w, cells_so_far = [], [], 0, 0, 0, 0
    for k in todo:
        n, s = len(stages[k]), int(stages[k].max(initial=1))
        padded = (rows + n) * max(widest, s)
        too_big = padded > cells or padded > 1.1 * (cells_so_far + n * s) or w + work[k] > target
        if cur and (k != cur[-1] + 1 or too_big):
            out.append(tuple(cur))
            cur, rows, widest, w, cells_so_far = [], 0, 0, 0, 0
        cur.append(k)
        rows, widest, w = rows + n, max(widest, s), w + work[k]
        cells_so_far = rows * widest
    if cur:
        out.append(tuple(cur))
    return sorted(out, key=lambda b: -sum(work[k] for k in b))


_TIES = "ties"  # a local pool's task besides row ranges: the rank's tie keys of every candidate (_rank_ties)


def _run_processes(tasks: list, cands: pd.DataFrame, deliver, ctx, nproc: int, closing: list | None = None,
                   keep=None) -> None:
    """Kernel calls on candidate row ranges `tasks` ((a, b), in the order they are taken; `deliver(a, b,
    the kernel's columns)` gets the results) on `nproc` cores: `nproc - 1` forked worker processes and
    this process (the numpy parts of the kernel hold the GIL, so threads would not help). The workers
    inherit the candidates, the specs and the evaluator through fork (initializer arguments are not
    pickled under fork: only row numbers are; the results come back through `_ResultSlots`), and
    build the schedule shapes their rows need. Every process takes the next task in the list (a worker gets its
    next one as it hands back the last); this process's share needs no fork and no result transfer,
    and the shapes it builds stay cached here. Each process is pinned to one core meanwhile (its
    replay then runs one thread); this one gets its affinity back at the end. With `closing` (a
    list), once every task is in, the pool's stop (the workers' exit) runs in a thread appended
    there, for the caller to join when it needs to (run_sweep ranks the rows meanwhile); without it,
    or on an error, it is joined before this returns. Fork is safe: the workers are forked before
    the pool starts its thread, and parasim leaves no threads running when a sweep returns (the
    replay joins its threads; run_sweep joins the pool's stop). A task may also be `_TIES`: the rank's
    tie keys of every candidate (`_rank_ties`), handed to `keep`."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    cores = core_ids() or []  # unknown: leave the OS to place the processes
    fork = mp.get_context("fork")
    rows_most = max(b - a for a, b in (t for t in tasks if t != _TIES))
    release_freed_memory()  # (cores.release_freed_memory: no free page shared copy-on-write with the workers)
    # two result slots per worker: its next task goes out before its last answer is copied out
    slots = _ResultSlots(2 * (nproc - 1), (rows_most + 1000) * 1024)  # ~300 bytes a row; bigger: the pipe
    pool = ProcessPoolExecutor(nproc - 1, mp_context=fork, initializer=_init_worker,
                               initargs=(cands, ctx, cores[1:] or cores, os.getpid(), slots))
    queue, futures, lock, stop = deque(tasks), {}, threading.Lock(), threading.Event()
    answers: dict = {}  # future -> its answer, copied out of its slot

    # answers are copied out by this thread as it collects them (collect), not by the pool's thread, which
    # passes the next task to the worker only once its callbacks return
    def receive(f):  # under the lock, once per finished batch: its answer copied out, its slot freed
        if f not in answers:
            answers[f] = None if f.cancelled() or f.exception() is not None else slots.take(f.result())
            slots.free.append(futures[f])

    def feed(f=None):  # also the done-callback of every worker batch (it runs in the pool's thread)
        nxt = None
        with lock:
            if queue and not stop.is_set():  # the worker's next task, before its last answer is copied out
                if not slots.free and f is not None:
                    receive(f)  # (no slot free: f's)
                slot = slots.free.pop()
                try:
                    nxt = pool.submit(_worker_task, queue.popleft(), slot)
                    futures[nxt] = slot
                except (BrokenProcessPool, RuntimeError):  # the pool broke or is shutting down: result() says why
                    slots.free.append(slot)
                    stop.set()
        if nxt is not None:
            nxt.add_done_callback(feed)

    def collect(done):
        for f in done:
            try:
                f.result()
            except BrokenProcessPool:
                raise WorkerError("a sweep worker process died (killed for memory?); finished chunks are kept "
                                  "with --out: run again to resume, with --workers 1 or a smaller --chunk-size"
                                  ) from None
            with lock:  # the done-callback may not have run yet
                receive(f)
                got, answers[f] = answers[f], None
            a, b, res = got  # the kernel's columns: the candidates' are here already
            if a is None:  # the _TIES task
                keep(res)
                continue
            deliver(a, b, res)

    collected, done_ok = set(), False
    try:
        for _ in range(nproc - 1):
            feed()
        huge_page_heap()  # the workers are forked: this process's fresh heap in huge pages (cores.huge_page_heap)
        with _pinned(cores[:1]):
            while True:
                with lock:
                    if not queue or stop.is_set():
                        break
                    task = queue.popleft()
                if task == _TIES:
                    keep(_rank_ties(cands))
                    continue
                a, b = task
                deliver(a, b, _evaluate_rows(cands, a, b, ctx, joined=False))
                done = [f for f in list(futures) if f.done() and f not in collected]
                collected.update(done)
                collect(done)
        with lock:  # the queue is empty (or stopped): no batch goes out any more
            pending = set(futures) - collected
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            collect(done)
        done_ok = True
    finally:
        stop.set()
        if done_ok and closing is not None:  # every batch is in: the caller joins the stop when it needs to
            closing.append(threading.Thread(target=_close_pool, args=(pool, slots), name="parasim-pool-stop"))
            closing[-1].start()
        else:
            _close_pool(pool, slots)


def _close_pool(pool, slots: "_ResultSlots") -> None:
    """Stop the workers (they exit; no batch is left) and join them, then free the result slots."""
    pool.shutdown(wait=True, cancel_futures=True)
    slots.buf.close()


@contextmanager
def _pinned(cores: list[int]):
    """This thread on `cores` (when given) for the block, then back on the cores it had."""
    before = core_ids()
    if cores and before is not None:
        os.sched_setaffinity(0, set(cores))
    try:
        yield
    finally:
        if cores and before is not None:
            os.sched_setaffinity(0, set(before))


def _run_dask(todo: list[int], chunk, finish, ctx, scheduler) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("executor 'dask' needs dask[distributed] installed") from None
    own = None
    if scheduler is None:  # one worker process per core: the kernel's numpy loops hold the GIL
        own = Client(LocalCluster(processes=True, threads_per_worker=1, dashboard_address=None))
        client = own
    elif isinstance(scheduler, str):
        own = Client(scheduler)
        client = own
    else:
        client = scheduler
    try:
        ctx_f = client.scatter([_portable(x) for x in ctx], broadcast=True)
        nthreads = max(1, sum(client.nthreads().values()))
        window = 2 * nthreads
        pending = {}
        it = iter(todo)
        ac = as_completed()

        def submit_next():
            k = next(it, None)
            if k is not None:
                f = client.submit(_evaluate_chunk_task, ctx_f, chunk(k), pure=False)
                pending[f] = k
                ac.add(f)

        for _ in range(window):
            submit_next()
        for f in ac:
            k = pending.pop(f)
            finish(k, f.result())
            submit_next()
    finally:
        if own is not None:
            cluster = getattr(own, "cluster", None)
            own.close()
            if cluster is not None:
                cluster.close()


# ---------------------------------------------------------------------------------------------
# reading the results
# ---------------------------------------------------------------------------------------------
def pareto_mask(df: pd.DataFrame, *, x: str = "memory_headroom_bytes", y: str = "tokens_per_s") -> np.ndarray:
    """True for rows on the Pareto front maximising both `x` and `y` (feasible rows only):
    no other feasible row has x' >= x and y' >= y with one strictly greater."""
    mask = np.zeros(len(df), dtype=bool)
    feas = np.flatnonzero(df["feasible"].astype(bool).to_numpy())
    if not len(feas):
        return mask
    xv = df[x].to_numpy(dtype=float)[feas]
    yv = df[y].to_numpy(dtype=float)[feas]
    order = np.lexsort((-xv, -yv))  # y descending, then x descending
    best_x = -np.inf
    for i in order:
        if xv[i] > best_x:
            mask[feas[i]] = True
            best_x = xv[i]
    return mask


def winner_comparison(df: pd.DataFrame) -> pd.DataFrame | None:
    """Step-time components of the winner (rank 1) and the runner-up: the best feasible row with a
    different label (else the second feasible row). Columns: component, winner_s, runner_up_s,
    difference_s (runner-up minus winner), sorted by |difference|. None without two feasible rows."""
    feas = df[df["feasible"].astype(bool)]
    if len(feas) < 2:
        return None
    w = feas.iloc[0]
    other = feas[feas["label"] != w["label"]]
    r = other.iloc[0] if len(other) else feas.iloc[1]
    comps = [c for c in df.columns if c.endswith("_s") and c != "step_s"
             and (c in TIME_COMPONENTS or c.startswith("exposed_")) and c != "exposed_comm_s"]
    comps = [c for c in TIME_COMPONENTS if c in df] + [c for c in comps if c not in TIME_COMPONENTS]
    rows = [{"component": c, "winner_s": float(w[c]), "runner_up_s": float(r[c]),
             "difference_s": float(r[c]) - float(w[c])} for c in comps]
    t = pd.DataFrame(rows, columns=["component", "winner_s", "runner_up_s", "difference_s"])
    t = t.reindex(t["difference_s"].abs().sort_values(ascending=False, kind="mergesort").index).reset_index(drop=True)
    t.attrs["winner"] = w.to_dict()
    t.attrs["runner_up"] = r.to_dict()
    return t


def short_variant(row) -> str:
    """The non-label layout choices of a row, e.g. `1f1b mbs1 Z1 sel-rc SP`."""
    rec = {"none": "no-rc", "selective": "sel-rc", "full": "full-rc"}.get(str(row["recompute"]), str(row["recompute"]))
    sp = " SP" if bool(row["sequence_parallel"]) else ""
    return f"{row['schedule']} mbs{int(row['micro_batch_size'])} Z{int(row['zero'])} {rec}{sp}"


def _describe(row) -> str:
    sp = "SP" if bool(row.get("sequence_parallel", False)) else "no SP"
    return (f"{row['label']} ({row['schedule']}, mbs {row['micro_batch_size']}, ZeRO-{row['zero']}, "
            f"recompute {row['recompute']}, {sp})")


def explain_winner(df: pd.DataFrame) -> str:
    """A short text: the winner, the runner-up, and the step-time components where they differ most."""
    t = winner_comparison(df)
    if t is None:
        nfeas = int(df["feasible"].astype(bool).sum()) if len(df) else 0
        if nfeas == 1:
            return f"Only one feasible layout: {_describe(df.iloc[0])}."
        reasons = df["reason"].astype(str).value_counts().head(3) if len(df) else pd.Series(dtype=int)
        common = "; ".join(f"{k} ({v})" for k, v in reasons.items())
        return "No feasible layout." + (f" Most common reasons: {common}." if common else "")
    w, r = t.attrs["winner"], t.attrs["runner_up"]
    gain = w["tokens_per_s"] / r["tokens_per_s"] - 1 if r["tokens_per_s"] else float("inf")
    lines = [f"Winner:    {_describe(w)}: {w['tokens_per_s']:,.0f} tokens/s, MFU {100 * w['mfu']:.1f}%, "
             f"step {w['step_s']:.3f} s",
             f"Runner-up: {_describe(r)}: {r['tokens_per_s']:,.0f} tokens/s, MFU {100 * r['mfu']:.1f}%, "
             f"step {r['step_s']:.3f} s ({100 * gain:+.1f}% for the winner)",
             "Largest differences in step time [s]: winner vs runner-up (runner-up minus winner)"]
    for _, row in t.head(4).iterrows():
        lines.append(f"  {row['component']:<28} {round(row['winner_s'], 4) + 0.0:9.4f} vs {round(row['runner_up_s'], 4) + 0.0:9.4f} "
                     f"({round(row['difference_s'], 4) + 0.0:+.4f})")
    return "\n".join(lines)


def best_per(df: pd.DataFrame, by: Iterable[str], value: str = "mfu") -> pd.DataFrame:
    """The best feasible row (highest `value`) for each combination of the `by` columns."""
    by = list(by)
    feas = df[df["feasible"].astype(bool)]
    if feas.empty:
        return feas
    idx = feas.groupby(by, sort=True)[value].idxmax()
    return feas.loc[idx.to_numpy()].reset_index(drop=True)


def bubble_vs_microbatches(schedules: Iterable[str], *, pp: int, microbatches: Iterable[int], vpp: int = 2,
                           forward_s: float = 1.0, backward_s: float = 2.0, weight_s: float = 0.0,
                           p2p_s: float = 0.0) -> pd.DataFrame:
    """Bubble fraction (1 − busy / (ranks × makespan)) of each schedule for each microbatch count,
    replayed on the pipeline engine (not a closed form). Times are per microbatch for one rank's
    whole share of the model, split evenly over its chunks (as `parasim schedule` does); `vpp`
    applies to 'interleaved'. Combinations a schedule cannot run (e.g. dualpipe with m < 2·pp)
    are left out. Columns: schedule, pp, vpp, microbatches, bubble_fraction, makespan_s."""
    from .pipeline import replay
    from .schedules import build

    rows = []
    for name in schedules:
        key = str(name).strip().lower()
        for m in microbatches:
            try:
                sch = build(key, pp=int(pp), microbatches=int(m), vpp=int(vpp) if key == "interleaved" else 1)
            except InputError:
                continue
            per = sch.num_stages // sch.num_ranks if key != "dualpipe" else 1
            tl = replay(sch, forward_s=forward_s / per, backward_s=backward_s / per, weight_s=weight_s / per,
                        p2p_s=p2p_s)
            rows.append({"schedule": key, "pp": int(pp), "vpp": int(sch.chunks_per_rank), "microbatches": int(m),
                         "bubble_fraction": float(tl.bubble_fraction), "makespan_s": float(tl.makespan_s)})
    return pd.DataFrame(rows, columns=["schedule", "pp", "vpp", "microbatches", "bubble_fraction", "makespan_s"])
