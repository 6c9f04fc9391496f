"""Predicted vs published peak memory per GPU: BLOOM-176B topology runs and Zero Bubble (Qi et al. 2024).

    python validation/memory_published.py [published_runs.csv] [--markdown]

Reads the rows of published_runs.csv that give `mem_gb_per_gpu` (sources BLOOM_PREQUEL and ZB24),
predicts the worst stage's peak with `simulator.memory.memory_breakdown`'s array form and prints
predicted vs measured. Nothing here is fitted to these rows: every setting below comes from the
row, its source, or a stated framework default, and the overheads are the model's defaults.

Settings per source (the rows leave them out; each is a stated assumption):
- ZB24 (Megatron-LM fork, GPT-like models, pure PP, no TP/DP): LayerNorm, GeLU MLP f = 4h, biases,
  tied embeddings, learned positions (seq_len rows), vocabulary 50257 padded to 50304 (GPT-2 BPE,
  Megatron pads to a multiple of 128); no FlashAttention and dropout on (the paper's own activation
  model M_B = (34h + 5as)·sb is Korthikanti's with materialised attention and dropout); Megatron's
  bf16 defaults (fp32 main grads: 18 B/param; the precision is not stated); first and last stage hold
  one layer fewer (row notes). Schedules: '1F1B' -> 1f1b, 'activation limit p·M_B' (ZB-1p) -> zb-h1,
  '2p·M_B' (ZB-2p) -> zb-h2, ZB-V -> zb-v, interleaved with one layer per chunk -> interleaved with
  vpp = layers per stage.
- BLOOM_PREQUEL (Megatron-DeepSpeed, Feb 2022): BLOOM architecture (LayerNorm, GeLU, biases, tied
  embeddings, ALiBi: no position table), vocabulary 250680 padded to a multiple of 128·tp, no
  FlashAttention (not available then), no dropout (BLOOM's training config), full activation
  checkpointing, ZeRO-1; fp16 rows keep fp16 gradients (DeepSpeed fp16 ZeRO-1), bf16 rows fp32
  gradient accumulation (BF16_Optimizer); DeepSpeed's 1F1B TrainSchedule keeps min(p − i, m)
  micro-batches, like Megatron's. Uneven layer splits give the extra layers to the first stages.
Measured values are read as GiB (torch and nvidia-smi report MiB/GiB; the sources write "GB").
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.memory.breakdown import stage_memory_arrays  # noqa: E402
from simulator.spec.model import ModelSpec  # noqa: E402
from simulator.spec.training import Training  # noqa: E402
from simulator.units import GiB  # noqa: E402

DEFAULT_CSV = ROOT / "validation" / "published_runs.csv"
FALLBACK_CSV = ROOT.parent / "shared" / "data" / "published_runs.csv"


def _pad(v: int, multiple: int) -> int:
    return int(math.ceil(v / multiple) * multiple)


def _gpt(row, vocab: int, positions: int) -> ModelSpec:
    h = int(row.hidden)
    return ModelSpec(name=str(row.model), hidden_size=h, num_layers=int(row.layers), num_heads=int(row.heads),
                     ffn_hidden_size=int(row.ffn_hidden), vocab_size=vocab, mlp="gelu", norm="layernorm",
                     qkv_bias=True, out_bias=True, mlp_bias=True, tie_word_embeddings=True,
                     learned_position_embeddings=positions)


def _zb_schedule(text: str) -> str | None:
    t = text.lower()
    if t.startswith("1f1b"):
        return "1f1b"
    if "2p*m_b" in t:
        return "zb-h2"
    if "p*m_b" in t:
        return "zb-h1"
    if t == "zb-v":
        return "zb-v"
    if t.startswith("interleaved"):
        return "interleaved"
    return None


def _first_last_fewer(L: int, p: int):
    """ZB rows: first and last stage one layer fewer -> n−1, n, ..., n, n−1 with n = (L + 2)/p."""
    if (L + 2) % p:
        return None
    n = (L + 2) // p
    return tuple([n - 1] + [n] * (p - 2) + [n - 1]) if p > 1 else (L,)


def _front_loaded(L: int, p: int):
    base, extra = divmod(L, p)
    return tuple(base + (1 if i < extra else 0) for i in range(p))


def predict_row(row) -> dict | None:
    """Settings and predicted worst-stage peak for one published row (None if unsupported)."""
    L, p, t, d = int(row.layers), int(row.pp), int(row.tp), int(row.dp)
    b, B, s = int(row.micro_batch), int(row.global_batch_seqs), int(row.seq_len)
    m = B // (d * b)
    if row.source_id == "ZB24":
        sched = _zb_schedule(str(row.pipeline_schedule))
        lps = _first_last_fewer(L, p)
        if sched is None or lps is None:
            return None
        model = _gpt(row, vocab=_pad(50257, 128 * t), positions=s)
        tr = Training(seq_length=s, global_batch_size=B, precision="bf16", grad_dtype="fp32",
                      flash_attention=False, dropout=True)
        vpp = max(lps) if sched == "interleaved" else 1
        kw = dict(zero=0, recompute="none", schedule=sched, vpp=vpp)
        stages = list(range(p))
    elif row.source_id == "BLOOM_PREQUEL":
        fp16 = str(row.precision).startswith("fp16")
        model = _gpt(row, vocab=_pad(250680, 128 * t), positions=0)
        tr = Training(seq_length=s, global_batch_size=B, precision="fp16" if fp16 else "bf16",
                      grad_dtype="fp16" if fp16 else "fp32", flash_attention=False, dropout=False)
        lps = _front_loaded(L, p)
        kw = dict(zero=1, recompute="full", schedule="1f1b", vpp=1)
        stages = sorted({0, p - 1})  # the source measured the embedding-holding first/last stages
    else:
        return None
    arr = stage_memory_arrays(model, tr, tp=t, pp=p, dp=d, cp=1, ep=1, micro_batch_size=b, num_microbatches=m,
                              layers_per_stage=lps, sequence_parallel=False, **kw)
    peak = arr["peak_bytes"][stages]
    i = stages[int(np.argmax(peak))]
    parts = {k: float(arr[f"{k}_bytes"][i]) / GiB for k in ("params", "grads", "optimizer", "activations", "other")}
    return {"run_id": row.run_id, "source": row.source_id, "layout": f"TP{t}-PP{p}-DP{d}", "schedule": kw["schedule"],
            "mbs": b, "m": m, "measured_gib": float(row.mem_gb_per_gpu), "predicted_gib": float(peak.max()) / GiB,
            "stage": i, **{f"{k}_gib": v for k, v in parts.items()}}


def predictions(csv_path: str | Path | None = None) -> pd.DataFrame:
    """One row per published run with a memory figure: predicted vs measured and the relative error."""
    path = Path(csv_path) if csv_path else (DEFAULT_CSV if DEFAULT_CSV.is_file() else FALLBACK_CSV)
    df = pd.read_csv(path)
    df = df[df.mem_gb_per_gpu.notna() & df.source_id.isin(["ZB24", "BLOOM_PREQUEL"])]
    rows = [r for r in (predict_row(row) for row in df.itertuples()) if r is not None]
    out = pd.DataFrame(rows)
    out["error"] = out.predicted_gib / out.measured_gib - 1
    return out


def summary(out: pd.DataFrame) -> pd.DataFrame:
    """Per source (and per ZB schedule): rows, median and max |error|, mean signed error."""
    out = out.assign(group=np.where(out.source == "ZB24", "ZB24 " + out.schedule, out.source))
    g = out.groupby("group").error
    return pd.DataFrame({"rows": g.size(), "median_abs_error": g.apply(lambda e: e.abs().median()),
                         "max_abs_error": g.apply(lambda e: e.abs().max()), "mean_error": g.mean()})


def markdown(out: pd.DataFrame) -> str:
    """Summary per group, then one row per run (markdown)."""
    lines = ["| group | rows | median abs error | max abs error | mean signed error |", "|---|---:|---:|---:|---:|"]
    for name, r in summary(out).iterrows():
        lines.append(f"| {name} | {int(r.rows)} | {100 * r.median_abs_error:.0f} % | {100 * r.max_abs_error:.0f} % | "
                     f"{100 * r.mean_error:+.0f} % |")
    lines += ["", "| run | layout | schedule | mbs | m | measured GiB | predicted GiB | error | worst stage: "
              "weights+grads+optim / activations / other GiB |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in out.itertuples():
        states = r.params_gib + r.grads_gib + r.optimizer_gib
        lines.append(f"| {r.run_id} | {r.layout} | {r.schedule} | {r.mbs} | {r.m} | {r.measured_gib:.0f} | "
                     f"{r.predicted_gib:.1f} | {100 * r.error:+.0f} % | {r.stage}: {states:.1f} / "
                     f"{r.activations_gib:.1f} / {r.other_gib:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    res = predictions(args[0] if args else None)
    if "--markdown" in sys.argv:
        print(markdown(res))
    else:
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            print(res[["run_id", "layout", "schedule", "mbs", "m", "measured_gib", "predicted_gib", "error"]]
                  .to_string(index=False, float_format=lambda x: f"{x:.3g}"))
            print()
            print(summary(res).to_string(float_format=lambda x: f"{x:.3f}"))
