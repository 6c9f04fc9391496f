"""The Blackwell presets' cuDNN attention tables, from NVIDIA's published cuDNN SDPA training benchmarks.

    python validation/cudnn_sdpa_tables.py            # the H200 check, the tables against the old ones, the sections
    python validation/cudnn_sdpa_tables.py --write    # write [efficiency.attention_cudnn] / attention_bwd_cudnn
    python validation/cudnn_sdpa_tables.py --check    # exit 1 if a preset's sections differ

Megatron-LM runs its attention in Transformer Engine's fused attention, which is cuDNN's (stacks/megatron.toml
attention_kernel "cudnn"). The Blackwell presets had no cuDNN table, so the megatron stack read their generic
`attention` tables: FlashAttention (CuTe, SM100)'s causal rate at 8k tokens on a B200 with the H100 FlashAttention-3
curve's length shape (validation/blackwell_attention.py), a different kernel.

NVIDIA publishes cuDNN's own attention timings on Blackwell with each cuDNN frontend release
(validation/data/cudnn_sdpa.csv, transcribed by validation/cudnn_sdpa_extract.py: bf16, head dim 128, causal,
forward and backward, 128 query rows of 8 KV heads per call). Each table here is one GPU's newest published release:

- efficiency(s) = FLOPs / (time · dense bf16 peak of the preset) / occupancy, FLOPs the benchmark's own (forward
  4·b·h·s²·d / 2 causal, backward 2.5 times that: cost/compute.py's convention); occupancy = cost/attention.py
  `causal_occupancy` of the benchmark's grid on the preset's SMs (1 where the preset gives no sm_count, as on
  every Blackwell preset);
- from the shortest length the release's call outlasts the host (`MIN_SEQ` per backend: torch's SDPA path,
  `pyt_cudnn`, spends 0.1-0.3 ms per call whatever its work, so its points count from 8192 tokens; the frontend
  called directly, `cudnn` / `cudnn_fe`, from its shortest published length); below it, the shape of the same
  GPU family's earliest frontend-called release (`SHAPE`, which starts at 512 tokens) anchored at that point.

The check that needs no Blackwell GPU: the same benchmark's H200 rows (cuDNN 9.19) against dgx-h200's cuDNN tables,
which were measured on the lent H100 (same die, same 700 W limit), through the cost model's attention op.
"""
from __future__ import annotations

import csv
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))
from h100_gemm_table import preset_cli, rewrite_presets  # noqa: E402
from simulator.cost.attention import Q_TILE, causal_occupancy  # noqa: E402

DATA = ROOT / "data" / "cudnn_sdpa.csv"
# preset -> (the GPU whose rows it reads, cuDNN version of the release): the newest release published for that GPU
SOURCES = {"dgx-b200": ("B200", 91300), "aws-p6-b200": ("B200", 91300), "gb200-nvl72": ("GB200", 92200),
           "gb300-nvl72": ("GB300", 92200), "b300": ("GB300", 92200)}
# the earliest frontend-called release per GPU family, whose points start at 512 tokens: the shape below MIN_SEQ
SHAPE = {"B200": ("GB200", 91700), "GB200": ("GB200", 91700), "GB300": ("GB300", 91700)}
MIN_SEQ = {"pyt_cudnn": 8192, "cudnn_fe": 512, "cudnn": 2048}
PEAK_PRESET = {"B200": "dgx-b200", "GB200": "gb200-nvl72", "GB300": "gb300-nvl72", "H200": "dgx-h200"}  # the GPU's peak
PASSES = (("fwd", "attention_cudnn", 1.0), ("bwd", "attention_bwd_cudnn", 2.5))
NOTES = {"b300": "the GB300's table (the same Blackwell Ultra GPU; no B300 row is published): its rate as a fraction of "
                 "the GB300's peak, taken to hold at this GPU's lower peak [assumption]; "}


def rows(gpu: str | None = None, version: int | None = None, *, window: bool = False) -> list[dict]:
    """The causal rows of validation/data/cudnn_sdpa.csv, optionally of one GPU and cuDNN version: head dim 128 without
    a window, or (`window`) the windowed ones."""
    out = []
    for r in csv.DictReader(open(DATA)):
        if r["causal"] != "True" or (int(r["window"]) > 0) != window or (not window and int(r["head_dim"]) != 128):
            continue
        if (gpu and r["gpu"] != gpu) or (version and int(r["cudnn_version"]) != version):
            continue
        out.append({k: (r[k] if k in ("gpu", "backend", "commit", "date", "path") else float(r[k])) for k in r
                    if k != "causal"})
    return out


def peak_flops(gpu: str) -> float:
    """The dense bf16 FLOP/s of the preset that describes `gpu` (PEAK_PRESET): a published rate's denominator."""
    from simulator.spec.hardware import load_hardware

    return load_hardware(PEAK_PRESET[gpu]).peak_flops("bf16")


def efficiencies(gpu: str, version: int, peak: float, sm_count: int) -> dict:
    """{(pass, seq): efficiency} of one release on one GPU (module docstring)."""
    out = {}
    for r in rows(gpu, version):
        b, h, s, d = r["batch"], r["heads"], r["seq_len"], r["head_dim"]
        occ = float(causal_occupancy(b * h, math.ceil(s / Q_TILE), sm_count, d))
        flops = 4.0 * b * h * s * s * d / 2.0
        for p, _, mult in PASSES:
            out[p, int(s)] = flops * mult / (r[f"{p}_ms"] * 1e-3) / peak / occ
    return out


def _release(gpu: str, version: int) -> dict:
    rs = rows(gpu, version)
    return {"backend": rs[0]["backend"], "date": rs[0]["date"], "commit": rs[0]["commit"], "path": rs[0]["path"],
            "heads": int(rs[0]["heads"]), "batch": int(rs[0]["batch"])}


def table(preset: str) -> dict:
    """{table name: {seq: efficiency}} of a Blackwell preset."""
    from simulator.spec.hardware import load_hardware

    sms = load_hardware(preset).sm_count
    gpu, version = SOURCES[preset]
    own = efficiencies(gpu, version, peak_flops(gpu), sms)
    low = MIN_SEQ[_release(gpu, version)["backend"]]
    shape = efficiencies(*SHAPE[gpu], peak_flops(SHAPE[gpu][0]), sms)
    out = {}
    for p, name, _ in PASSES:
        long = {s: e for (q, s), e in own.items() if q == p and s >= low}
        anchor = min(long)
        short = {s: long[anchor] * e / shape[p, anchor] for (q, s), e in shape.items() if q == p and s < anchor}
        out[name] = dict(sorted({**short, **long}.items()))
    return out


def source(preset: str) -> str:
    gpu, version = SOURCES[preset]
    rel, shp = _release(gpu, version), _release(*SHAPE[gpu])
    low = MIN_SEQ[rel["backend"]]
    v = f"{version // 10000}.{version // 100 % 100}"
    return (f"{NOTES.get(preset, '')}published kernel benchmark: NVIDIA cuDNN frontend benchmark/sdpa_benchmark_training "
            f"(NVIDIA/cudnn-frontend {rel['commit']}, {rel['date']}: {rel['path']}), cuDNN {v} fused attention on an "
            f"NVIDIA {gpu}, backend {rel['backend']}, bf16, causal, head dim 128, batch {rel['batch']} x "
            f"{rel['heads']} query heads (8 KV heads), forward and backward timed alone; efficiency = the benchmark's "
            f"FLOPs (causal-halved forward, 2.5x backward) / (time x the {PEAK_PRESET[gpu]} preset's dense bf16 peak) / cost/attention.py "
            f"causal_occupancy of that grid; points from {low} tokens, below them the shape of cuDNN "
            f"{SHAPE[gpu][1] // 10000}.{SHAPE[gpu][1] // 100 % 100} on the {SHAPE[gpu][0]} ({shp['commit']}, "
            f"{shp['date']}) anchored there; validation/data/cudnn_sdpa.csv, validation/cudnn_sdpa_tables.py")


def section(preset: str, name: str) -> str:
    t = table(preset)[name]
    return (f"[efficiency.{name}]\nx = [{', '.join(f'{s:g}' for s in t)}]\n"
            f"efficiency = [{', '.join(f'{e:.4f}' for e in t.values())}]\n"
            'x_unit = "sequence length (keys per query), head dim 128, causal"\n'
            f'source = "{source(preset)}"\n')


def _pattern(name: str):
    return re.compile(rf"\[efficiency\.{re.escape(name)}\]\n(?:[^\[\n][^\n]*\n)*")


def render(text: str, preset: str) -> str:
    """The preset's TOML with its cuDNN sections written: replaced where present, else after [efficiency.attention_bwd]."""
    for _, name, _ in PASSES:
        new = section(preset, name)
        if _pattern(name).search(text):
            text = _pattern(name).sub(lambda _: new + "\n", text, count=1)
        else:
            m = _pattern("attention_bwd").search(text)
            text = text[:m.end()] + ("\n" if not m.group(0).endswith("\n\n") else "") + new + "\n" + text[m.end():]
    return re.sub(r"\n{3,}", "\n\n", text)


def write() -> list[str]:
    return rewrite_presets(render, tuple(SOURCES), write=True)


def check() -> list[str]:
    return rewrite_presets(render, tuple(SOURCES), write=False)


def h200_check(hardware: str = "dgx-h200") -> list[dict]:
    """Per published H200 row (cuDNN 9.19): measured and predicted forward and backward seconds of one attention call,
    the prediction the cost model's attention op on `hardware` with the megatron stack's cuDNN kernel."""
    from simulator.cost.compute import layer_op_times
    from simulator.spec.hardware import load_hardware
    from simulator.spec.model import ModelSpec
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    hw = load_hardware(hardware)
    out = []
    for r in rows("H200"):
        b, h, kv, s = (int(r[k]) for k in ("batch", "heads", "kv_heads", "seq_len"))
        model = ModelSpec(name="cudnn-sdpa", hidden_size=h * 128, num_layers=1, num_heads=h, num_kv_heads=kv,
                          ffn_hidden_size=4 * h * 128, vocab_size=32000, mlp="swiglu", norm="rmsnorm")
        tr = Training(seq_length=s, global_batch_size=b, precision="bf16", flash_attention=True,
                      stack=load_stack("megatron"))
        att = {o.name: o for o in layer_op_times(model, tr, hw, micro_batch_size=b)}["attention"]
        out.append({"seq": s, "measured_fwd_s": r["fwd_ms"] * 1e-3, "measured_bwd_s": r["bwd_ms"] * 1e-3,
                    "predicted_fwd_s": float(att.forward_s), "predicted_bwd_s": float(att.backward_s)})
    return out


def window_check() -> list[dict]:
    """Per published windowed row (GPT-OSS's shape on the GB200 and GB300, cuDNN 9.22): measured and predicted forward
    and backward seconds, the prediction the cost model's attention op of a model whose one layer is windowed
    (cost/window.py: the causal table read at the same work per thread block) on the GPU's preset, megatron stack."""
    from simulator.cost.compute import layer_op_times
    from simulator.spec.hardware import load_hardware
    from simulator.spec.model import ModelSpec
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    out = []
    for r in rows(window=True):
        b, h, kv, s, d, w = (int(r[k]) for k in ("batch", "heads", "kv_heads", "seq_len", "head_dim", "window"))
        model = ModelSpec(name="cudnn-window", hidden_size=h * d, num_layers=1, num_heads=h, num_kv_heads=kv,
                          ffn_hidden_size=4 * h * d, vocab_size=32000, mlp="swiglu", norm="rmsnorm", sliding_window=w,
                          sliding_layers=(0,))
        tr = Training(seq_length=s, global_batch_size=b, precision="bf16", flash_attention=True,
                      stack=load_stack("megatron"))
        att = {o.name: o for o in layer_op_times(model, tr, load_hardware(PEAK_PRESET[r["gpu"]]), micro_batch_size=b)}
        out.append({"gpu": r["gpu"], "seq": s, "head_dim": d, "window": w, "measured_fwd_s": r["fwd_ms"] * 1e-3,
                    "measured_bwd_s": r["bwd_ms"] * 1e-3, "predicted_fwd_s": float(att["attention"].forward_s),
                    "predicted_bwd_s": float(att["attention"].backward_s)})
    return out


def prefill_check() -> list[dict]:
    """Per published H200 prefill row (cuDNN 9.27, one causal forward over a fresh prompt, 8-64 query heads: Llama 3.1
    70B's attention at TP 1-8, and Qwen3.5's head dim 256; validation/data/cudnn_prefill.csv): measured and predicted
    forward seconds, the prediction the cost model's attention op on dgx-h200 with the megatron stack, whose
    cuDNN tables hold the lent H100's rate at 1 x 32 heads and cost/attention.py's occupancy for other grids."""
    from simulator.cost.compute import layer_op_times
    from simulator.spec.hardware import load_hardware
    from simulator.spec.model import ModelSpec
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    hw = load_hardware("dgx-h200")
    out = []
    for r in csv.DictReader(open(ROOT / "data" / "cudnn_prefill.csv")):
        b, s, h, kv, d = (int(r[k]) for k in ("batch", "q_tokens", "heads", "kv_heads", "head_dim"))
        model = ModelSpec(name="cudnn-prefill", hidden_size=h * 128, num_layers=1, num_heads=h, num_kv_heads=kv,
                          ffn_hidden_size=4 * h * 128, vocab_size=32000, mlp="swiglu", norm="rmsnorm", head_dim=d)
        tr = Training(seq_length=s, global_batch_size=b, precision="bf16", flash_attention=True,
                      stack=load_stack("megatron"))
        att = {o.name: o for o in layer_op_times(model, tr, hw, micro_batch_size=b)}["attention"]
        out.append({"gpu": f"{h} heads, d {d}", "seq": s, "heads": h, "head_dim": d,
                    "measured_s": float(r["time_ms"]) * 1e-3, "predicted_s": float(att.forward_s)})
    return out


def prefill_lines() -> list[str]:
    from statistics import median

    rows = prefill_check()
    lens = sorted({r["seq"] for r in rows})
    out = ["| query heads, head dim | " + " | ".join(f"{s} tokens" for s in lens) + " |",
           "|---|" + "---|" * len(lens)]
    for key in dict.fromkeys(r["gpu"] for r in rows):
        cells = {r["seq"]: r["predicted_s"] / r["measured_s"] - 1 for r in rows if r["gpu"] == key}
        out.append(f"| {key} | " + " | ".join(f"{100 * cells[s]:+.1f} %" for s in lens) + " |")
    e128 = [r["predicted_s"] / r["measured_s"] - 1 for r in rows if r["head_dim"] == 128]
    return out + ["", f"Head dim 128 ({len(e128)} kernels, 8-64 heads): median |error| "
                      f"{100 * median(map(abs, e128)):.1f} %, max {100 * max(map(abs, e128)):.1f} %."]


def _check_lines(checks, label: str, first: str) -> list[str]:
    from statistics import median

    out = [f"| {first} | tokens | measured fwd / bwd ms | {label} fwd / bwd ms | error fwd / bwd |",
           "|---|---|---|---|---|"]
    errs = []
    for r in checks:
        ef, eb = (r[f"predicted_{p}_s"] / r[f"measured_{p}_s"] - 1 for p in ("fwd", "bwd"))
        errs += [ef, eb]
        out.append(f"| {r.get('gpu', 'H200')} | {r['seq']} | {1e3 * r['measured_fwd_s']:.3f} / "
                   f"{1e3 * r['measured_bwd_s']:.3f} | {1e3 * r['predicted_fwd_s']:.3f} / {1e3 * r['predicted_bwd_s']:.3f} | "
                   f"{100 * ef:+.1f} % / {100 * eb:+.1f} % |")
    return out + ["", f"Median |error| {100 * median(map(abs, errs)):.1f} %, max {100 * max(map(abs, errs)):.1f} % "
                      f"over {len(errs)} kernels."]


def window_lines() -> list[str]:
    return _check_lines(window_check(), "preset", "GPU")


def h200_lines() -> list[str]:
    return _check_lines(h200_check(), "dgx-h200", "GPU")


def comparison_lines() -> list[str]:
    """Markdown: per Blackwell preset, the cuDNN table against the generic (FlashAttention) table it read before."""
    from simulator.spec.hardware import load_hardware

    out = ["| preset | cuDNN release | tokens | cuDNN fwd / bwd | FlashAttention table fwd / bwd | "
           "cuDNN time / FlashAttention time, fwd / bwd |", "|---|---|---|---|---|---|"]
    for preset in ("dgx-b200", "gb200-nvl72", "gb300-nvl72"):  # aws-p6-b200 and b300 hold the same tables
        hw, t = load_hardware(preset), table(preset)
        gpu, v = SOURCES[preset]
        for s in (2048, 4096, 8192, 16384):
            c = [t[name][s] if s in t[name] else float("nan") for _, name, _ in PASSES]
            f = [float(hw.interp_efficiency(name, [s])[0]) for name in ("attention", "attention_bwd")]
            out.append(f"| {preset} | {gpu} {v // 10000}.{v // 100 % 100} | {s} | {c[0]:.3f} / {c[1]:.3f} | "
                       f"{f[0]:.3f} / {f[1]:.3f} | {f[0] / c[0]:.2f} / {f[1] / c[1]:.2f} |")
    return out


def release_lines() -> list[str]:
    """Markdown: every published release's causal efficiency at 8192 tokens, by GPU (the spread across releases)."""
    out = ["| GPU | cuDNN | published | backend | batch x heads | 8192 tokens fwd / bwd | 2048 tokens fwd / bwd |",
           "|---|---|---|---|---|---|---|"]
    seen = sorted({(r["gpu"], int(r["cudnn_version"])) for r in rows()})
    for gpu, v in seen:
        e, rel = efficiencies(gpu, v, peak_flops(gpu), 0), _release(gpu, v)
        cell = lambda s: (f"{e['fwd', s]:.3f} / {e['bwd', s]:.3f}" if ("fwd", s) in e else "-")  # noqa: E731
        out.append(f"| {gpu} | {v // 10000}.{v // 100 % 100} | {rel['date']} | {rel['backend']} | "
                   f"{rel['batch']} x {rel['heads']} | {cell(8192)} | {cell(2048)} |")
    return out


def doc_section() -> str:
    """docs/compute.md's section on these tables (tests/test_cudnn_sdpa_tables.py checks it is current)."""
    return "\n".join([
        "### cuDNN attention on Blackwell, published (`validation/cudnn_sdpa_tables.py`)", "",
        "Megatron-LM's attention is Transformer Engine's fused attention, cuDNN's kernel. NVIDIA publishes cuDNN's "
        "own training attention timings with each cuDNN frontend release (benchmark/sdpa_benchmark_training: one "
        "bf16 forward and backward per shape on one GPU, head dim 128, 8 KV heads; transcribed into "
        "`validation/data/cudnn_sdpa.csv` by `validation/cudnn_sdpa_extract.py`, each row naming its commit and "
        "file). Causal efficiency per release, over each GPU's preset peak (H200 989, B200 2250, GB200 and GB300 "
        "2500 TFLOP/s):", "",
        *release_lines(), "",
        "`pyt_cudnn` is torch's SDPA calling cuDNN: its calls at 512 and 1024 tokens take 0.10-0.28 ms whatever "
        "their work, the host's time, so its points count from 8192 tokens (1.9 ms a forward call); `cudnn` and "
        "`cudnn_fe` call the frontend directly. The releases move the rate: on the GB300, 9.13 to 9.17 "
        "added 24-29 % forward at 8192 tokens; from 9.17 on the rate holds within a few per cent.", "",
        "**The check on a GPU measured here.** The same benchmark's H200 rows (cuDNN 9.19, the version torch 2.11 "
        "ran on the lent H100 and H200) against dgx-h200's cuDNN tables (measured on the lent H100 through torch's "
        "SDPA, 1 x 32 heads, with cost/attention.py's occupancy), through the cost model's attention op with the "
        "megatron stack:", "",
        *h200_lines(), "",
        "The tables measured here run 4-14 % slower than NVIDIA's frontend-called kernels of the same release, within "
        "the spread between releases above; nothing was fitted to these rows.", "",
        "**How the rate moves with the grid.** The same cuDNN frontend's H200 prefill rows (cuDNN 9.27, "
        "benchmark/attention_inference prefill_sweep: one causal forward over a fresh prompt, batch 1; Llama 3.1 70B's "
        "attention split 1-8 ways by TP, so 64 down to 8 query heads, and Qwen3.5's head dim 256; "
        "`validation/data/cudnn_prefill.csv`) against dgx-h200's cuDNN tables, error of the predicted forward time:", "",
        *prefill_lines(), "",
        "The tables were measured at 1 x 32 heads; cost/attention.py's causal occupancy carries them to 8-64 heads: "
        "with 8 heads the kernel runs at 290 TFLOP/s at 2048 tokens against 490 with 64, and the prediction follows "
        "(0 to +15 % at every head count, the offset between this release and the one the tables were measured with). Head dim 256 is 20-28 % slow: "
        "its table is the head dim 128 one times an older cuDNN chart's 256/128 ratio (0.94 at 8k, FlashAttention-3 "
        "README, fp16), where cuDNN 9.27 runs head dim 256 10-14 % faster per FLOP than 128 at the same 32 heads; not "
        "changed here (forward only, one GPU; the backward ratio is not published).", "",
        "**The Blackwell presets** now hold `attention_cudnn` / `attention_bwd_cudnn` tables from each GPU's newest "
        "published release (B200: 9.13, the only B200 release published; GB200 and GB300: 9.22; B300: the GB300's). "
        "The megatron stack reads them; stacks that run FlashAttention keep the CuTe FlashAttention tables. Against "
        "the FlashAttention tables the megatron stack read before (aws-p6-b200 as dgx-b200, b300 as gb300-nvl72):",
        "",
        *comparison_lines(), "",
        "On the published Megatron-Bridge Blackwell runs (docs/accuracy.md; at this change, 2026-11-28): MBRIDGE_B200 median |error| 32.4 % -> "
        "29.2 % (Llama 3 8B rows -14 to -20 % -> -9 to -15 %, Llama 3.1 405B -14 to -21 % -> -12 to -18 %); with the "
        "GB200's 9.22 table moved to the B200 instead of the B200's own 9.13 it would be 31.7 %. MBRIDGE_B300 is "
        "30.4 % -> 30.5 %: its rows are mixture-of-experts steps whose attention is a small share. The MLA (DeepSeek-V3, "
        "head dim 192) and GPT-OSS (head dim 64, windowed, sinks) shapes the same benchmark publishes on the GB200 and "
        "GB300 are not yet tables: those rows read the head dim 128 table (on the GB200 the MLA shape, 128 heads of "
        "192/128, runs within 1 % of the head dim 128 rate per FLOP at 4096-8192 tokens, cuDNN 9.22).", "",
        "**GPT-OSS's windowed layers.** The same release times GPT-OSS's windowed attention (a causal window of 128 "
        "keys, head dim 64, 2 x 128 heads) on the GB200 and GB300. cost/window.py reads a windowed kernel off the "
        "causal table at the length whose thread blocks do the same work (384 tokens for a 128-key window), at head "
        "dim 128 where a preset has no head dim 64 table (no Blackwell one is published):", "",
        *window_lines(), "",
        "The model is 37-66 % too fast on these kernels: they run at 104-190 TFLOP/s, 4-8 % of the peak, where the "
        "causal table's 384-token point (the table's 512-token value, 0.17 on the GB200, 0.19 on the GB300) times the "
        "window's fill and the causal tiles' (2/3) gives 11-13 %, and head dim 64 runs slower than 128 on the H100 "
        "(0.69-0.77 of it). The GPT-OSS rows of MBRIDGE_B200 "
        "and MBRIDGE_B300 (half their layers windowed) are under-predicted with it; a windowed-kernel table from "
        "these rows is owed (not fitted here: the rows would then check nothing).", ""])


def report(_argv) -> None:
    print("\n".join(["# H200: published cuDNN 9.19 against dgx-h200", *h200_lines(), "", "# releases", *release_lines(),
                     "", "# tables", *comparison_lines()]))
    for preset in SOURCES:
        for _, name, _ in PASSES:
            print(f"# {preset}\n{section(preset, name)}")


def main(argv=None) -> int:
    return preset_cli(argv, "[efficiency.attention_cudnn] sections", write, check, report)


if __name__ == "__main__":
    sys.exit(main())
