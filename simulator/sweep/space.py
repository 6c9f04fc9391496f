"""The sweep space: which values each layout field may take ("auto" or a list) and a few constraints.

It comes from a scenario's `[sweep]` table and/or CLI flags (unknown keys rejected). "auto" defaults
(chosen to keep the space to layouts a practitioner would run; pass explicit lists to widen it):

| field             | auto means                                                                   |
|-------------------|------------------------------------------------------------------------------|
| tp                | divisors of num_gpus up to the NVLink domain (`nvlink_domain_gpus`, 8 on DGX) |
| pp                | divisors of num_gpus up to num_layers (a stage holds at least one layer)       |
| cp                | divisors of num_gpus keeping >= `min_tokens_per_cp_rank` (2048) tokens per rank |
| dp                | whatever is left: num_gpus / (tp·cp·pp)                                      |
| ep                | 1 for dense models; divisors of num_experts that divide dp·cp for MoE          |
| etp               | tp; for MoE with ep > 1 also 1 (whole experts), where etp·ep divides tp·cp·dp    |
| vpp               | interleaved only: every vpp >= 2 with num_layers % (pp·vpp) == 0             |
| micro_batch_size  | divisors of global_batch_size in [min_micro_batch_size, max_micro_batch_size] (1..8) |
| zero              | 0, 1, 2, 3 less those the offloads cannot run with (spec.validate.zero_stages); a stage  |
|                   | above the lowest only where dp·cp > 1 (with nothing to shard it equals the lowest) |
| recompute         | none, selective, full                                                        |
| sequence_parallel | false, true (true only with tp > 1: it is a no-op without TP)               |
| schedule          | 1f1b, interleaved; pp = 1 rows always carry 1f1b (there is no pipeline)       |

A list given for `vpp` applies to the interleaved schedule only (vpp >= 2); the other schedules run
with their own chunk count (zb-v, dualpipe and dualpipev hold their two chunks implicitly).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import numpy as np

from ..errors import InputError
from ..schedules import SCHEDULE_NAMES
from ..spec.rules import BOUNDS, RECOMPUTE, check_count

AUTO = "auto"
LIST_FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch_size", "zero", "recompute",
               "sequence_parallel", "schedule")
DEFAULT_SCHEDULES = ("1f1b", "interleaved")


@dataclass(frozen=True, kw_only=True)
class SweepSpace:
    """Values each layout field may take ("auto" or a tuple) and constraints; see the module table.

    Constraints: `max_tp`, `max_pp`, `max_cp`, `max_ep`, `max_vpp` (upper bounds, None = none);
    `max_tp_within_node` (tp <= gpus_per_node); `min_micro_batch_size`/`max_micro_batch_size`
    (bounds of the auto micro-batch sizes and of given lists); `min_tokens_per_cp_rank` (auto cp only).
    `account_for_{embedding,loss}_in_pipeline_split`: every layout splits its layers as Megatron-Core does
    with those flags (`spec.placement.megatron_split`; pp·chunks must divide L + 1 or L + 2), instead of
    evenly or by `uneven_layers`.
    """

    tp: tuple | str = AUTO
    pp: tuple | str = AUTO
    dp: tuple | str = AUTO
    cp: tuple | str = AUTO
    ep: tuple | str = AUTO
    etp: tuple | str = AUTO  # the experts' tensor-parallel degrees (MoE; Layout.etp)
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
    account_for_embedding_in_pipeline_split: bool = False  # Megatron's split (spec.placement.megatron_split)
    account_for_loss_in_pipeline_split: bool = False
    recompute_layers: int | None = None  # Layout.recompute_layers of the rows with full recompute (None: every layer)
    # sets of selective-recompute modules to sweep, each a comma text ("mla_up_proj,mlp"; a TOML list or a text of
    # sets separated by ";"); () : the stack's one set (sweep/module_sets.py)
    recompute_module_sets: tuple[str, ...] = ()

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
        sets = self.recompute_module_sets
        sets = [x for x in sets.split(";")] if isinstance(sets, str) else sets
        if not isinstance(sets, (list, tuple)) or not all(isinstance(x, str) and x.strip() for x in sets):
            raise InputError(f"sweep recompute_module_sets must be sets of module names like "
                             f"\"core_attn;mla_up_proj,mlp\", got {self.recompute_module_sets!r}")
        object.__setattr__(self, "recompute_module_sets", tuple(x.strip() for x in sets))
        v = self.recompute_layers  # a count of layers when given (0 is no count: leave it out for every layer)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise InputError(f"sweep recompute_layers must be an integer >= 1, got {v!r}")
        if v is not None:
            check_count("recompute_layers", v, label="sweep recompute_layers")
        if self.min_micro_batch_size > self.max_micro_batch_size:
            raise InputError(f"sweep min_micro_batch_size({self.min_micro_batch_size}) > "
                             f"max_micro_batch_size({self.max_micro_batch_size})")
        for name in ("max_tp_within_node", "uneven_layers", "account_for_embedding_in_pipeline_split",
                     "account_for_loss_in_pipeline_split"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"sweep {name} must be true or false, got {getattr(self, name)!r}")

    @property
    def accounted_layers(self) -> int:
        """Parts of the model counted as a layer in the pipeline split (0, 1 or 2)."""
        return int(self.account_for_embedding_in_pipeline_split) + int(self.account_for_loss_in_pipeline_split)

    @classmethod
    def from_table(cls, table: dict | None, *, where: str = "[sweep]") -> "SweepSpace":
        """Build from a scenario's `[sweep]` table; unknown keys raise InputError naming the closest, a value the
        checks refuse an InputError naming `where` (the one check of a [sweep] table: `sweep`, and every command
        that reads a scenario, cli/common.py scenario_from_options)."""
        table = dict(table or {})
        known = [f.name for f in fields(cls)]
        for k in table:
            if k not in known:
                import difflib

                close = difflib.get_close_matches(k, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}"
                raise InputError(f"unknown key {k!r} in {where}{hint}")
        try:
            return cls(**table)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None

    def replace(self, **changes) -> "SweepSpace":
        """A copy with some fields changed; None values are ignored (convenient for CLI flags)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def _normalise_values(name: str, v):
    if isinstance(v, str):
        if v.strip().lower() == AUTO:
            return AUTO
        v = v.split(",")
        if not all(x.strip() for x in v):  # '1,,2': an empty item names no value
            raise InputError(f"sweep {name} must be 'auto' or comma-separated values like 1,2,4, got "
                             f"{','.join(v)!r}")
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
            if x not in SCHEDULE_NAMES:
                raise InputError(f"sweep schedule value {x!r} is not one of {', '.join(SCHEDULE_NAMES)}")
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
            if name in BOUNDS:  # the documented upper limits (spec/rules.py), before numpy sees the value
                check_count(name, xi, label=f"sweep {name}")
            x = xi
        if x not in out:
            out.append(x)
    return tuple(out)
