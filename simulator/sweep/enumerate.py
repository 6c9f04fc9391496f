"""Enumerate the candidate layouts of a sweep with numpy.

Every factorization num_gpus = tp·cp·pp·dp (ep carved out of dp·cp for MoE), crossed with micro-batch
sizes, schedules, vpp, sequence parallelism, ZeRO stage and recompute mode, kept where the divisibility
rules (`spec.validate.layout_valid_mask`, the one place for them) and the sweep's own rules (space.py)
hold. Rows come out in a deterministic order, grouped by virtual stages (pp x model chunks per rank),
pp and the categorical fields.

Uneven pipeline splits (`uneven_layers`, default on) follow the stack's framework ([runs] pipeline_split,
`spec.placement.default_split`): "first-last" (the default): with one chunk per rank (the schedule families
that say `uneven_split`), a pp that does not divide num_layers is kept when ceil(L/pp)·pp − L <= 2,
i.e. when the first and/or last stage can hold one layer fewer than the others, as Llama 3 405B ran
126 layers on 16 stages (7 + 14×8 + 7; Dubey et al. 2024 §3.3.2); with one layer to spare the last
stage (which also holds the LM head and the loss) gets it. "torchtitan": torchtitan's own split over the
pp·chunks stages of any schedule (`torchtitan_split`, one entry per virtual stage). `layers_per_stage` is
then a column ("7,8,...,7"; "" for an even split). With `account_for_{embedding,loss}_in_pipeline_split` every layout
takes Megatron-Core's split instead (`spec.placement.megatron_split`, one entry per virtual stage): kept
where pp·chunks divides L + 1 or L + 2, whatever the schedule.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..schedules import family
from ..frames import text_column
from ..spec.layout import expert_grid_fits, expert_tp_needs_sp
from ..spec.model_fit import moe_load_fits
from ..spec.placement import default_split, megatron_split
from ..errors import InputError
from ..spec.validate import layout_valid_mask, recompute_modes, training_problem, zero_stages
from .space import AUTO, DEFAULT_SCHEDULES, SweepSpace

# columns of a candidate table, in order (layout fields + derived num_microbatches)
CANDIDATE_COLUMNS = ("tp", "cp", "pp", "dp", "ep", "etp", "vpp", "micro_batch_size", "num_microbatches", "zero",
                     "recompute", "sequence_parallel", "schedule", "layers_per_stage")


def divisors(n: int) -> np.ndarray:
    """Sorted positive divisors of n."""
    n = int(n)
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return np.array(sorted(set(small + [n // d for d in small])), dtype=np.int64)


def _pick(values, auto: np.ndarray) -> np.ndarray:
    return auto if values == AUTO else np.array(sorted(values), dtype=np.int64)


def _tp_values(hardware, N: int, divs: np.ndarray, space: SweepSpace) -> tuple[np.ndarray, np.ndarray, str]:
    """(tp values of the space, those within the cap, what sets the cap)."""
    tp_cap = space.max_tp or int(getattr(hardware, "nvlink_domain_gpus", getattr(hardware, "gpus_per_node", N)))
    why = f"max_tp {space.max_tp}" if space.max_tp else f"the NVLink domain of {tp_cap} GPUs"
    if space.tp != AUTO and space.max_tp is None:
        tp_cap, why = N, f"{N} GPUs"
    if space.max_tp_within_node and int(hardware.gpus_per_node) < tp_cap:
        tp_cap, why = int(hardware.gpus_per_node), f"max_tp_within_node: {int(hardware.gpus_per_node)} GPUs per node"
    tp = _pick(space.tp, divs)
    return tp, tp[tp <= tp_cap], why


def _pp_values(model, divs: np.ndarray, space: SweepSpace) -> np.ndarray:
    pp = _pick(space.pp, divs[divs <= model.num_layers])
    return pp[pp <= space.max_pp] if space.max_pp else pp


def _cp_values(training, divs: np.ndarray, space: SweepSpace) -> np.ndarray:
    s = training.seq_length
    cp = _pick(space.cp, divs[(divs == 1) | (s // divs >= space.min_tokens_per_cp_rank)])
    return cp[cp <= space.max_cp] if space.max_cp else cp


def _ep_values(model, space: SweepSpace) -> np.ndarray:
    """ep values: carved out of dp·cp (Layout rule), only for MoE (1 for a dense model unless given)."""
    if model.is_moe:
        ep = _pick(space.ep, divisors(model.num_experts))
        return ep[ep <= space.max_ep] if space.max_ep else ep
    return np.array([1], dtype=np.int64) if space.ep == AUTO else np.array(sorted(space.ep), dtype=np.int64)


def _mb_values(training, space: SweepSpace) -> np.ndarray:
    mb = _pick(space.micro_batch_size, divisors(training.global_batch_size))
    return mb[(mb >= space.min_micro_batch_size) & (mb <= space.max_micro_batch_size)]


def _etp_options(model, space: SweepSpace, T, E) -> list:
    """The experts' tensor-parallel degree of each row, one array per option: tp for a dense model or ep = 1 (the
    experts split like the attention, Megatron-Core's default); for MoE with ep > 1 also 1 (whole experts, as
    NVIDIA's MoE recipes and torchtitan run them), or the values asked for. The stack's framework rules drop the
    ones it does not run (sweep/supported.py)."""
    if not model.is_moe:
        return [T]
    if space.etp == AUTO:
        return [T, np.where(E > 1, 1, T)]
    return [np.full_like(T, int(u)) for u in space.etp]


def _numeric_candidates(model, training, hardware, num_gpus: int, space: SweepSpace) -> dict:
    """tp, cp, pp, dp, ep, etp, micro_batch_size arrays of every factorization before schedule choices."""
    N = int(num_gpus)
    divs = divisors(N)
    tp = _tp_values(hardware, N, divs, space)[1]
    pp = _pp_values(model, divs, space)
    cp = _cp_values(training, divs, space)
    T, C, P = np.meshgrid(tp, cp, pp, indexing="ij")
    T, C, P = T.ravel(), C.ravel(), P.ravel()
    prod = T * C * P
    ok = N % prod == 0
    T, C, P = T[ok], C[ok], P[ok]
    D = N // (T * C * P)
    if space.dp != AUTO:
        ok = np.isin(D, np.array(space.dp, dtype=np.int64))
        T, C, P, D = T[ok], C[ok], P[ok], D[ok]
    ep = _ep_values(model, space)
    n, k = len(T), len(ep)
    T, C, P, D = (np.repeat(a, k) for a in (T, C, P, D))
    E = np.tile(ep, n)
    # the expert grid (Layout): etp·ep divides tp·cp·dp; each distinct etp of a row once, in option order
    opts = _etp_options(model, space, T, E)
    U = np.stack(opts, axis=1)
    keep = np.ones(U.shape, dtype=bool)
    for j in range(1, U.shape[1]):
        keep[:, j] = (U[:, :j] != U[:, [j]]).all(axis=1)
    keep &= expert_grid_fits(T[:, None], C[:, None], D[:, None], E[:, None], U)
    r, j = np.nonzero(keep)
    T, C, P, D, E, U = T[r], C[r], P[r], D[r], E[r], U[r, j]
    mb = _mb_values(training, space)
    n, k = len(T), len(mb)
    T, C, P, D, E, U = (np.repeat(a, k) for a in (T, C, P, D, E, U))
    M = np.tile(mb, n)
    return {"tp": T, "cp": C, "pp": P, "dp": D, "ep": E, "etp": U, "micro_batch_size": M}


def _auto_vpps(num_layers: int) -> list[int]:
    """The chunk counts 2..L an automatic sweep tries: those dividing L, L + 1 or L + 2, the only ones for which
    pp·vpp can divide the layers split (L, or L plus the embedding and loss stages Megatron accounts for);
    found in O(√L) rather than by trying all L − 1 (a model of 2**24 layers took minutes)."""
    out = set()
    for n in (num_layers, num_layers + 1, num_layers + 2):
        for d in range(1, math.isqrt(n) + 1):
            if n % d == 0:
                out.update((d, n // d))
    return sorted(v for v in out if 2 <= v <= num_layers)


def _schedule_choices(model, space: SweepSpace) -> list[tuple[str, int]]:
    """(schedule, vpp) pairs in sweep order."""
    scheds = DEFAULT_SCHEDULES if space.schedule == AUTO else space.schedule
    out = []
    for s in scheds:
        if family(s).takes_vpp:
            vpps = _auto_vpps(model.num_layers) if space.vpp == AUTO else [v for v in space.vpp if v >= 2]
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
    problem = training_problem(model, training)  # (the MoE load factors' and the FSDP unit's range among them)
    if problem:
        raise InputError(problem)
    if space.etp != AUTO and not model.is_moe:
        raise InputError(f"sweep etp {','.join(map(str, space.etp))} applies to routed experts; "
                         f"{model.name or 'this model'} is dense (no experts)")
    if hardware is None:
        hardware = _NoHardware(num_gpus)
    base = _numeric_candidates(model, training, hardware, num_gpus, space)
    zeros = zero_stages(training, None if space.zero == AUTO else space.zero)  # (those the offloads run with)
    recs = recompute_modes(model, None if space.recompute == AUTO else space.recompute)
    sps = (False, True) if space.sequence_parallel == AUTO else space.sequence_parallel
    choices = _schedule_choices(model, space)
    if not any(s == "1f1b" for s, _ in choices):
        choices = [("1f1b", 1)] + choices  # pp = 1 rows (no pipeline) carry 1f1b; see _blocks
    split = layer_split(model, space, training.stack.runs.pipeline_split)
    valid, col = _valid_masks(model, training, base, choices, sps, space)
    blocks = _blocks(base, choices, sps, valid, col, split, zeros, recs, space, alone=zero_stages(training)[0])
    if not blocks:
        return empty_candidates()
    return _candidate_frame(base, blocks, split, training)


def _uneven(space: SweepSpace, sched: str, rule: str = "first-last") -> bool:
    """Whether the layers need not divide evenly over `sched`'s stages: Megatron's split (the space's
    account_for_* flags), or `uneven_layers` where the framework's split `rule` splits them (placement.
    default_split: "first-last" with one stage per rank, "torchtitan" with any schedule); `layer_split` then
    says which pp it splits."""
    return bool(space.accounted_layers) or (space.uneven_layers and (family(sched).pp_stages
                                                                     or rule == "torchtitan"))


def layer_split(model, space: SweepSpace, rule: str = "first-last"):
    """(pp, chunks per rank) -> the layers per stage as text ("" for an even split or no pipeline), None where
    the layers cannot be split over that pipeline: Megatron-Core's split with the space's account_for_* flags
    (`megatron_split`, kept where pp·chunks divides L + 1 or L + 2), else an even split or, with
    `uneven_layers`, the framework's (`default_split` under `rule`: the stack's [runs] pipeline_split)."""
    L = model.num_layers
    cache: dict = {}

    def split(p: int, c: int):
        if (p, c) not in cache:
            if p * c == 1:
                out = ""
            elif space.accounted_layers:
                ok = (L + space.accounted_layers) % (p * c) == 0
                out = ",".join(map(str, megatron_split(L, p, c, embedding=space.account_for_embedding_in_pipeline_split,
                                                       loss=space.account_for_loss_in_pipeline_split))) if ok else None
            elif L % (p * c) == 0:
                out = ""
            else:
                s = default_split(L, p, c, rule) if space.uneven_layers else None
                out = None if s is None else ",".join(map(str, s))
            cache[p, c] = out
        return cache[p, c]

    return split


def _valid_masks(model, training, base: dict, choices, sps, space: SweepSpace) -> tuple[dict, dict]:
    """The divisibility rules (`layout_valid_mask`) once per (schedule, sp) for all of its vpp values
    (a column each: the rules broadcast), and the MoE load factor's range on each row's ep, cp and micro-batch
    (`spec.model_fit.moe_load_fits`): ({(schedule, sp): (rows, vpps) mask}, {(schedule, vpp): column})."""
    tp, cp, pp, dp, ep, mb = (base[k] for k in ("tp", "cp", "pp", "dp", "ep", "micro_batch_size"))
    load = moe_load_fits(model, training, ep=ep, cp=cp, micro_batch_size=mb)[:, None]
    vpps = {}
    for sched, vpp in choices:
        vpps.setdefault(sched, []).append(vpp)
    col = {(sched, vpp): j for sched, vs in vpps.items() for j, vpp in enumerate(vs)}
    valid = {(sched, sp): layout_valid_mask(model, training, tp=tp[:, None], pp=pp[:, None], dp=dp[:, None],
                                            cp=cp[:, None], ep=ep[:, None], vpp=np.array(vs)[None, :],
                                            micro_batch_size=mb[:, None], sequence_parallel=sp, schedule=sched,
                                            uneven_layers=_uneven(space, sched,
                                                                  training.stack.runs.pipeline_split)) & load
             for sched, vs in vpps.items() for sp in sps}
    return valid, col


def _blocks(base: dict, choices, sps, valid: dict, col: dict, split, zeros, recs, space: SweepSpace, *,
            alone: int = 0) -> list[tuple]:
    """(schedule, vpp, sp, zero, recompute, base rows) blocks in sweep order, each the base rows that
    combination keeps: the divisibility rules, then the sweep's own (sp needs tp > 1; pp = 1 rows carry
    1f1b only unless the user asked for 1f1b; other schedules need pp > 1, some an even pp; a ZeRO stage other
    than `alone`, the lowest the training's offloads run with (0 without offload), needs dp·cp > 1: with nothing
    to shard every stage equals that one)."""
    tp, cp, pp, dp = base["tp"], base["cp"], base["pp"], base["dp"]
    pps = np.unique(pp)
    user_has_1f1b = space.schedule == AUTO or "1f1b" in space.schedule
    blocks = []
    for sched, vpp in choices:
        for sp in sps:
            mask = valid[sched, sp][:, col[sched, vpp]].copy()
            c = family(sched).num_stages(1, vpp)  # the pp that split the layers over pp·c stages
            mask &= np.isin(pp, [p for p in pps if split(int(p), c) is not None])
            if sp:
                mask &= tp > 1
            else:  # experts regrouped across TP ranks take each rank's sequence shard
                mask &= ~expert_tp_needs_sp(tp, base["etp"])
            if sched == "1f1b":
                if not user_has_1f1b:
                    mask &= pp == 1
            else:
                mask &= pp > 1
            if family(sched).even_pp:
                mask &= pp % 2 == 0
            if not mask.any():
                continue
            idx = np.flatnonzero(mask)
            shard = (dp[idx] * cp[idx]) > 1
            for r in recs:  # zero innermost: the kernel takes it as an array, so these blocks share a call
                for z in zeros:
                    zidx = idx if z == alone else idx[shard]
                    if not len(zidx):
                        continue
                    blocks.append((sched, vpp, sp, z, r, zidx))
    return blocks


def _candidate_frame(base: dict, blocks: list[tuple], split, training) -> pd.DataFrame:
    """The candidate table of `blocks` (CANDIDATE_COLUMNS), rows in sweep order."""
    tp, cp, pp, dp, ep, mb = (base[k] for k in ("tp", "cp", "pp", "dp", "ep", "micro_batch_size"))
    sizes = np.array([len(b[5]) for b in blocks])
    rows = np.concatenate([b[5] for b in blocks])
    block_id = np.repeat(np.arange(len(blocks)), sizes)
    # virtual stages outermost (the kernel pads a chunk's stage axis to its widest row), then pp, then block
    # (schedule, vpp, sp, recompute, zero), then base order (tp, cp, pp, dp, ep, mb): the blocks are in
    # that order already, so a stable sort by (virtual stages, pp) (one key)
    chunks = np.array([family(b[0]).num_stages(1, b[1]) for b in blocks], dtype=np.int64)[block_id]
    p_rows = pp[rows]
    order = np.argsort(p_rows * chunks * (int(p_rows.max()) + 1) + p_rows, kind="stable")
    rows, block_id = rows[order], block_id[order]

    def per_block(i, dtype):
        return np.array([b[i] for b in blocks], dtype=dtype)[block_id]

    # the split of each row: per distinct (pp, chunks), gathered
    M = int(chunks.max()) + 1
    keys, inv = np.unique(p_rows[order] * M + chunks[order], return_inverse=True)
    texts = np.array([split(int(k // M), int(k % M)) for k in keys], dtype=object)[inv.ravel()]
    return pd.DataFrame({
        "tp": tp[rows], "cp": cp[rows], "pp": pp[rows], "dp": dp[rows], "ep": ep[rows],
        "etp": base["etp"][rows] if "etp" in base else tp[rows], "vpp": per_block(1, np.int64),
        "micro_batch_size": mb[rows],
        "num_microbatches": (training.global_batch_size // (dp * mb))[rows],
        "zero": per_block(3, np.int64), "recompute": text_column(per_block(4, object)),
        "sequence_parallel": per_block(2, bool), "schedule": text_column(per_block(0, object)),
        "layers_per_stage": text_column(texts),
    })


class _NoHardware:
    def __init__(self, n):
        self.nvlink_domain_gpus = self.gpus_per_node = int(n)


def empty_candidates() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=object if c in ("recompute", "schedule", "layers_per_stage") else
                                      (bool if c == "sequence_parallel" else np.int64)) for c in CANDIDATE_COLUMNS})
