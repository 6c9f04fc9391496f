"""Predicted vs measured: map published (or harness-recorded) runs to specs, predict, and score.

Input: a CSV with the columns of the shared `published_runs.csv` (README of that data set). Each
row becomes (ModelSpec, Training, Layout, HardwareProfile) by the rules below; rows that cannot be
mapped are returned as skipped **with the reason** — never dropped silently.

Mapping rules (each is a documented choice; `assumptions` lists the ones a row relied on):
- gpu_type -> hardware preset: A100 80GB -> dgx-a100-80g, A100 40GB -> dgx-a100-40g, H100 -> dgx-h100,
  H800 -> dgx-h800, H200 -> dgx-h200, B200 -> dgx-b200, GB200 -> gb200-nvl72, MI300X -> mi300x
  (`hardware=` overrides it for every row).
- model: Llama* -> SwiGLU, RMSNorm, no biases, RoPE; MPT -> GELU, LayerNorm, biases on, learned
  positions (the llm-foundry benchmark rows say so); GPT / GPT-like -> GELU, LayerNorm, biases,
  learned positions (Megatron GPT); BLOOM -> GELU, LayerNorm, biases, ALiBi (no position table).
  vocab: the number, or the first integer of a text cell ("~250k (tokenizer 250680 ...)" -> 250680);
  "~250k" -> 250000; blank -> 51200 (GPT-2 vocabulary padded as Megatron does) [assumption].
- micro_batch blank -> 1 [assumption]; zero_fsdp: none -> 0, ZeRO-k -> k, FSDP/FSDP2 full shard -> 3.
- recompute: none / 'none stated' -> none (the latter flagged); full* -> full; 'selective (per op)'
  -> selective; 'selective (per layer)' (torchtitan: every k-th layer fully recomputed) -> skipped,
  parasim has no per-layer-fraction mode.
- precision: text containing bf16 / fp16 / fp8 / fp32 -> that; 'mixed (not stated)' -> bf16
  [assumption; A100 bf16 and fp16 peaks are equal].
- pipeline_schedule: 1F1B variants -> 1f1b; 'interleaved 1F1B' -> interleaved with vpp from the vpp
  column; ZB-V -> zb-v; 'Zero Bubble ... p*M_B' -> zb-h1 (ZB-1p); '... 2p*M_B' -> zb-h2 (ZB-2p);
  blank with pp > 1 -> 1f1b [assumption].
- uneven pipelines: when `notes` say the first and last stages hold one fewer layer, the stages get
  (L+2)/pp − 1, (L+2)/pp, ..., (L+2)/pp − 1 layers (chunks counted for V schedules); other
  non-divisible cases without chunks get a balanced split, the first L mod pp stages one layer more
  [assumption: DeepSpeed's partitioner balances by parameters, close to this for equal layers].
- sequence_parallel blank -> off.

Measured quantities (`*_basis` columns say which was used):
- step time: `step_time_s` if given ("measured step time"), else global_batch·seq / `tokens_per_s`
  ("from measured tokens/s"), else `derived_step_time_s` labelled "derived (not measured): ..."
  — it was computed from reported TFLOP/s with a FLOP formula, so its error includes that formula.
- memory: `mem_gb_per_gpu` read as GiB (torch and nvidia-smi print binary units), compared with
  the estimate's per-GPU peak; `mem_basis` is carried along.

Statistics: signed error = predicted / measured − 1; median and max of |error|; Spearman rank
correlation = Pearson correlation of the average ranks (pandas `rank`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from .errors import InputError

__all__ = [
    "GPU_PRESETS",
    "DEFAULT_VOCAB",
    "DEFAULT_MICRO_BATCH",
    "MappedRun",
    "map_run",
    "read_runs",
    "predict_runs",
    "error_summary",
    "spearman",
    "signed_error",
]

GPU_PRESETS = (  # (regex on gpu_type, preset), first match wins
    (r"a100.*40", "dgx-a100-40g"),
    (r"a100", "dgx-a100-80g"),
    (r"h800", "dgx-h800"),
    (r"h200", "dgx-h200"),
    (r"h100", "dgx-h100"),
    (r"gb200", "gb200-nvl72"),
    (r"b200", "dgx-b200"),
    (r"mi300", "mi300x"),
)
DEFAULT_VOCAB = 51200
DEFAULT_MICRO_BATCH = 1
GIB = 2**30

REQUIRED_COLUMNS = ("run_id", "model", "layers", "hidden", "heads", "ffn_hidden", "seq_len", "global_batch_seqs",
                    "n_gpus", "gpu_type", "tp", "pp", "dp")


@dataclass(frozen=True, kw_only=True)
class MappedRun:
    """One CSV row mapped to parasim inputs (or the reason it could not be)."""

    run_id: str
    model: object | None = None
    training: object | None = None
    layout: object | None = None
    hardware_name: str | None = None
    assumptions: tuple[str, ...] = ()
    skip_reason: str = ""


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _int(v, what: str) -> int:
    if _blank(v):
        raise InputError(f"{what} is blank")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{what} is not a number: {v!r}") from None
    if not f.is_integer():
        raise InputError(f"{what} is not an integer: {v!r}")
    return int(f)


def _text(v) -> str:
    return "" if _blank(v) else str(v).strip()


def hardware_for_gpu(gpu_type: str) -> str:
    """Hardware preset for a gpu_type cell (GPU_PRESETS); InputError when none matches."""
    g = _text(gpu_type).lower()
    for pat, preset in GPU_PRESETS:
        if re.search(pat, g):
            return preset
    raise InputError(f"no hardware preset for gpu_type {gpu_type!r}")


def _vocab(v, notes: list[str]) -> int:
    if _blank(v):
        notes.append(f"vocab not stated: {DEFAULT_VOCAB}")
        return DEFAULT_VOCAB
    try:
        return _int(v, "vocab")
    except InputError:
        ints = [int(x) for x in re.findall(r"\d{4,}", str(v))]
        ints += [int(x) * 1000 for x in re.findall(r"(\d+)k\b", str(v))]
        if not ints:
            raise InputError(f"vocab {v!r} has no number") from None
        notes.append(f"vocab read as {ints[0]} from {v!r}")
        return ints[0]


def _arch(model: str, seq: int) -> dict:
    m = model.lower()
    if "llama" in m or "mistral" in m or "qwen" in m:
        return dict(mlp="swiglu", norm="rmsnorm")
    if "mpt" in m:
        return dict(mlp="gelu", norm="layernorm", qkv_bias=True, out_bias=True, mlp_bias=True,
                    learned_position_embeddings=seq)
    if "bloom" in m:
        return dict(mlp="gelu", norm="layernorm", qkv_bias=True, out_bias=True, mlp_bias=True)
    if "gpt" in m:
        return dict(mlp="gelu", norm="layernorm", qkv_bias=True, out_bias=True, mlp_bias=True,
                    learned_position_embeddings=seq)
    raise InputError(f"unknown model family {model!r} (expected Llama, MPT, GPT or BLOOM)")


def _zero(v) -> int:
    t = _text(v).lower()
    if t in ("", "none") or t.startswith("none"):
        return 0
    if "fsdp" in t or "full_shard" in t or "zero-3" in t:
        return 3
    m = re.search(r"zero-?(\d)", t)
    if m:
        return int(m.group(1))
    raise InputError(f"unknown zero_fsdp {v!r}")


def _recompute(v, notes) -> str:
    t = _text(v).lower()
    if t in ("", "none"):
        return "none"
    if t == "none stated":
        notes.append("recompute not stated: none")
        return "none"
    if t.startswith("full"):
        return "full"
    if "selective" in t and "per layer" in t:
        raise InputError(f"recompute {v!r}: every k-th layer fully recomputed has no parasim equivalent")
    if t.startswith("selective"):
        return "selective"
    raise InputError(f"unknown recompute {v!r}")


def _precision(v, notes) -> str:
    t = _text(v).lower()
    for p in ("bf16", "fp16", "fp8", "fp32"):
        if p in t:
            return p
    if "mixed" in t:
        notes.append(f"precision {v!r}: bf16")
        return "bf16"
    raise InputError(f"unknown precision {v!r}")


def _schedule(v, pp: int, vpp_cell, notes) -> tuple[str, int]:
    t = _text(v).lower()
    if pp == 1:
        return "1f1b", 1
    if t in ("", "none"):
        notes.append("pipeline schedule not stated: 1f1b")
        return "1f1b", 1
    if "zb-v" in t:
        return "zb-v", 1
    if "zero bubble" in t:
        if "2p" in t:
            return "zb-h2", 1
        if "p*m" in t:
            return "zb-h1", 1
        raise InputError(f"unknown zero-bubble variant {v!r}")
    if "interleav" in t and "not stated" not in t:
        vpp = _int(vpp_cell, "vpp")
        if vpp > pp:
            # Megatron's vpp counts chunks per rank; rows such as the Zero Bubble paper's "1 layer per
            # chunk" give the total number of chunks instead (vpp = layers > pp): ceil(total / pp) per rank
            per_rank = -(-vpp // pp)
            notes.append(f"vpp={vpp} read as total chunks: {per_rank} per rank")
            vpp = per_rank
        return "interleaved", vpp
    if "1f1b" in t:
        if "not stated" in t:
            notes.append("interleaving not stated: plain 1f1b")
        return "1f1b", 1
    raise InputError(f"unknown pipeline_schedule {v!r}")


def _sp(v) -> bool:
    t = _text(v).lower()
    if t in ("", "no", "false", "off"):
        return False
    if t in ("yes", "true", "on"):
        return True
    raise InputError(f"unknown sequence_parallel {v!r}")


def _layers_per_stage(L: int, pp: int, chunks: int, notes_cell: str, notes: list[str]):
    if L % (pp * chunks) == 0:
        return None
    if "one fewer" in notes_cell.lower() and (L + 2) % pp == 0:
        per = (L + 2) // pp
        notes.append(f"first and last stages hold {per - 1} layers (notes)")
        return tuple([per - 1] + [per] * (pp - 2) + [per - 1]) if pp > 1 else None
    if chunks == 1 and L >= pp:
        base, extra = divmod(L, pp)
        notes.append(f"{L} layers over pp={pp}: balanced uneven split (first {extra} stages +1 layer)")
        return tuple(base + (1 if i < extra else 0) for i in range(pp))
    return None


def map_run(row: Mapping, *, hardware: str | None = None) -> MappedRun:
    """Map one CSV row (dict-like) to ModelSpec, Training, Layout and a hardware preset name."""
    from .spec.layout import Layout
    from .spec.model import ModelSpec
    from .spec.training import Training
    from .spec.validate import validate

    run_id = _text(row.get("run_id")) or "?"
    notes: list[str] = []
    try:
        seq = _int(row.get("seq_len"), "seq_len")
        mkw = _arch(_text(row.get("model")), seq)
        kv = None if _blank(row.get("kv_heads")) else _int(row.get("kv_heads"), "kv_heads")
        if not _blank(row.get("moe_experts")):
            raise InputError("MoE rows are not mapped yet (no MoE run in the data set)")
        model = ModelSpec(name=_text(row.get("model")), hidden_size=_int(row.get("hidden"), "hidden"),
                          num_layers=_int(row.get("layers"), "layers"), num_heads=_int(row.get("heads"), "heads"),
                          num_kv_heads=kv, ffn_hidden_size=_int(row.get("ffn_hidden"), "ffn_hidden"),
                          vocab_size=_vocab(row.get("vocab"), notes), **mkw)
        prec = _precision(row.get("precision"), notes)
        training = Training(seq_length=seq, global_batch_size=_int(row.get("global_batch_seqs"), "global_batch_seqs"),
                            precision=prec)
        pp = _int(row.get("pp"), "pp")
        sched, vpp = _schedule(row.get("pipeline_schedule"), pp, row.get("vpp"), notes)
        if _blank(row.get("micro_batch")):
            notes.append(f"micro_batch not stated: {DEFAULT_MICRO_BATCH}")
            mbs = DEFAULT_MICRO_BATCH
        else:
            mbs = _int(row.get("micro_batch"), "micro_batch")
        chunks = 2 if sched in ("zb-v", "dualpipev") else vpp
        lps = _layers_per_stage(model.num_layers, pp, chunks, _text(row.get("notes")), notes)
        layout = Layout(num_gpus=_int(row.get("n_gpus"), "n_gpus"), tp=_int(row.get("tp"), "tp"), pp=pp,
                        dp=_int(row.get("dp"), "dp"),
                        cp=1 if _blank(row.get("cp")) else _int(row.get("cp"), "cp"),
                        ep=1 if _blank(row.get("ep")) else _int(row.get("ep"), "ep"), vpp=vpp,
                        micro_batch_size=mbs, zero=_zero(row.get("zero_fsdp")),
                        recompute=_recompute(row.get("recompute"), notes),
                        sequence_parallel=_sp(row.get("sequence_parallel")), schedule=sched,
                        layers_per_stage=lps)
        validate(model, training, layout)
        hw = hardware or hardware_for_gpu(_text(row.get("gpu_type")))
    except InputError as exc:
        return MappedRun(run_id=run_id, assumptions=tuple(notes), skip_reason=str(exc).splitlines()[0])
    return MappedRun(run_id=run_id, model=model, training=training, layout=layout, hardware_name=hw,
                     assumptions=tuple(notes))


def read_runs(path):
    """Read a runs CSV; InputError naming the first missing required column."""
    import pandas as pd

    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise InputError(f"file not found: {path}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"{path}: missing column {missing[0]!r} (expected the published_runs.csv columns)")
    return df


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


def predict_runs(df, *, hardware: str | None = None, estimate_fn: Callable | None = None,
                 load_hardware_fn: Callable | None = None):
    """Predict every row; returns (results DataFrame, skipped DataFrame).

    results: one row per mapped run with run_id, source_id, model, label, hardware, assumptions,
    feasible, reason, measured_step_s, step_basis, predicted_step_s, step_error, measured_tokens_per_s,
    predicted_tokens_per_s, tokens_per_s_error, measured_mem_bytes, mem_basis, predicted_mem_bytes,
    mem_error. skipped: run_id, source_id, reason. `estimate_fn(model, training, layout, hardware)`
    defaults to `simulator.estimate.estimate`; `load_hardware_fn` to `spec.hardware.load_hardware`.
    """
    import pandas as pd

    if estimate_fn is None:
        try:
            from .estimate import estimate as estimate_fn
        except ModuleNotFoundError as exc:
            raise InputError(f"validate needs simulator.estimate, which is not available ({exc.name})") from None
    if load_hardware_fn is None:
        from .spec.hardware import load_hardware as load_hardware_fn
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
            if mr.hardware_name not in hw_cache:
                hw_cache[mr.hardware_name] = load_hardware_fn(mr.hardware_name)
            est = estimate_fn(mr.model, mr.training, mr.layout, hw_cache[mr.hardware_name])
        except InputError as exc:
            skipped.append({"run_id": mr.run_id, "source_id": src, "reason": str(exc).splitlines()[0]})
            continue
        m_step, basis = measured_step(r)
        tokens = mr.training.tokens_per_step
        p_step = float(est.step_s)
        m_tps = tokens / m_step if math.isfinite(m_step) else float("nan")
        p_tps = float(est.tokens_per_s)
        m_mem = float(r["mem_gb_per_gpu"]) * GIB if not _blank(r.get("mem_gb_per_gpu")) else float("nan")
        p_mem = float(est.memory.peak_bytes)
        out.append({
            "run_id": mr.run_id, "source_id": src, "model": mr.model.name, "label": mr.layout.label,
            "hardware": mr.hardware_name, "assumptions": "; ".join(mr.assumptions),
            "feasible": bool(est.feasible), "reason": str(getattr(est, "reason", "") or ""),
            "measured_step_s": m_step, "step_basis": basis, "predicted_step_s": p_step,
            "step_error": float(signed_error(p_step, m_step)),
            "measured_tokens_per_s": m_tps, "predicted_tokens_per_s": p_tps,
            "tokens_per_s_error": float(signed_error(p_tps, m_tps)),
            "measured_mem_bytes": m_mem, "mem_basis": _text(r.get("mem_basis")), "predicted_mem_bytes": p_mem,
            "mem_error": float(signed_error(p_mem, m_mem)),
        })
    cols = ["run_id", "source_id", "model", "label", "hardware", "assumptions", "feasible", "reason",
            "measured_step_s", "step_basis", "predicted_step_s", "step_error", "measured_tokens_per_s",
            "predicted_tokens_per_s", "tokens_per_s_error", "measured_mem_bytes", "mem_basis",
            "predicted_mem_bytes", "mem_error"]
    return pd.DataFrame(out, columns=cols), pd.DataFrame(skipped, columns=["run_id", "source_id", "reason"])


def error_summary(results, *, by: str | None = None):
    """Per group (or overall): rows, median/max |step error|, step Spearman, rows with memory,
    median/max |memory error|. Errors are fractions."""
    import pandas as pd

    def one(d):
        se = d["step_error"].to_numpy(float)
        ok = np.isfinite(se)
        me = d["mem_error"].to_numpy(float)
        okm = np.isfinite(me)
        return {
            "runs": int(len(d)), "step_runs": int(ok.sum()),
            "median_abs_step_error": float(np.median(np.abs(se[ok]))) if ok.any() else float("nan"),
            "max_abs_step_error": float(np.max(np.abs(se[ok]))) if ok.any() else float("nan"),
            "step_spearman": spearman(d["predicted_step_s"][ok], d["measured_step_s"][ok]) if ok.sum() > 1 else float("nan"),
            "mem_runs": int(okm.sum()),
            "median_abs_mem_error": float(np.median(np.abs(me[okm]))) if okm.any() else float("nan"),
            "max_abs_mem_error": float(np.max(np.abs(me[okm]))) if okm.any() else float("nan"),
        }

    if by is None:
        return pd.DataFrame([{"group": "all", **one(results)}])
    rows = [{"group": k, **one(g)} for k, g in results.groupby(by, sort=True)]
    return pd.DataFrame(rows)
