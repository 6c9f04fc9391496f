"""Pipeline structure of many layouts at once, padded to a common width (the sweep kernel's shapes).

A layout's pipeline shape — schedule, pp, model chunks per rank, uneven split — fixes which layers
each virtual stage and each rank holds (spec/placement.py, cost/compute.py). Layouts of different
shapes are evaluated together by padding: per-rank arrays get P = max pp columns and per-stage arrays
S = max virtual stages, with `rank_valid` / `stage_valid` marking the real entries (padding holds
zeros: no layers, no embedding, no head, so every quantity linear in them is 0 there).
Each distinct shape is worked out once and gathered (a sweep has tens of shapes for 10^4-10^6 rows).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from .spec.placement import stage_layer_split
from .schedules import family
from .dedup import distinct_rows, factorize, gather_rows
from .spec.placement import StagePlacement, stage_placement

PLACEMENT_FIELDS = ("layers", "moe_layers", "dense_layers", "embedding", "head", "tied_copy")


def _per_row(name: str) -> cached_property:
    """A PipelineTable attribute: the per-shape array `name` gathered to the rows on first access."""
    def rows(self):
        return self._rows(name)

    return cached_property(rows)


@dataclass(frozen=True, kw_only=True, eq=False)
class PipelineTable:
    """Padded structure of N layouts, held per distinct shape (`per_shape`: name -> (U, ...) array) and
    gathered to the rows on first access (`shape_index` (N,) numbers the shapes, `shapes` lists them),
    so a kernel that works on a subset of rows (`take`) never builds the arrays of the others.

    Per rank (N, P): `placement` (a StagePlacement of arrays; its `chunks` is an (N,) array),
    `rank_valid`. Per virtual stage (N, S): dense/MoE layers, `first` and `last` (embedding / head
    stage), `stage_rank` (the rank running it; dualpipe: for microbatches entering at rank 0),
    `mirror_rank` (dualpipe's second copy on rank pp−1−j, else −1), `stage_valid`. `content_index`
    (N,) numbers the distinct per-stage contents (the same layers per virtual stage: 1F1B, GPipe,
    ZB-H1/H2 and DualPipe of one pp share them), so per-stage times are computed once per content.
    Rank classes: ranks of a row holding the same contents (all interior ranks of a pipeline, typically)
    form a class; `classes` is a StagePlacement of (N, Q) arrays, one column per class (Q is small and
    independent of pp), and `rank_class` (N, P) maps ranks to classes, so per-rank quantities that depend
    only on a rank's contents are computed per class and gathered (`of_class`)."""

    shape_index: np.ndarray
    shapes: tuple
    per_shape: dict

    def _rows(self, name: str) -> np.ndarray:
        return gather_rows(self.per_shape[name], self.shape_index)

    def take(self, rows) -> "PipelineTable":
        """The table of rows `rows` (same shapes)."""
        return self.of_shapes(self.shape_index[rows])

    def of_shapes(self, shape_index) -> "PipelineTable":
        """The table of rows with shapes `shape_index` (K,): what a step that reads only the shape sees."""
        return PipelineTable(shape_index=np.asarray(shape_index), shapes=self.shapes, per_shape=self.per_shape)

    @cached_property
    def placement(self) -> StagePlacement:
        return StagePlacement(chunks=self.chunks, **{f: self._rows("rank_" + f) for f in PLACEMENT_FIELDS})

    @cached_property
    def classes(self) -> StagePlacement:
        return StagePlacement(chunks=self.chunks, **{f: self._rows("class_" + f) for f in PLACEMENT_FIELDS})

    rank_class = _per_row("rank_class")
    rank_valid = _per_row("rank_valid")
    content_index = _per_row("content")
    dense_layers = _per_row("dense_layers")
    moe_layers = _per_row("moe_layers")
    first = _per_row("first")
    last = _per_row("last")
    stage_rank = _per_row("stage_rank")
    mirror_rank = _per_row("mirror_rank")
    stage_valid = _per_row("stage_valid")
    chunks = _per_row("chunks")  # model chunks per rank

    def content_counts(self, content: np.ndarray) -> np.ndarray:
        """(K, 4, S) dense layers, MoE layers, first-stage and last-stage flags of each virtual stage for
        content ids `content` (K,): what a stage's compute depends on, known from its content alone."""
        ps = self.per_shape
        rep = np.zeros(int(ps["content"].max()) + 1, dtype=np.int64)
        rep[ps["content"][::-1]] = np.arange(len(ps["content"]))[::-1]  # the first shape of each content
        table = np.stack([ps[k] for k in ("dense_layers", "moe_layers", "first", "last")], axis=1)
        return table[rep[np.asarray(content)]]

    @property
    def padded_ranks(self) -> int:
        """P: the rank columns of the per-rank arrays."""
        return self.per_shape["rank_valid"].shape[1]

    def of_class(self, x: np.ndarray) -> np.ndarray:
        """Per-class (N, Q) -> per-rank (N, P): each rank gets the value of its class."""
        n, q = len(self.shape_index), self.per_shape["class_layers"].shape[1]
        return np.ascontiguousarray(np.broadcast_to(x, (n, q))).ravel()[self.rank_class + (np.arange(n) * q)[:, None]]

    @property
    def layers(self) -> np.ndarray:
        return self.dense_layers + self.moe_layers

    def rank_sum(self, x: np.ndarray) -> np.ndarray:
        """Per-virtual-stage (N, S) -> per-rank sums (N, P) over the stages each rank holds (both
        copies for dualpipe): the padded form of `x @ stage_rank_matrix`."""
        n, P = len(self.shape_index), self.padded_ranks
        from . import native

        ps = self.per_shape
        mirrored = bool((ps["mirror_rank"] >= 0).any())
        if np.shape(x) == (n, ps["stage_rank"].shape[1]):  # in C, from the per-shape arrays (the same sums)
            got = native.rank_sum(x, self.shape_index, ps["stage_rank"], ps["mirror_rank"], ps["stage_valid"], P,
                                  mirrored)
            if got is not None:
                return got
        x = np.where(self.stage_valid, x, 0.0)
        base = (np.arange(n) * P)[:, None]
        out = np.bincount((base + self.stage_rank).ravel(), weights=x.ravel(), minlength=n * P)
        if mirrored:
            m = self.mirror_rank >= 0
            out = out + np.bincount((base + np.maximum(self.mirror_rank, 0)).ravel(), weights=np.where(m, x, 0.0).ravel(),
                                    minlength=n * P)
        return out.reshape(n, P)

    def held_by(self, rank: np.ndarray) -> np.ndarray:
        """(N, S) mask of the virtual stages rank `rank[i]` (N,) holds in row i (both dualpipe copies)."""
        r = np.asarray(rank)[:, None]
        return self.stage_valid & ((self.stage_rank == r) | (self.mirror_rank == r))

    def stage_of_rank(self, x: np.ndarray, rows=None) -> np.ndarray:
        """Per-rank (N, P) -> the value of each virtual stage's rank (N, S) (0 on padding); with `rows`,
        x holds only those rows of the table."""
        rows = np.arange(len(x)) if rows is None else np.asarray(rows)
        return np.where(self.stage_valid[rows], x[np.arange(len(x))[:, None], self.stage_rank[rows]], 0.0)


@lru_cache(maxsize=4096)
def _shape(model, schedule: str, pp: int, chunks: int, split) -> dict:
    """One pipeline shape (memoised pure function of the model and the shape): per-rank placement,
    per-virtual-stage layer split and rank, and the rank classes — ranks holding the same contents
    (interior ranks of a pipeline are alike), numbered by first rank so class 0 holds rank 0."""
    pl = stage_placement(model, pp=pp, vpp=chunks, schedule=schedule, layers_per_stage=split)
    d, e = stage_layer_split(model, pp=pp, vpp=chunks, schedule=schedule, layers_per_stage=split)
    fields = np.stack([np.asarray(getattr(pl, f), dtype=float) for f in PLACEMENT_FIELDS], axis=-1)  # (pp, F)
    seen: dict = {}  # a rank's contents -> its class, numbered in order of first rank (a dict: ~10x np.unique)
    rank_class = np.array([seen.setdefault(row, len(seen)) for row in map(tuple, fields.tolist())], dtype=np.int64)
    out = {**{f: np.asarray(getattr(pl, f)) for f in PLACEMENT_FIELDS}, "dense": d, "moe": e,
           "stage_rank": family(schedule).stage_rank(pp, chunks), "rank_class": rank_class,
           "classes": np.array(list(seen), dtype=float).reshape(len(seen), len(PLACEMENT_FIELDS))}
    for a in out.values():
        a.setflags(write=False)  # shared by every caller of the memo
    return {**out, "chunks": pl.chunks}


def _split_key(split) -> tuple | None:
    if split is None or (isinstance(split, str) and not split.strip()):
        return None
    if isinstance(split, str):
        return tuple(int(v) for v in split.split(","))
    if isinstance(split, float) and np.isnan(split):
        return None
    return tuple(int(v) for v in split)


def pipeline_table(model, *, schedule, pp, chunks, layers_per_stage=None) -> PipelineTable:
    """The padded structure of N layouts: schedule (N,) strings, pp and chunks (model chunks per rank
    for interleaved = vpp, else 1) (N,) ints, layers_per_stage None or (N,) of None / tuples / "a,b,..".
    """
    schedule = np.asarray(schedule, dtype=object)
    n = len(schedule)
    pp = np.broadcast_to(np.asarray(pp, dtype=np.int64), (n,))
    chunks = np.broadcast_to(np.asarray(chunks, dtype=np.int64), (n,))
    s_code, s_names = factorize(schedule)
    if layers_per_stage is None:
        l_code, l_vals = np.zeros(n, dtype=np.int64), [None]
    else:
        splits = (layers_per_stage if isinstance(layers_per_stage, np.ndarray) and layers_per_stage.dtype == object
                  else np.fromiter(layers_per_stage, dtype=object, count=n))
        l_code, l_vals = factorize(splits, missing_as_value=True)
    first, inv = distinct_rows(s_code, pp, chunks, l_code)
    shapes = tuple((str(s_names[s_code[i]]), int(pp[i]), int(chunks[i]), _split_key(l_vals[l_code[i]])) for i in first)
    P = max(p for _, p, _, _ in shapes)
    S = max(family(s).num_stages(p, v) for s, p, v, _ in shapes)
    U = len(shapes)
    a = {"rank_" + f: np.zeros((U, P)) for f in PLACEMENT_FIELDS}
    a.update({f: np.zeros((U, S)) for f in ("dense_layers", "moe_layers", "first", "last")})
    a.update(chunks=np.zeros(U), stage_rank=np.zeros((U, S), dtype=np.int64),
             mirror_rank=np.full((U, S), -1, dtype=np.int64), rank_valid=np.zeros((U, P), dtype=bool),
             stage_valid=np.zeros((U, S), dtype=bool),
             rank_class=np.zeros((U, P), dtype=np.int32))  # (int32: gathered to every row, half the bytes)
    built = [_shape(model, s, p, v, split) for s, p, v, split in shapes]
    Q = max(len(b["classes"]) for b in built) + 1
    cfields = np.zeros((U, Q, len(PLACEMENT_FIELDS)))
    for u, ((s, p, v, _), b) in enumerate(zip(shapes, built)):
        for f in PLACEMENT_FIELDS:
            a["rank_" + f][u, :p] = b[f]
        a["chunks"][u] = b["chunks"]
        k = len(b["dense"])
        a["dense_layers"][u, :k], a["moe_layers"][u, :k] = b["dense"], b["moe"]
        a["first"][u, 0] = 1.0
        a["last"][u, k - 1] = 1.0
        a["stage_rank"][u, :k] = b["stage_rank"]
        mirror = family(s).mirror_rank(p, v)
        if mirror is not None:
            a["mirror_rank"][u, :k] = mirror
        a["rank_valid"][u, :p] = True
        a["stage_valid"][u, :k] = True
        a["rank_class"][u, :p] = b["rank_class"]
        a["rank_class"][u, p:] = len(b["classes"])  # padded ranks: an empty class of their own
        cfields[u, :len(b["classes"])] = b["classes"]
    a.update({"class_" + f: cfields[:, :, j] for j, f in enumerate(PLACEMENT_FIELDS)})
    # stage contents: the layers of each virtual stage (first and last follow from the stage count)
    seen: dict = {}
    a["content"] = np.array([seen.setdefault((b["dense"].tobytes(), b["moe"].tobytes()), len(seen)) for b in built])
    return PipelineTable(shape_index=inv, shapes=shapes, per_shape=a)
