"""A sweep over several sets of selective-recompute modules (SweepSpace.recompute_module_sets; Megatron-Core's
--recompute-modules): the modules are the stack's (Stack.recompute_modules), one set per scenario, so each set is
swept with its own stack and the tables are ranked together. The first set takes every recompute mode of the
space; the others only 'selective', the mode whose meaning they change. Each row's `recompute_modules` names its
set ('' for the modes that do not read one)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ..errors import InputError
from ..spec.validate import recompute_modules_problem
from .rank import rank_results
from .space import AUTO


def module_set_scenarios(scenario, space):
    """[(scenario, space, modules text)] for each set of `space.recompute_module_sets`, checked against the model
    (InputError naming the set that Megatron or the model refuses)."""
    modes = space.recompute
    if modes != AUTO and "selective" not in modes:
        raise InputError(f"recompute_module_sets apply to recompute 'selective', which the sweep's recompute "
                         f"({','.join(modes)}) leaves out")
    out = []
    for i, text in enumerate(space.recompute_module_sets):
        try:
            stack = replace(scenario.training.stack, recompute_modules=text)
        except InputError as exc:
            raise InputError(f"recompute_module_sets {text!r}: {exc}") from None
        training = replace(scenario.training, stack=stack)
        problem = recompute_modules_problem(scenario.model, training)
        if problem:
            raise InputError(f"recompute_module_sets {text!r}: {problem}")
        sub = replace(space, recompute_module_sets=(), recompute=space.recompute if i == 0 else ("selective",))
        out.append((replace(scenario, training=training), sub, ",".join(stack.recompute_modules)))
    return out


def sweep_module_sets(run, scenario, space, *, tidy=None, **kw) -> pd.DataFrame:
    """Every set swept with `run` (sweep.run_sweep, its other arguments `kw`), the rows ranked together."""
    frames, left_out = [], {}
    for sc, sub, text in module_set_scenarios(scenario, space):
        df = run(sc, sub, **kw)
        frames.append(df.assign(recompute_modules=[text if r == "selective" else "" for r in df["recompute"]]))
        for reason, n in df.attrs.get("left_out", {}).items():
            left_out[reason] = left_out.get(reason, 0) + n
    df = rank_results(pd.concat(frames, ignore_index=True))
    if tidy is not None:
        df = tidy(df)
    df.attrs.update(left_out=left_out, stack=scenario.training.stack.name)
    return df
