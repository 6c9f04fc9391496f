"""Pipeline schedules as data: one module per family, each returning per-rank op lists.

Each module defines `FAMILIES`, one `ScheduleFamily` record per schedule it builds (family.py: stage
geometry, split backward, flush, builder); `FAMILIES` here collects them from every module of this
package, so a new schedule is one new module. `build(name, pp=, microbatches=, vpp=)` -> `Schedule`.
Dependencies between ops come from one rule (`op.dependency`); timing lives in `simulator.pipeline`.
"""
import importlib
import pkgutil

from ..errors import InputError
from .family import ScheduleFamily
from .op import KINDS, FlushSpec, Op, OpArrays, Schedule, dependency, make_schedule


def _collect() -> dict[str, ScheduleFamily]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        found.extend(getattr(importlib.import_module(f"{__name__}.{info.name}"), "FAMILIES", ()))
    return {f.name: f for f in sorted(found, key=lambda f: f.order)}


FAMILIES: dict[str, ScheduleFamily] = _collect()
SCHEDULE_NAMES = tuple(FAMILIES)
BUILDERS = {name: f.build for name, f in FAMILIES.items()}
# the flushed one-stage-per-rank schedules, described without building their op lists: the sweep makes
# their replay tables from this in one C call
FLUSH_SPECS = {name: f.flush_spec for name, f in FAMILIES.items() if f.flush_spec is not None}


def family(name: str) -> ScheduleFamily:
    """The family of schedule `name`; InputError naming the choices for an unknown one."""
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise InputError(f"schedule must be one of {', '.join(SCHEDULE_NAMES)}, got {name!r}") from None


def build(name: str, *, pp: int, microbatches: int, vpp: int = 1) -> Schedule:
    """Build the named schedule for `pp` ranks and `microbatches` microbatches (`vpp` chunks per
    rank for 'interleaved'; zb-v, dualpipe and dualpipev always hold two)."""
    key = str(name).strip().lower()
    if key not in BUILDERS:
        raise InputError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULE_NAMES)}")
    if FAMILIES[key].takes_vpp and vpp == 1:
        raise InputError(f"{key}: vpp must be >= 2 (vpp=1 is plain 1f1b)")
    return BUILDERS[key](pp=pp, microbatches=microbatches, vpp=vpp)


__all__ = ["build", "family", "FAMILIES", "SCHEDULE_NAMES", "BUILDERS", "FLUSH_SPECS", "FlushSpec", "Op", "OpArrays",
           "Schedule", "ScheduleFamily", "KINDS", "dependency", "make_schedule"]
