"""Why a sweep space is empty: one line naming the constraint after which `enumerate_layouts` has no layout
left (split from enumerate.py, whose steps it retraces in the same order)."""
from __future__ import annotations

import numpy as np

from ..schedules import family
from ..spec.model_fit import moe_load_fits, moe_load_problem
from ..spec.validate import offload_problem, zero_stages
from .enumerate import (_cp_values, _ep_values, _mb_values, _NoHardware, _numeric_candidates, _pick,
                        _pp_values, _schedule_choices, _tp_values, _uneven, _valid_masks, divisors,
                        enumerate_layouts, layer_split)
from .space import AUTO, SweepSpace


def _vals(a) -> str:
    v = sorted({int(x) for x in np.asarray(a).ravel()})
    return "{" + ", ".join(map(str, v[:12])) + (", ..." if len(v) > 12 else "") + "}"


def empty_space_reason(model, training, num_gpus: int, space: SweepSpace | None = None, *, hardware=None,
                       stack=None) -> str:
    """Why `enumerate_layouts` finds no layout, in one line naming the constraint that left none (the
    first step of the enumeration after which nothing is left); '' when it finds some. E.g.
    "global_batch_size 2520 is not divisible by dp × micro_batch_size for any dp that divides 5128
    GPUs (dp {1, 2, 4, 8, ...}, micro_batch_size {1, 2, ...})". With `stack`, also when its framework
    runs none of them: the rules that left them out (sweep.supported.emptied_by)."""
    space = space or SweepSpace()
    N = int(num_gpus)
    if N < 1:
        return f"num_gpus {num_gpus} leaves no layout: it must be >= 1"
    cands = enumerate_layouts(model, training, N, space, hardware=hardware)
    if len(cands):
        from .supported import emptied_by

        return "" if stack is None else emptied_by(cands, stack, model)
    hardware = hardware if hardware is not None else _NoHardware(N)
    return _factor_reason(model, training, hardware, N, space) or _rule_reason(model, training, N, space, hardware)


def _factor_reason(model, training, hardware, N: int, space: SweepSpace) -> str:
    """The factorization step (tp, pp, cp, tp·cp·pp | N, dp, ep, micro-batch) that leaves nothing, else ''."""
    divs = divisors(N)
    tp_all, tp, why = _tp_values(hardware, N, divs, space)
    pp, cp = _pp_values(model, divs, space), _cp_values(training, divs, space)
    if not len(tp):
        return f"no tp in {_vals(tp_all)} is <= {why}"
    if not len(pp):
        return f"no pp in {_vals(space.pp)} is <= max_pp {space.max_pp}"
    if not len(cp):
        return f"no cp is allowed: cp {_vals(_pick(space.cp, divs))} above max_cp {space.max_cp}"
    prod = (tp[:, None, None] * cp[None, :, None] * pp[None, None, :]).ravel()
    if not (N % prod == 0).any():
        return f"no tp × cp × pp with tp in {_vals(tp)}, cp in {_vals(cp)}, pp in {_vals(pp)} divides {N} GPUs"
    dp = N // prod[N % prod == 0]
    if space.dp != AUTO and not np.isin(dp, space.dp).any():
        return f"no dp in {_vals(space.dp)} is what {N} GPUs leave after tp × cp × pp (dp can be {_vals(dp)})"
    ep = _ep_values(model, space)
    if not len(ep):
        return f"no ep in {_vals(space.ep)} is <= max_ep {space.max_ep}"
    base = _numeric_candidates(model, training, hardware, N, space)
    if not len(base["ep"]) and len(_mb_values(training, space)):
        if model.is_moe and space.etp != AUTO:
            return (f"no etp in {_vals(space.etp)} with an ep in {_vals(ep)} has etp × ep dividing tp × cp × dp of "
                    f"any split of {N} GPUs")
        return f"no ep in {_vals(ep)} divides dp × cp of any split of {N} GPUs"
    if not len(_mb_values(training, space)):
        return (f"no micro_batch_size in {space.min_micro_batch_size}..{space.max_micro_batch_size} divides "
                f"global_batch_size {training.global_batch_size}" if space.micro_batch_size == AUTO else
                f"no micro_batch_size in {_vals(space.micro_batch_size)} lies in "
                f"{space.min_micro_batch_size}..{space.max_micro_batch_size}")
    return ""


def _rule_reason(model, training, N: int, space: SweepSpace, hardware) -> str:
    """The divisibility rule or sweep rule that no (tp, cp, pp, dp, ep, micro-batch) candidate passes."""
    from ..spec.validate import layout_violations

    base = _numeric_candidates(model, training, hardware, N, space)
    tp, dp, mb = base["tp"], base["dp"], base["micro_batch_size"]
    B, h = training.global_batch_size, model.num_heads
    if not (B % (dp * mb) == 0).any():
        return (f"global_batch_size {B} is not divisible by dp × micro_batch_size for any dp that divides {N} "
                f"GPUs (dp {_vals(dp)}, micro_batch_size {_vals(mb)})")
    load = moe_load_fits(model, training, ep=base["ep"], cp=base["cp"], micro_batch_size=mb)
    if not load.any():  # the MoE load factor is out of its range on every candidate: the first one's reason
        return moe_load_problem(model, training, ep=int(base["ep"][0]), cp=int(base["cp"][0]),
                                micro_batch_size=int(mb[0])) + f" (ep {_vals(base['ep'])}, cp {_vals(base['cp'])})"
    if not ((h % tp == 0) & (model.num_kv_heads % tp == 0)).any():
        return (f"num_attention_heads {h} / num_key_value_heads {model.num_kv_heads} is not divisible by any tp "
                f"in {_vals(tp)}")
    choices = _schedule_choices(model, space)
    sps = (False, True) if space.sequence_parallel == AUTO else space.sequence_parallel
    valid, _ = _valid_masks(model, training, base, choices, sps, space)
    out = []
    for sched in dict(choices):
        if any(valid[sched, sp].any() for sp in sps):  # the layout rules keep some rows: a sweep rule does not
            why = _sweep_rule(model, training, sched, base, valid, sps, space)
            out.append(f"{sched}: {why}")
            continue
        vpp = next(v for s, v in choices if s == sched)  # the rules fail at every vpp: the first one's reasons
        msgs = layout_violations(model, training, tp=tp, pp=base["pp"], dp=dp, cp=base["cp"], ep=base["ep"],
                                 vpp=vpp, micro_batch_size=mb, sequence_parallel=sps[0], schedule=sched,
                                 uneven_layers=_uneven(space, sched, training.stack.runs.pipeline_split))
        broken = [m for m in np.atleast_1d(msgs) if m]
        kinds = {}
        for m in broken:  # one count per rule: the message up to its first value
            kinds.setdefault(m.split("(")[0], []).append(m)
        ranked = sorted(kinds.values(), key=len, reverse=True)
        out.append(f"{sched}{f' vpp {vpp}' if family(sched).takes_vpp else ''}: "
                   + ", ".join(f"{ms[0]} ({len(ms)} of {len(tp)} candidates)" for ms in ranked[:2]))
    return "every candidate is ruled out: " + "; ".join(out[:4]) + ("; ..." if len(out) > 4 else "")


def _sweep_rule(model, training, sched: str, base: dict, valid: dict, sps, space: SweepSpace) -> str:
    """The sweep's own rule (`_blocks`) that removes the rows the layout rules leave for `sched`."""
    rule = training.stack.runs.pipeline_split
    tp, pp = base["tp"], base["pp"]
    keep = np.zeros(len(tp), dtype=bool)
    for sp in sps:
        keep |= valid[sched, sp].any(axis=1) & ((tp > 1) if sp else True)
    if not keep.any():
        return f"sequence_parallel needs tp > 1, tp is {_vals(tp)}"
    chunks = [family(sched).num_stages(1, v) for s, v in _schedule_choices(model, space) if s == sched]
    split = layer_split(model, space, rule)
    keep &= np.any([np.isin(pp, [p for p in np.unique(pp) if split(int(p), c) is not None]) for c in chunks], axis=0)
    if not keep.any():
        if space.accounted_layers:
            n = model.num_layers + space.accounted_layers
            return (f"no pp × vpp with pp in {_vals(pp)} divides {n} (Megatron's split: num_layers + "
                    f"{n - model.num_layers})")
        how = {"first-last": "evenly, or 1-2 layers short", "torchtitan": "torchtitan's split"}
        return (f"no pp in {_vals(pp)} splits {model.num_layers} layers "
                f"({how[rule] if space.uneven_layers else 'evenly'})")
    if sched == "1f1b" and not (space.schedule == AUTO or "1f1b" in space.schedule):
        return "pp 1 only (1f1b was not asked for)"
    if sched != "1f1b" and not (keep & (pp > 1)).any():
        return f"needs pp > 1, pp is {_vals(pp[keep])}"
    if family(sched).even_pp and not (keep & (pp % 2 == 0)).any():
        return f"needs an even pp, pp is {_vals(pp[keep])}"
    zeros, alone = zero_stages(training, None if space.zero == AUTO else space.zero), zero_stages(training)[0]
    shards = base["dp"] * base["cp"]
    if alone not in zeros and not (keep & (shards > 1)).any():
        why = f": {offload_problem(training, 0)}" if alone else ""
        return (f"zero {','.join(map(str, zeros))} needs dp × cp > 1, dp × cp is {_vals(shards[keep])}: with nothing "
                f"to shard only zero {alone} runs{why}")
    return "no candidate left"
