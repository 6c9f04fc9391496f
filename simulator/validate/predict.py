"""Predicted vs measured: read a runs CSV, predict every mapped row, and score the errors.

`predict_runs` maps each row with `map_run` (mapping.py), runs `simulator.estimate.estimate` on it and
sets the prediction beside what the row measured; `error_summary` reduces the results to per-group
statistics. `parasim validate`, `validation/make_accuracy.py` and `validation/memory_published.py` all
go through here, so they report the same numbers.

Measured quantities (`*_basis` columns say which was used):
- step time: `step_time_s` if given ("measured step time"), else global_batch·seq / `tokens_per_s`
  ("from measured tokens/s"), else `derived_step_time_s` labelled "derived (not measured): ..."
  — it was computed from reported TFLOP/s with a FLOP formula, so its error includes that formula.
- memory: `mem_gb_per_gpu` read as GiB (torch and nvidia-smi print binary units), compared with the
  predicted peak of the stages `mem_basis` names (first/last stage, else the worst stage), counted as
  the counter `mem_basis` names (`memory_counter`): nvidia-smi shows the device's total (CUDA context,
  NCCL buffers, the caching allocator's reserved segments); torch.cuda.max_memory_reserved the
  allocator's segments only; torch.cuda.max_memory_allocated its live tensors only. A basis naming no
  counter is compared with the device total.
- runs whose notes say they went out of memory are flagged (`measured_oom`) to compare with the
  predicted feasibility.

Statistics: signed error = predicted / measured − 1; median and max of |error|, mean signed error;
Spearman rank correlation = Pearson correlation of the average ranks (pandas `rank`).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Mapping

import numpy as np

from ..errors import InputError
from .cells import _blank, _text
from .mapping import map_run

GIB = 2**30

REQUIRED_COLUMNS = ("run_id", "model", "layers", "hidden", "heads", "ffn_hidden", "seq_len", "global_batch_seqs",
                    "n_gpus", "gpu_type", "tp", "pp", "dp")


MEASURED_COLUMNS = ("step_time_s", "tokens_per_s", "derived_step_time_s", "mem_gb_per_gpu")
# The largest value of each measured column: far beyond any run (a step of 11.6 days, the cli's MAX_STAGE_TIME_S;
# 1e12 tokens/s, ten thousand times the largest published runs; 1e5 GB, the largest HBM a hardware profile takes),
# yet small enough that a prediction over it stays a number (a step of 1e308 s overflowed the error to inf).
MEASURED_MAX = {"step_time_s": 1e6, "derived_step_time_s": 1e6, "tokens_per_s": 1e12, "mem_gb_per_gpu": 1e5}


def read_runs(path):
    """Read a runs CSV. InputError (one line, naming the file and the line) for a file that is missing,
    not UTF-8 text, empty or without rows, a row with more or fewer fields than the header, a missing
    required column, or a measured value (MEASURED_COLUMNS) that is not a number > 0 and at most MEASURED_MAX."""
    import io

    import pandas as pd

    text = _read_text(path)
    lines = _record_lines(path, text)
    df = pd.read_csv(io.StringIO(text), dtype={c: str for c in MEASURED_COLUMNS})  # measured cells as written
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"{path}: missing column {missing[0]!r} (expected the published_runs.csv columns)")
    if df.empty:
        raise InputError(f"{path}: no rows under the header")
    if len(lines) != len(df):  # the two readers skipped different lines: name rows by their number instead
        lines = [None] * len(df)
    for col in MEASURED_COLUMNS:
        if col in df.columns:
            df[col] = _measured_column(path, df, col, lines)
    return df


def _read_text(path) -> str:
    from pathlib import Path

    from ..spec.presets import file_problem

    problem = file_problem(Path(path), shown=str(path))  # a FIFO or a device is never opened: its read could hang
    if problem:
        raise InputError(problem)
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise InputError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not a runs CSV") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise InputError(f"{path} is empty (expected a header row with the published_runs.csv columns)")
    return text


def _record_lines(path, text: str) -> list[int]:
    """The line number of every data record (blank lines skipped, as pandas does); InputError naming the
    first record whose field count differs from the header's (pandas would shift or drop the cells)."""
    import csv
    import io

    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    lines = []
    for rec in reader:
        if not rec or (len(rec) == 1 and not rec[0].strip()):
            continue
        if len(rec) != len(header):
            raise InputError(f"{path} line {reader.line_num}: {len(rec)} fields, the header has {len(header)}")
        lines.append(reader.line_num)
    return lines


def _measured_column(path, df, col: str, lines: list[int]):
    """The column as floats (blank: NaN); InputError naming the line, run and cell that is not a number > 0 and at
    most MEASURED_MAX[col] (a measured time, rate or memory of 0 or less is no measurement, and none is 1e308)."""
    out = []
    for i, raw in enumerate(df[col].tolist()):
        if _blank(raw):
            out.append(float("nan"))
            continue
        try:
            v = float(str(raw).strip())
        except ValueError:
            v = None
        if v is None or not math.isfinite(v) or not 0 < v <= MEASURED_MAX[col]:
            rid = _text(df["run_id"].iloc[i])
            where = f"line {lines[i]}" if lines[i] else f"data row {i + 1}"
            raise InputError(f"{path} {where} (run {rid or '?'}): {col} must be a number > 0 and at most "
                             f"{MEASURED_MAX[col]:g}, got {raw!r}")
        out.append(v)
    return out


def measured_step(row: Mapping) -> tuple[float, str]:
    """(measured step seconds, basis) by the module's rule; (nan, 'none') if the row has nothing."""
    if not _blank(row.get("step_time_s")):
        return float(row["step_time_s"]), "measured step time"
    if not _blank(row.get("tokens_per_s")):
        tokens = float(row["global_batch_seqs"]) * float(row["seq_len"])
        return tokens / float(row["tokens_per_s"]), "from measured tokens/s"
    if not _blank(row.get("derived_step_time_s")):
        how = _text(row.get("derived_how"))
        return float(row["derived_step_time_s"]), f"derived (not measured): {how}" if how else "derived (not measured)"
    return float("nan"), "none"


def measured_oom(row: Mapping) -> bool:
    """True when the row's notes say the run went out of memory (a measured outcome)."""
    t = _text(row.get("notes")).lower()
    return "went oom" in t or "out of memory" in t


def memory_stages(mem_basis: str, pp: int) -> tuple[int, ...] | None:
    """Pipeline stages a measured memory figure covers: (0, pp−1) when `mem_basis` names the
    first/last stages (or nodes), None (every stage: the worst) otherwise."""
    t = _text(mem_basis).lower()
    if "first/last" in t or "first and last" in t:
        return tuple(sorted({0, pp - 1}))
    return None


MEMORY_COUNTERS = ("nvidia-smi", "torch-reserved", "torch-allocated", "device")


def memory_counter(mem_basis: str) -> str:
    """Which counter a `mem_basis` text names: 'nvidia-smi'; 'torch-reserved'
    (torch.cuda.max_memory_reserved, memory_reserved); 'torch-allocated' (max_memory_allocated,
    memory_allocated); else 'device' (no counter named: compared with the device total, as nvidia-smi)."""
    t = _text(mem_basis).lower()
    if "nvidia-smi" in t or "nvidia smi" in t:
        return "nvidia-smi"
    if "reserved" in t:
        return "torch-reserved"
    if "allocated" in t:
        return "torch-allocated"
    return "device"


def memory_counter_bytes(stage, counter: str) -> float:
    """A stage's predicted peak as `counter` shows it (MemoryBreakdown): the device total `peak_bytes`
    (nvidia-smi, device); peak − context_bytes (torch-reserved: the CUDA context and NCCL's buffers are
    outside the caching allocator); allocated_bytes (torch-allocated: live tensors, no reserve). A stage
    without those fields gives its peak_bytes."""
    peak = float(stage.peak_bytes)
    if counter == "torch-reserved" and hasattr(stage, "context_bytes"):
        return peak - float(stage.context_bytes)
    if counter == "torch-allocated" and hasattr(stage, "allocated_bytes"):
        return float(stage.allocated_bytes)
    return peak


def predicted_memory(memory, mem_basis: str, pp: int) -> tuple[float, int]:
    """(peak bytes, stage) of a MemoryResult over the stages `mem_basis` covers (memory_stages), each
    stage counted as the counter `mem_basis` names (memory_counter, memory_counter_bytes).

    An object with only `peak_bytes` (no per-stage list) gives (peak_bytes, -1).
    """
    per_stage = getattr(memory, "per_stage", None)
    if not per_stage:
        return float(memory.peak_bytes), -1
    stages = memory_stages(mem_basis, pp)
    counter = memory_counter(mem_basis)
    cand = [s for s in per_stage if stages is None or s.stage in stages]
    best = max(cand, key=lambda s: (memory_counter_bytes(s, counter), -s.stage))
    return memory_counter_bytes(best, counter), int(best.stage)


def signed_error(predicted, measured):
    """predicted / measured − 1 (positive: the simulator over-predicts)."""
    p = np.asarray(predicted, dtype=float)
    m = np.asarray(measured, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return p / m - 1.0


def spearman(a, b) -> float:
    """Spearman rank correlation: Pearson correlation of average ranks (ties share their mean rank)."""
    import pandas as pd

    s = pd.DataFrame({"a": np.asarray(a, float), "b": np.asarray(b, float)}).dropna()
    if len(s) < 2:
        return float("nan")
    return float(s["a"].rank().corr(s["b"].rank()))


RESULT_COLUMNS = ["run_id", "source_id", "model", "label", "hardware", "assumptions", "feasible", "reason",
                  "measured_oom", "measured_step_s", "step_basis", "predicted_step_s", "step_error",
                  "measured_tokens_per_s", "predicted_tokens_per_s", "tokens_per_s_error", "measured_mem_bytes",
                  "mem_basis", "predicted_mem_bytes", "predicted_mem_stage", "mem_error", "misaligned_gemms"]


def predict_runs(df, *, hardware: str | None = None, estimate_fn: Callable | None = None,
                 load_hardware_fn: Callable | None = None, keep_estimates: bool = False):
    """Predict every row; returns (results DataFrame, skipped DataFrame).

    results: one row per mapped run with the columns of RESULT_COLUMNS (errors are fractions;
    `predicted_mem_stage` is the stage whose peak was compared, -1 if unknown; `misaligned_gemms` the row's GEMM
    dims off the tensor cores' 16-byte alignment, cost/alignment.py, "" if none). skipped: run_id,
    source_id, reason. `estimate_fn(model, training, layout, hardware)` defaults to
    `simulator.estimate.estimate`; `load_hardware_fn` to `spec.hardware.load_hardware`.
    keep_estimates=True adds an `estimate` column holding each estimate object.
    """
    import pandas as pd

    from ..cost.alignment import estimate_misaligned

    if estimate_fn is None:
        try:
            from ..estimate import estimate as estimate_fn
        except ModuleNotFoundError as exc:
            raise InputError(f"validate needs simulator.estimate, which is not available ({exc.name})") from None
    if load_hardware_fn is None:
        from ..spec.hardware import load_hardware as load_hardware_fn
    hw_cache: dict[str, object] = {}
    out, skipped = [], []
    for _, row in df.iterrows():
        r = row.to_dict()
        mr = map_run(r, hardware=hardware)
        src = _text(r.get("source_id"))
        if mr.skip_reason:
            skipped.append({"run_id": mr.run_id, "source_id": src, "reason": mr.skip_reason})
            continue
        try:
            key = (mr.hardware_name, mr.hardware_overrides)
            if key not in hw_cache:
                hw_cache[key] = load_hardware_fn(mr.hardware_name)
                if mr.hardware_overrides:
                    hw_cache[key] = replace(hw_cache[key], **dict(mr.hardware_overrides))
            est = estimate_fn(mr.model, mr.training, mr.layout, hw_cache[key])
        except InputError as exc:
            skipped.append({"run_id": mr.run_id, "source_id": src, "reason": str(exc).splitlines()[0]})
            continue
        m_step, basis = measured_step(r)
        tokens = mr.training.tokens_per_step
        p_step = float(est.step_s)
        m_tps = tokens / m_step if math.isfinite(m_step) else float("nan")
        p_tps = float(est.tokens_per_s)
        m_mem = float(r["mem_gb_per_gpu"]) * GIB if not _blank(r.get("mem_gb_per_gpu")) else float("nan")
        p_mem, p_stage = predicted_memory(est.memory, _text(r.get("mem_basis")), mr.layout.pp)
        rec = {
            "run_id": mr.run_id, "source_id": src, "model": mr.model.name, "label": mr.layout.label,
            "hardware": mr.hardware_name, "assumptions": "; ".join(a.replace(";", ",") for a in mr.assumptions),
            "feasible": bool(est.feasible), "reason": str(getattr(est, "reason", "") or ""),
            "measured_oom": measured_oom(r),
            "measured_step_s": m_step, "step_basis": basis, "predicted_step_s": p_step,
            "step_error": float(signed_error(p_step, m_step)),
            "measured_tokens_per_s": m_tps, "predicted_tokens_per_s": p_tps,
            "tokens_per_s_error": float(signed_error(p_tps, m_tps)),
            "measured_mem_bytes": m_mem, "mem_basis": _text(r.get("mem_basis")), "predicted_mem_bytes": p_mem,
            "predicted_mem_stage": p_stage, "mem_error": float(signed_error(p_mem, m_mem)),
            "misaligned_gemms": "; ".join(estimate_misaligned(mr.model, mr.training, mr.layout)),
        }
        if keep_estimates:
            rec["estimate"] = est
        out.append(rec)
    cols = RESULT_COLUMNS + (["estimate"] if keep_estimates else [])
    return pd.DataFrame(out, columns=cols), pd.DataFrame(skipped, columns=["run_id", "source_id", "reason"])


def error_summary(results, *, by: str | None = None):
    """Per group (or overall): runs; for step time and memory the rows compared, median and max
    |error|, mean signed error and the Spearman rank correlation of predicted vs measured.
    Errors are fractions."""
    import pandas as pd

    def stats(err, pred, meas, prefix):
        e = err.to_numpy(float)
        ok = np.isfinite(e)
        a = np.abs(e[ok])
        return {
            f"{prefix}_runs": int(ok.sum()),
            f"median_abs_{prefix}_error": float(np.median(a)) if ok.any() else float("nan"),
            f"max_abs_{prefix}_error": float(np.max(a)) if ok.any() else float("nan"),
            f"mean_{prefix}_error": float(np.mean(e[ok])) if ok.any() else float("nan"),
            f"{prefix}_spearman": spearman(pred[ok], meas[ok]) if ok.sum() > 1 else float("nan"),
        }

    def one(d):
        return {"runs": int(len(d)),
                **stats(d["step_error"], d["predicted_step_s"].to_numpy(float), d["measured_step_s"].to_numpy(float),
                        "step"),
                **stats(d["mem_error"], d["predicted_mem_bytes"].to_numpy(float),
                        d["measured_mem_bytes"].to_numpy(float), "mem")}

    if by is None:
        return pd.DataFrame([{"group": "all", **one(results)}])
    rows = [{"group": k, **one(g)} for k, g in results.groupby(by, sort=True)]
    return pd.DataFrame(rows)


def accounting(results, skipped) -> dict:
    """Where each row of a `predict_runs` call went; `step`, `memory_only`, `oom`, `nothing` and `skipped`
    add up to `rows`: compared on step time (maybe on memory too), on memory only, measured out of
    memory with no figure to compare (`oom_predicted`: of those, predicted not to fit), mapped with no
    measured figure (or no prediction of it), not mapped (reasons in `skipped`)."""
    step = np.isfinite(results["step_error"].to_numpy(float))
    mem = np.isfinite(results["mem_error"].to_numpy(float))
    oom = results["measured_oom"].to_numpy(bool)
    none = ~step & ~mem
    return {"rows": len(results) + len(skipped), "step": int(step.sum()), "memory_only": int((~step & mem).sum()),
            "oom": int((none & oom).sum()),
            "oom_predicted": int((none & oom & ~results["feasible"].to_numpy(bool)).sum()),
            "nothing": int((none & ~oom).sum()), "skipped": int(len(skipped))}
