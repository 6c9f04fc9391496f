"""The validated-error groups of the validation generators (validation/make_accuracy.py, h100_report.py):
per (hardware preset, stack, source), the statistics of `simulator.spec.validated` (the data file, its
lookup and sentences, re-exported here so the generators and tests have one name to import).
"""
from __future__ import annotations

from ..spec.validated import (ABOUT, DATA, GPU_FAMILIES, MATCHES, describe, dumps, for_estimate, gpu_family, lines,
                              lookup, merge, merged_text, read, stats)

__all__ = ["ABOUT", "DATA", "GPU_FAMILIES", "MATCHES", "describe", "dumps", "for_estimate", "gpu_family", "lines",
           "lookup", "merge", "merged_text", "read", "stats", "group", "groups_from_results", "stack_of_source"]


def group(*, hardware: str, stack: str, source: str, step_errors, mem_errors, doc: str, generator: str,
          what: str, gpu: str | None = None) -> dict:
    """One group of the data file. `gpu` (the profile's `[gpu] model`) is read from the preset if not given."""
    if gpu is None:
        from ..spec.hardware import load_hardware

        gpu = load_hardware(hardware).gpu
    return {"hardware": hardware, "gpu": gpu, "gpu_family": gpu_family(gpu), "stack": stack, "source": source,
            "what": what, "doc": doc, "generator": generator, "step": stats(step_errors), "memory": stats(mem_errors)}


def groups_from_results(results, *, doc: str, generator: str, what: str) -> list[dict]:
    """Groups of a `predict_runs` results frame: per (hardware, the source's stack, source_id). A source whose
    rows ran on GPUs the preset only approximates (SourceRules.hardware_overrides: e.g. TORCHTITAN_H100's
    500 W H100s of unknown peak) says nothing about the preset's error and is left out."""
    from .sources import SOURCE_RULES

    out = []
    modified = {s for s, r in SOURCE_RULES.items() if r.hardware_overrides}
    results = results[~results["source_id"].isin(modified)]
    if not len(results):
        return out
    d = results.assign(stack=[stack_of_source(s) for s in results["source_id"]])
    for (hw, st, src), g in d.groupby(["hardware", "stack", "source_id"], sort=True):
        out.append(group(hardware=hw, stack=st, source=src, step_errors=g["step_error"], mem_errors=g["mem_error"],
                         doc=doc, generator=generator, what=what))
    return out


def stack_of_source(source_id: str) -> str:
    """The stack preset a published source ran (sources.SOURCE_RULES; generic rules: their default)."""
    from .families import SourceRules
    from .sources import SOURCE_RULES

    rules = SOURCE_RULES.get(str(source_id))
    return rules.stack if rules is not None else SourceRules.__dataclass_fields__["stack"].default
