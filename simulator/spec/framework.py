"""What a framework can run: the layouts a software stack's framework supports, as data.

A stack preset's `[runs]` table (stacks/*.toml) says which layouts its framework runs; every rule has
its source in the preset's `[source]` table under the rule's key (`zero`, `schedules`, ..., or the name
of a refusal):

    zero = [0, 1, 2, 3]            ZeRO stages it runs (3 = FSDP full shard)
    tp = true                      a parallel dimension at a degree > 1 (also pp, cp, ep; etp: an expert
                                   tensor-parallel degree other than tp)
    sequence_parallel = true       Megatron-style sequence parallelism (with tp > 1)
    hsdp = true                    hybrid sharding: a shard group smaller than the DP group
    schedules = ["1f1b", ...]      pipeline schedules (with pp > 1)
    recompute = [...]              recompute modes;  cp_algorithms (with cp > 1);  dp_modes
    selective_modules = [...]      the modules its selective recompute can take (Stack.recompute_modules; default
                                   ["core_attn"]: the core attention only)
    pipeline_split = "first-last"  how it splits layers its pipeline stages do not divide (placement.PIPELINE_SPLITS:
                                   "first-last", the default; "torchtitan")
    [[runs.refuse]]                a combination it refuses: name, when = {column = condition, ...}, reason

A condition is a value (equality), a list (membership) or a comparison "OP X" or "% Y OP X", OP one of
> >= < <= == !=, X and Y integers or column names ("% pp != 0": not a multiple of pp). A refusal holds
where all of its conditions hold. Columns (COLUMNS): the sweep's layout columns, `cp_algorithm`,
`dp_mode`, `hsdp` and `moe` (the model has routed experts).

`refusal(stack, **columns)` gives, per row, '' where the framework runs the layout, else the reason of
the first rule that refuses it; `first_refusal` the rule's index (-1: runs). Both are vectorised:
columns are numpy arrays or scalars, broadcast together; a text column is compared once per distinct
value (`dedup.factorize`), so a sweep of 10^6 rows costs a few numpy passes per rule.
"""
from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..schedules import SCHEDULE_NAMES
from .placement import PIPELINE_SPLITS
from .rules import CP_ALGORITHMS, DEFAULT_RECOMPUTE_MODULES, DP_MODES, RECOMPUTE, RECOMPUTE_MODULES, ZERO_STAGES

INT_COLUMNS = ("tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch_size", "num_microbatches", "zero")
TEXT_COLUMNS = ("recompute", "schedule", "cp_algorithm", "dp_mode")
BOOL_COLUMNS = ("sequence_parallel", "hsdp", "moe")
COLUMNS = INT_COLUMNS + TEXT_COLUMNS + BOOL_COLUMNS
# the value of a column a caller leaves out (the sweep evaluates ring CP under DDP, no hybrid sharding)
DEFAULTS = {"cp_algorithm": "ring", "dp_mode": "ddp", "hsdp": False, "moe": False, "vpp": 1}
_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
        "!=": operator.ne}
_COMPARISON = re.compile(r"^\s*(?:%\s*(\w+)\s*)?(>=|<=|==|!=|>|<)\s*(\w+)\s*$")
# allow-list keys: (what they allow, the values there are, the column, the rule's extra condition)
_LISTS = {"zero": ("ZeRO stages", ZERO_STAGES, "zero", ()),
          "schedules": ("schedules", SCHEDULE_NAMES, "schedule", (("pp", ">", 1),)),
          "recompute": ("recompute modes", RECOMPUTE, "recompute", ()),
          "cp_algorithms": ("context-parallel algorithms", CP_ALGORITHMS, "cp_algorithm", (("cp", ">", 1),)),
          "dp_modes": ("data-parallel modes", DP_MODES, "dp_mode", ())}
# on/off keys: (the column condition a false value refuses, what it is)
_SWITCHES = {"tp": ((("tp", ">", 1),), "tensor parallelism"), "pp": ((("pp", ">", 1),), "pipeline parallelism"),
             "cp": ((("cp", ">", 1),), "context parallelism"), "ep": ((("ep", ">", 1),), "expert parallelism"),
             "etp": ((("etp", "!=", "tp"), ("moe", "==", True)), "experts split other than over the TP group (etp)"),
             "sequence_parallel": ((("sequence_parallel", "==", True), ("tp", ">", 1)), "sequence parallelism"),
             "hsdp": ((("hsdp", "==", True),), "hybrid sharding (shard_group_size)")}
KEYS = tuple(_LISTS) + tuple(_SWITCHES) + ("refuse", "pipeline_split", "selective_modules")


@dataclass(frozen=True)
class Condition:
    """`column` [% mod] OP value; `value` (and `mod`) an int, bool, text, a tuple (op "in") or a column name."""

    column: str
    op: str
    value: object
    mod: object = None


@dataclass(frozen=True)
class Refusal:
    """A combination the framework does not run: all `when` conditions hold. `name` keys its source."""

    name: str
    when: tuple[Condition, ...]
    reason: str


@dataclass(frozen=True)
class FrameworkRules:
    """The rules of one stack's framework: `refusals` in order (the first that holds names the reason),
    `table_json` the [runs] table they came from (`table`; a scenario's [stack.runs] overrides keys of it).
    No table: every layout runs."""

    refusals: tuple[Refusal, ...] = ()
    table_json: str = "{}"

    @property
    def table(self) -> dict:
        """The [runs] table (a fresh copy)."""
        return json.loads(self.table_json)

    @property
    def pipeline_split(self) -> str:
        """How the framework splits layers its pipeline stages do not divide (placement.default_split)."""
        return self.table.get("pipeline_split", "first-last")

    @property
    def selective_modules(self) -> tuple[str, ...]:
        """The modules the framework's selective recompute can take (spec/rules.py RECOMPUTE_MODULES)."""
        return tuple(self.table.get("selective_modules", DEFAULT_RECOMPUTE_MODULES))

    @property
    def names(self) -> tuple[str, ...]:
        """The rule keys (each has a [source] entry in a preset), in order, once each."""
        return tuple(dict.fromkeys(r.name for r in self.refusals))


def rules_from_table(table: dict, *, framework: str, where: str) -> FrameworkRules:
    """FrameworkRules from a [runs] table (module docstring); InputError naming `where` for a bad key or value."""
    if not isinstance(table, dict):
        raise InputError(f"[runs] in {where} must be a table (zero = [0, 1], schedules = [...], ...)")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r} in [runs] of {where}; known: {', '.join(KEYS)}")
    split = table.get("pipeline_split", "first-last")
    if split not in PIPELINE_SPLITS:
        raise InputError(f"pipeline_split in [runs] of {where} must be one of {', '.join(PIPELINE_SPLITS)}, "
                         f"got {split!r}")
    modules = _as_list(table.get("selective_modules", list(DEFAULT_RECOMPUTE_MODULES)), "selective_modules", where)
    bad = [m for m in modules if isinstance(m, bool) or m not in RECOMPUTE_MODULES]
    if bad:
        raise InputError(f"selective_modules in [runs] of {where}: {bad[0]!r} is not one of "
                         f"{', '.join(RECOMPUTE_MODULES)}")
    out = []  # switches first (pp > 1 where there is no pipeline at all says so), then lists, then refusals
    for key, (when, what) in _SWITCHES.items():
        if key in table:
            if not isinstance(table[key], bool):
                raise InputError(f"{key} in [runs] of {where} must be true or false, got {table[key]!r}")
            if not table[key]:
                out.append(Refusal(key, tuple(Condition(*c) for c in when), f"{what} ({framework} runs none)"))
    for key, (what, values, col, extra) in _LISTS.items():
        if key in table:
            out += _list_refusals(key, table[key], what=what, values=values, column=col, extra=extra,
                                  framework=framework, where=where)
    out += [_refusal(r, where=where) for r in _as_list(table.get("refuse", []), "refuse", where)]
    names = [r.name for r in out]
    dup = sorted({n for n in names if names.count(n) > 1} - set(_LISTS))
    if dup:
        raise InputError(f"refusal name {dup[0]!r} is used twice in [runs] of {where}")
    try:
        return FrameworkRules(tuple(out), json.dumps(table))
    except TypeError:  # (a TOML date or time: no rule reads one)
        raise InputError(f"[runs] of {where} holds a value that is not a number, text, list or table") from None


def _as_list(v, key: str, where: str) -> list:
    if not isinstance(v, list):
        raise InputError(f"{key} in [runs] of {where} must be a list, got {v!r}")
    return v


def _list_refusals(key, allowed, *, what, values, column, extra, framework, where) -> list[Refusal]:
    """One refusal per value of `values` not in `allowed` (so the reason names it)."""
    allowed = _as_list(allowed, key, where)
    bad = [v for v in allowed if isinstance(v, bool) or v not in values]
    if bad:
        raise InputError(f"{key} in [runs] of {where}: {bad[0]!r} is not one of {', '.join(map(str, values))}")
    runs = "/".join(map(str, allowed)) if allowed else "none"
    return [Refusal(key, (Condition(column, "==", v), *(Condition(*c) for c in extra)),
                    f"{column.replace('_', ' ')} {v} ({framework} runs {what} {runs})")
            for v in values if v not in allowed]


def _refusal(d, *, where: str) -> Refusal:
    """A Refusal from a [[runs.refuse]] entry {name, when, reason}."""
    if not isinstance(d, dict) or set(d) != {"name", "when", "reason"}:
        raise InputError(f"each [[runs.refuse]] entry in {where} needs exactly name, when and reason, got {d!r}")
    name, when, reason = d["name"], d["when"], d["reason"]
    if not (isinstance(name, str) and name.isidentifier() and isinstance(reason, str) and reason):
        raise InputError(f"[[runs.refuse]] in {where}: name must be an identifier and reason a text, got {d!r}")
    if not isinstance(when, dict) or not when:
        raise InputError(f"[[runs.refuse]] {name!r} in {where}: when must be a table of column = condition")
    return Refusal(name, tuple(_condition(c, v, f"[[runs.refuse]] {name!r} in {where}") for c, v in when.items()),
                   reason)


def _condition(column: str, v, where: str) -> Condition:
    """A Condition from `column = value | [values] | "OP X" | "% Y OP X"` (comparisons: numeric columns)."""
    if column not in COLUMNS:
        raise InputError(f"{where}: unknown column {column!r}; known: {', '.join(COLUMNS)}")
    kind = bool if column in BOOL_COLUMNS else str if column in TEXT_COLUMNS else int
    values = v if isinstance(v, list) else [v]
    if isinstance(v, str) and kind is int:
        m = _COMPARISON.match(v)
        if not m:
            raise InputError(f"{where}: {column} = {v!r} is not a comparison like '> 1' or '% pp != 0'")
        mod, op, x = m.groups()
        divisor = None if mod is None else _operand(mod, where)
        if isinstance(divisor, int) and divisor <= 0:  # a column divisor is a layout degree, >= 1
            raise InputError(f"{where}: {column} = {v!r} divides by {divisor}; the divisor must be an integer >= 1 "
                             f"or a numeric column")
        return Condition(column, op, _operand(x, where), divisor)
    if not values or any(type(x) is not kind for x in values):
        raise InputError(f"{where}: {column} = {v!r} must be {'true or false' if kind is bool else kind.__name__}"
                         f"{'' if kind is bool else ' or a list of them'}")
    return Condition(column, "in", tuple(v)) if isinstance(v, list) else Condition(column, "==", v)


def _operand(x: str, where: str):
    if x.lstrip("-").isdigit():
        return int(x)
    if x not in INT_COLUMNS:
        raise InputError(f"{where}: {x!r} is neither an integer nor a numeric column ({', '.join(INT_COLUMNS)})")
    return x


# ---- evaluation ------------------------------------------------------------------------------------
class _Columns:
    """The given columns (arrays or scalars), DEFAULTS for the others; text columns factorized once."""

    def __init__(self, cols: dict):
        self.cols = {**DEFAULTS, **cols}
        if "etp" not in cols and "tp" in cols:  # (the experts split like the attention unless said otherwise)
            self.cols["etp"] = cols["tp"]
        self._codes: dict = {}

    def operand(self, x):
        """A condition's operand: a column name gives that column, anything else is a literal."""
        return np.asarray(self.cols[x]) if isinstance(x, str) and x in INT_COLUMNS else x

    def equals(self, column: str, values: tuple) -> np.ndarray:
        """column == one of `values`; a text column array is compared once per distinct value."""
        v = self.cols[column]
        if np.ndim(v) == 0:
            return np.asarray(any(_same(v, x) for x in values))
        if column not in TEXT_COLUMNS:
            return np.isin(np.asarray(v), np.array(values))
        if column not in self._codes:
            from ..dedup import factorize

            self._codes[column] = factorize(np.asarray(v, dtype=object).ravel())
        codes, uniques = self._codes[column]
        hit = np.array([any(_same(u, x) for x in values) for u in uniques.tolist()] + [False], dtype=bool)
        return hit[codes].reshape(np.shape(v))


def _same(a, b) -> bool:
    """a == b without True == 1 (a bool condition matches only bools)."""
    a = a.item() if isinstance(a, np.generic) else a
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _holds(c: Condition, cols: _Columns) -> np.ndarray:
    """Where condition `c` holds."""
    if c.op == "in" or c.column in TEXT_COLUMNS or c.column in BOOL_COLUMNS:
        return cols.equals(c.column, c.value if c.op == "in" else (c.value,))
    lhs = np.asarray(cols.cols[c.column])
    if c.mod is not None:
        lhs = lhs % cols.operand(c.mod)
    return _OPS[c.op](lhs, cols.operand(c.value))


def first_refusal(rules: FrameworkRules, **columns) -> np.ndarray:
    """Per row (the columns broadcast together) the index in `rules.refusals` of the first refusal that
    holds, -1 where none does (the framework runs the layout)."""
    cols = _Columns(columns)
    shape = np.broadcast_shapes(*(np.shape(v) for v in columns.values()))
    out = np.full(shape, -1, dtype=np.int64)
    free = np.ones(shape, dtype=bool)
    for i, rule in enumerate(rules.refusals):
        m = free.copy()
        for c in rule.when:
            m &= _holds(c, cols)
            if not m.any():
                break
        out[m] = i
        free &= ~m
    return out


def refusal(stack, **columns):
    """'' where `stack`'s framework runs the layout (columns: COLUMNS, arrays or scalars), else the reason
    of the first rule that refuses it; a str for scalar columns, else an object array."""
    rules = stack.runs
    idx = first_refusal(rules, **columns)
    reasons = np.array([r.reason for r in rules.refusals] + [""], dtype=object)
    out = reasons[idx]
    return str(out) if np.ndim(out) == 0 else out


def summary(rules: FrameworkRules) -> str:
    """One line of what the rules allow, e.g. 'zero 0/3; tp+pp+cp+ep; gpipe/1f1b/...; 1 refused combination'."""
    t = rules.table
    if not t:
        return "any layout"
    dims = "+".join(k for k in ("tp", "pp", "cp", "ep") if t.get(k, True)) or "data parallel only"
    parts = [f"zero {'/'.join(map(str, t.get('zero', ZERO_STAGES)))}", dims]
    if t.get("pp", True):
        parts.append("/".join(t.get("schedules", ("any schedule",))))
        if rules.pipeline_split != "first-last":
            parts.append(f"{rules.pipeline_split} layer split")
    n = len(t.get("refuse", ()))
    return "; ".join(parts + ([f"{n} refused combination{'s' if n != 1 else ''}"] if n else []))


# Megatron-Core's asserts on overlap_moe_expert_parallel_comm that read the layout (transformer_config.py
# __post_init__, NVIDIA/Megatron-LM d98e8a6): the rules a stack with `moe_a2a_overlap` adds to its [runs]
_A2A = "with moe_a2a_overlap (Megatron-Core --overlap-moe-expert-parallel-comm asserts"
A2A_OVERLAP_RULES = (
    ("moe_a2a_overlap_ep", (("ep", "<=", 1),),
     f"expert parallelism 1 {_A2A} 'only supported with expert model parallelism')"),
    ("moe_a2a_overlap_vpp", (("pp", ">", 1), ("vpp", "<=", 1)),
     f"pipeline parallelism without virtual stages {_A2A} 'virtual_pipeline_model_parallel_size must be specified "
     f"when pipeline_model_parallel_size > 1')"),
    ("moe_a2a_overlap_full", (("recompute", "==", "full"),),
     f"full recompute {_A2A} 'disable full recomputation when enabling overlap_moe_expert_parallel_comm')"),
)


def with_a2a_overlap_rules(rules: FrameworkRules, on: bool) -> FrameworkRules:
    """`rules` with A2A_OVERLAP_RULES appended when `on`, without them when not (idempotent: a Stack rebuilt by
    dataclasses.replace passes its rules through again)."""
    names = {n for n, _, _ in A2A_OVERLAP_RULES}
    kept = tuple(r for r in rules.refusals if r.name not in names)
    extra = tuple(Refusal(n, tuple(Condition(*c) for c in when), reason) for n, when, reason in A2A_OVERLAP_RULES)
    return FrameworkRules(kept + (extra if on else ()), rules.table_json)


def layout_columns(layout, model, training) -> dict:
    """The rule columns of one Layout (spec/layout.py) of `model` trained with `training`."""
    cols = {k: getattr(layout, k) for k in ("tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch_size", "zero",
                                            "recompute", "sequence_parallel", "schedule", "cp_algorithm", "dp_mode")}
    sg = layout.shard_group_size
    return dict(cols, num_microbatches=layout.num_microbatches(training.global_batch_size),
                hsdp=sg is not None and sg < layout.dp, moe=bool(model.is_moe))


@dataclass(frozen=True)
class Verdict:
    """Whether a stack runs one layout: `rule` ('' if it does), its `reason` and `source`."""

    rule: str = ""
    reason: str = ""
    source: str = field(default="", repr=False)


def layout_verdict(stack, layout, model, training) -> Verdict:
    """The Verdict of `stack` on one layout (the first refusing rule, with its [source] text)."""
    i = int(first_refusal(stack.runs, **layout_columns(layout, model, training)))
    if i < 0:
        return Verdict()
    r = stack.runs.refusals[i]
    return Verdict(r.name, r.reason, dict(stack.source).get(r.name, ""))
