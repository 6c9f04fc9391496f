"""The profiled H100 runs by kernel category against parasim's ops of the same kind (docs/validation-h100.md,
written by h100_report.py): GEMM and attention kernels against the GEMM and attention ops, the other kernels
(elementwise, copies, the loss's softmax, everything outside the optimizer that is not a GEMM or attention)
against the memory-bound ops: the layers' elementwise op list (cost/elementwise.py), the final norm, the loss
and the embedding, the recompute forward included. Each run is timed with the calibrated profile, with the
stack's op list (torchtitan: eager) and with the fused op list the simulator used before the stacks had
their own, and once more with the memory table flattened to its top efficiency (no small-kernel floor: the
calibration timed each kernel call on its own, so its small sizes carry the call's launch gap).
"""
from __future__ import annotations

from make_accuracy import _abs_pct, _pct

from dataclasses import replace
from pathlib import Path

DATA = Path(__file__).resolve().parent / "h100"
CATEGORY_INTRO = (
    "By kernel category, against the calibrated profile with the optimizer table (`validation/h100_kernels.py`; "
    "other kernels: elementwise, copies and the loss, everything outside the optimizer that is not a GEMM or "
    "attention; parasim's memory-bound ops: the layers' elementwise op list, final norm, loss and embedding, the "
    "recompute forward included; the launch bound left out):")
OP_LIST_INTRO = (
    "Step time with the fused op list (every stack's before `Stack.elementwise`) and with the harness stack's own, "
    "no other change (the launch bound included, as in the summary). The op lists were written from the "
    "frameworks' code and checked against the ops torch runs on CPU (tests/test_elementwise_ops.py) after both "
    "grids had been measured; nothing in them was fitted to a measurement:")


def _kind_seconds(model, training, hardware, layout) -> dict:
    """Seconds per op kind ("gemm", "attention", "memory") of one step's forward, backward and recompute on
    one GPU (all layers, the embedding and the head), without the launch bound."""
    import numpy as np

    from simulator.cost import compute as C

    one, b = np.ones(1), layout.micro_batch_size
    groups = C._stage_op_groups(model, training, tp=1, cp=1, ep=1, micro_batch_size=b, sequence_parallel=False,
                                n_dense=model.num_layers * one, n_moe=0 * one, first=one, last=one,
                                recompute=layout.recompute)
    out = {}
    for kind, ops, W, R in groups:
        t = C._evaluate(kind, ops, model, training, hardware, tp=1, cp=1, micro_batch_size=b, cp_algorithm="ring",
                        roofline=True)
        out[kind] = float(((t[0] + t[1] + t[2]) @ W + t[0] @ R).sum())
    return out


def _flat_memory(path: Path):
    """The profile at `path` with its memory table at its top efficiency for every kernel size."""
    import tomllib

    from simulator.spec.hardware import hardware_from_dict

    d = tomllib.loads(path.read_text())
    top = max(d["efficiency"]["memory"]["efficiency"])
    d["efficiency"]["memory"].update(x=[1.0, 1e15], efficiency=[top, top])
    return hardware_from_dict(d, where=f"{path.name}, memory table at its top")


def category_table(grid: str, profile: str) -> tuple[list[str], "object"]:
    """Per profiled run (kernel_breakdown.csv) of the harness rows in `grid`: measured GEMM + attention and
    other kernel ms against parasim's GEMM + attention and memory-bound ops under `profile` (module
    docstring). Returns (table lines, DataFrame of the ratios)."""
    import pandas as pd

    from compare_train_steps import specs_for_row
    from simulator.spec.hardware import load_hardware

    k = pd.read_csv(DATA / "kernel_breakdown.csv")
    k = k[~k["category"].str.startswith("kernel:")]
    t = k.pivot_table(index="run_id", columns="category", values="time_s", aggfunc="sum").fillna(0.0)
    hw, flat = load_hardware(str(DATA / profile)), _flat_memory(DATA / profile)
    rows = pd.read_csv(DATA / grid).set_index("run_id", drop=False)
    out = ["| run | GEMM + attention kernels ms | parasim ms | other kernels ms | parasim memory-bound, stack's "
           "op list ms | ratio | at the table's top efficiency ms | ratio | fused op list ms | ratio |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    for rid, r in t.iterrows():
        if rid not in rows.index:
            continue
        model, training, layout = specs_for_row(rows.loc[rid])
        fused = replace(training, stack=replace(training.stack, elementwise="fused"))
        own, top, old = (_kind_seconds(model, tr, h, layout)
                         for tr, h in ((training, hw), (training, flat), (fused, hw)))
        gemm = r.get("gemm", 0.0) + r.get("attention", 0.0)
        other = r.get("elementwise", 0.0) + r.get("copy", 0.0) + r.get("other", 0.0)
        ratio = {"run_id": rid, "own": own["memory"] / other, "top": top["memory"] / other,
                 "fused": old["memory"] / other, "gemm": (own["gemm"] + own["attention"]) / gemm}
        ratios.append(ratio)
        out.append(f"| {rid} | {1e3 * gemm:.1f} | {1e3 * (own['gemm'] + own['attention']):.1f} | {1e3 * other:.1f} | "
                   f"{1e3 * own['memory']:.1f} | {ratio['own']:.2f} | {1e3 * top['memory']:.1f} | {ratio['top']:.2f} | "
                   f"{1e3 * old['memory']:.1f} | {ratio['fused']:.2f} |")
    return out + [""], pd.DataFrame(ratios)


def category_finding(cdf) -> str:
    """Finding 10's text from `category_table`'s ratios."""
    def span(c):
        return f"{cdf[c].min():.2f} to {cdf[c].max():.2f} (median {cdf[c].median():.2f})"

    return (f"10. **Non-GEMM kernels: the fused op list under-counted them; the eager one, timed with the "
            f"calibrated table, over-charges them.** Over the {len(cdf)} profiled runs parasim's memory-bound ops "
            f"take {span('fused')} of the measured non-GEMM kernel time with the fused op list used before "
            f"(Megatron-LM / Transformer Engine's kernels for every stack), {span('own')} with the harness's stack's "
            f"own (torchtitan: eager, cost/elementwise.py). Timed at the table's top efficiency, without the "
            f"small-kernel floor that the calibration's one-call timings put in it, the stack's op list takes "
            f"{span('top')}: the floor charges each of the eager list's many small kernels about a launch gap, "
            f"time that stands in for part of the idle GPU time of finding 9 rather than for kernel time, and "
            f"to which the step-time errors' gain from the op list (table below) owes part of itself. GEMM and "
            f"attention take "
            f"{span('gemm')} of their kernels' time "
            f"(the pooled attention table's pessimism: finding 8). The harness's layer is close to torchtitan's "
            f"but not the same (rotate_half RoPE, one gate/up GEMM whose backward concatenates, one QKV GEMM "
            f"whose gradient is copied back to its layout; docs/compute.md compares their bytes).")


def op_list_table(sets, profiles) -> list[str]:
    """Step and forward + backward errors of the grids `sets` ((file, label) pairs) under `profiles` ((profile,
    label) pairs) with the fused op list (what every stack ran before Stack.elementwise) and with the harness
    stack's own (torchtitan: eager)."""
    import pandas as pd

    from compare_train_steps import compare
    from simulator.spec.hardware import load_hardware

    out = ["| measurements | profile | elementwise op list | runs | step: median / max abs error | step: mean signed "
           "| fwd+bwd: median abs | fwd+bwd: mean signed |", "|---|---|---|---|---|---|---|---|"]
    for f, label in sets:
        df = pd.read_csv(DATA / f)
        for prof, plabel in profiles:
            hw = load_hardware(str(DATA / prof) if prof.endswith(".toml") else prof)
            for ew, elabel in (("fused", "fused (before)"), (None, "the stack's: eager")):
                r = compare(df, hw, elementwise=ew)
                se, fb = r["step_error"], r["predicted_fwd_bwd_s"] / r["measured_fwd_bwd_s"] - 1
                out.append(f"| {label} | {plabel} | {elabel} | {len(r)} | {_abs_pct(se.abs().median())} / "
                           f"{_abs_pct(se.abs().max())} | {_pct(se.mean())} | {_abs_pct(fb.abs().median())} | "
                           f"{_pct(fb.mean())} |")
    return out + [""]
