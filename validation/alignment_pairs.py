"""The published runs whose GEMMs miss the tensor cores' 16-byte alignment, against the rest (docs/accuracy.md).

parasim names misaligned GEMM dimensions (simulator/cost/alignment.py) but times them as aligned ones. This section
of docs/accuracy.md shows what that leaves out where the published runs measure it: the step error of the rows with
a misaligned dimension against the others of their source, and the pairs of rows that differ only in their head
count, one head dim aligned and one not (measured and predicted step ratio). Nothing is fitted to these rows.
Used by validation/make_accuracy.py."""
from __future__ import annotations

# The row cells a pair must share (everything that sets the work per GPU but the head count).
SAME = ("source_id", "n_gpus", "tp", "pp", "dp", "cp", "micro_batch", "global_batch_seqs", "seq_len", "layers",
        "hidden", "ffn_hidden", "precision", "recompute", "zero_fsdp")


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def pairs(results, df):
    """[(misaligned row, aligned row)] of results rows (namedtuples) that share the SAME cells of `df` and differ
    in `heads`, the first with a misaligned GEMM dimension and the second without."""
    cells = df.set_index("run_id")
    rows = [r for r in results.itertuples() if r.run_id in cells.index and r.step_error == r.step_error]
    key = {r.run_id: tuple(str(cells.at[r.run_id, c]) for c in SAME) for r in rows}
    out = []
    for a in rows:
        for b in rows:
            if (a.misaligned_gemms and not b.misaligned_gemms and key[a.run_id] == key[b.run_id]
                    and cells.at[a.run_id, "heads"] != cells.at[b.run_id, "heads"]):
                out.append((a, b))
    return out


def section(results, df) -> list[str]:
    """Markdown lines: per source with misaligned rows, their median step error against the other rows', then the
    pairs' measured and predicted step ratios. Empty when no compared row is misaligned."""
    if not len(results) or "misaligned_gemms" not in results:
        return []
    flagged = results[results["misaligned_gemms"].astype(bool) & results["step_error"].notna()]
    if not len(flagged):
        return []
    lines = ["## GEMMs off the tensor cores' alignment", "",
             "cuBLAS runs its fastest tensor-core kernels only on operands whose leading dimensions are multiples of "
             "16 bytes (cuBLAS Library, \"Tensor Core Usage\"); parasim names such GEMMs (`not_modelled` in an "
             "estimate, `misaligned_gemms` in `parasim validate --out`; simulator/cost/alignment.py) and, its "
             "efficiency tables being measured on aligned shapes, times them no faster than the fallback kernels' "
             "rate measured on a lent H200 (docs/compute.md, 'GEMMs off the tensor cores' alignment'). Where the "
             "published runs have them:", "",
             "| source | rows with a misaligned GEMM | their median step error | other rows | "
             "their median step error |",
             "|---|---|---|---|---|"]
    for src, d in results[results["step_error"].notna()].groupby("source_id"):
        bad = d["misaligned_gemms"].astype(bool)
        if bad.any():
            lines.append(f"| {src} | {int(bad.sum())} | {_pct(d.loc[bad, 'step_error'].median())} | "
                         f"{int((~bad).sum())} | {_pct(d.loc[~bad, 'step_error'].median())} |")
    found = pairs(results, df)
    if found:
        lines += ["", "Rows that differ only in the head count (measured and predicted step of the misaligned row "
                      "over the aligned one):", "",
                  "| misaligned row | its dims | aligned row | measured ratio | predicted ratio |",
                  "|---|---|---|---|---|"]
        for a, b in found:
            measured, predicted = a.measured_step_s / b.measured_step_s, a.predicted_step_s / b.predicted_step_s
            lines.append(f"| {a.run_id} | {a.misaligned_gemms} | {b.run_id} | {measured:.3f} | {predicted:.3f} |")
    lines += ["", "The misaligned GEMMs here are the materialised attention's batched GEMMs (QKᵀ over the head dim, "
                  "P·V into it): strided per-head views whose batch stride, the head dim, is then not 16 bytes. "
                  "Measured alone on the H200 they run 1.6-3.1x slower than at the nearest aligned head dim; they "
                  "are about 2.5 % of these runs' FLOPs, so the kernel cost moves the predicted ratios by a few per "
                  "cent, far from the measured 1.34-1.42x: the rest of what the 128 heads cost these runs is not "
                  "found. These end-to-end rows were not used to fit the rate.", ""]
    return lines
