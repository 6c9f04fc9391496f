"""Pipeline schedules as data: one module per family, each returning per-rank op lists.

`build(name, pp=, microbatches=, vpp=)` -> `Schedule`. Names (DESIGN.md): gpipe, 1f1b, interleaved,
zb-h1, zb-h2, zb-v, dualpipe, dualpipev, pipedream. Dependencies come from one rule
(`op.dependency`); timing lives in `simulator.pipeline`.
"""
from ..errors import InputError
from .dualpipe import build_dualpipe, build_dualpipev
from .gpipe import build_gpipe, spec_gpipe
from .interleaved import build_interleaved
from .one_f_one_b import build_1f1b, spec_1f1b
from .op import KINDS, FlushSpec, Op, OpArrays, Schedule, dependency, make_schedule
from .pipedream import build_pipedream
from .zbv import build_zb_v
from .zero_bubble import build_zb_h1, build_zb_h2, spec_zb_h1, spec_zb_h2

BUILDERS = {
    "gpipe": build_gpipe,
    "1f1b": build_1f1b,
    "interleaved": build_interleaved,
    "zb-h1": build_zb_h1,
    "zb-h2": build_zb_h2,
    "zb-v": build_zb_v,
    "dualpipe": build_dualpipe,
    "dualpipev": build_dualpipev,
    "pipedream": build_pipedream,
}
SCHEDULE_NAMES = tuple(BUILDERS)
# the synchronous schedules that are flushed one-stage-per-rank ones (`op.flush_columns`), described
# without building their op lists: the sweep makes their replay tables from this in one C call
FLUSH_SPECS = {"gpipe": spec_gpipe, "1f1b": spec_1f1b, "zb-h1": spec_zb_h1, "zb-h2": spec_zb_h2}


def build(name: str, *, pp: int, microbatches: int, vpp: int = 1) -> Schedule:
    """Build the named schedule for `pp` ranks and `microbatches` microbatches (`vpp` chunks per
    rank for 'interleaved'; zb-v, dualpipe and dualpipev always hold two)."""
    key = str(name).strip().lower()
    if key not in BUILDERS:
        raise InputError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULE_NAMES)}")
    if key == "interleaved" and vpp == 1:
        raise InputError("interleaved: vpp must be >= 2 (vpp=1 is plain 1f1b)")
    return BUILDERS[key](pp=pp, microbatches=microbatches, vpp=vpp)


__all__ = ["build", "SCHEDULE_NAMES", "BUILDERS", "FLUSH_SPECS", "FlushSpec", "Op", "OpArrays", "Schedule", "KINDS",
           "dependency", "make_schedule"]
