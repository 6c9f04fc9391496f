"""The lent H200 SXM's kernels against the lent H100 SXM's and against what the dgx-h200 preset predicts for them.

    python validation/h200_kernels.py            # the four sections (GEMMs, memory-bound, power, SDPA), markdown

dgx-h200 assumes the H200 runs GEMMs, FP8 GEMMs and attention as the lent H100 did (its `gemm`, `gemm_fp8` and
attention tables are the H100's: the same GH100 die and 700 W limit) and its memory-bound kernels as a published
benchmark says (validation/published_memory_tables.py: the H100's tables scaled by gpu-benches' H200 streaming rate).
Data: validation/h200/ (one H200 SXM 141GB, 700 W, driver 580.159.04, torch 2.11.0+cu130, CUDA 13.0, cuDNN 9.19:
env.txt; protocol validation/gpu_h200.sh) and the H100's files of the same scripts on two leases (H100_LEASES,
2026-11-27; the first lease lacks the SDPA grid). Times are queued (20 calls back to back between two CUDA events:
the kernel and the GPU's gap, not the host's issue) unless a column says CUPTI (`kernel_s`: the kernels alone).
Predicted times are the simulator's own: a GEMM as cost/compute.py times a weight GEMM (`_gemm_times`), a
memory-bound kernel as cost/memory_ops.py does (`_memory_time`, the kernel class's table), an SDPA call as
validation/gpu_attention_report.py does (`call_times`). Ratios are of times: above 1 the H200 (or the prediction)
is the slower.
"""
from __future__ import annotations

import re
import sys
from functools import lru_cache
from pathlib import Path
from statistics import median
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

H200 = ROOT / "h200"
H100_LEASES = ("h100_owed2", "h100_owed")  # second lease first: it has every file the H200 run wrote
PRESET = "dgx-h200"
GEMM_KEY = ["op", "m", "n", "k", "dtype"]
BIG_FLOPS = 1e11  # from here GEMMs are GPU-bound when queued (below, the host's issue scatters them)
ASSUMPTION_TOL = 0.03  # "within a few per cent": |median ratio - 1| at most this
STREAM_MIN_BYTES = 16 * 2**20  # inputs from 16 MiB: the queued calls are the GPU's time (h100_memory_table)
LARGEST_BYTES = 256 * 2**20  # "the largest sizes": inputs of 256 MiB to 1 GiB, 5-20x the 50 MB L2
HBM_TB_PER_S = {"H200": 4.8, "H100": 3.35}  # datasheets (dgx-h200.toml, dgx-h100.toml [gpu] hbm_gb_per_s)
SDPA_BACKENDS = ("cudnn", "flash", "efficient")  # torch SDPA's fused backends (math: fp32, not modelled)


def _csv(path: Path):
    import pandas as pd

    return pd.read_csv(path)


def _hw(name: str = PRESET):
    from simulator.spec.hardware import load_hardware

    return load_hardware(name)


def _stats(values) -> tuple[int, float, float, float]:
    """(count, median, min, max) of finite values; NaNs dropped."""
    v = [float(x) for x in values if x == x]
    return (len(v), median(v), min(v), max(v)) if v else (0, float("nan"), float("nan"), float("nan"))


def _cell(values) -> str:
    n, m, lo, hi = _stats(values)
    return "—" if not n else f"{m:.3f} ({lo:.2f}-{hi:.2f})"


# ---- GEMMs ---------------------------------------------------------------------------------------------------------
def predicted_gemm_s(rows, hardware):
    """Forward time of each (m, n, k, dtype, flops) row as parasim times a weight GEMM (cost/compute.py
    `_gemm_times`: max of FLOPs / (peak · η_gemm or η_gemm_fp8) and bytes / (HBM · η_memory)); fp8 rows as an FP8
    linear under fp8 training (FP8 peak, 1-byte operands, bf16 out: what torch._scaled_mm ran)."""
    import numpy as np

    from simulator.cost.compute import _gemm_times
    from simulator.cost.flops import LayerOp
    from simulator.spec.training import Training

    out = np.full(len(rows), np.nan)
    for dtype in ("bf16", "fp8"):
        sel = (rows["dtype"] == dtype).to_numpy()
        if not sel.any():
            continue
        training = Training(seq_length=1, global_batch_size=1, precision=dtype)
        ops = [LayerOp(name=r.op, kind="gemm", m=r.m, n=r.n, k=r.k, calls=1, forward_flops=r.flops,
                       dgrad_flops=r.flops, wgrad_flops=r.flops, fp8=dtype == "fp8")
               for r in rows[sel].itertuples()]
        out[sel] = _gemm_times(ops, training, hardware, roofline=True)[0]
    return out


@lru_cache(maxsize=1)
def gemm_frame():
    """DataFrame of the H200's queued GEMMs (gemm_queued.csv) with each H100 lease's queued time of the same shape
    and dtype (`<lease>_s`) and dgx-h200's predicted time (`predicted_s`)."""
    h = _csv(H200 / "gemm_queued.csv")
    for lease in H100_LEASES:
        q = _csv(ROOT / lease / "gemm_queued.csv")[GEMM_KEY + ["queued_s"]]
        h = h.merge(q.rename(columns={"queued_s": f"{lease}_s"}), on=GEMM_KEY, how="left")
    return h.assign(predicted_s=predicted_gemm_s(h, _hw()))


def gemm_ratios(dtype: str, *, min_flops: float = 0.0, max_flops: float = float("inf")) -> dict:
    """Per-shape time ratios of `dtype`'s GEMMs with min_flops <= FLOPs < max_flops: 'h200_over_<lease>',
    'h200_over_h100' (over the two leases' mean time: dgx-h100's tables were fitted to both), 'h100_lease_spread'
    (lease 1 / lease 2), 'predicted_over_h200' and 'predicted_over_<lease>' (dgx-h200's predicted time)."""
    g = gemm_frame()
    g = g[(g["dtype"] == dtype) & (g["flops"] >= min_flops) & (g["flops"] < max_flops)]
    both = sum(g[f"{lease}_s"] for lease in H100_LEASES) / len(H100_LEASES)
    out = {f"h200_over_{lease}": g["queued_s"] / g[f"{lease}_s"] for lease in H100_LEASES}
    out["h200_over_h100"] = g["queued_s"] / both
    out["h100_lease_spread"] = g[f"{H100_LEASES[1]}_s"] / g[f"{H100_LEASES[0]}_s"]
    out["predicted_over_h200"] = g["predicted_s"] / g["queued_s"]
    out.update({f"predicted_over_{lease}": g["predicted_s"] / g[f"{lease}_s"] for lease in H100_LEASES})
    return out


FLOP_BANDS = [(f"1e{d}-1e{d + 1}", 10.0**d, 10.0 ** (d + 1)) for d in range(8, 14)] + [(">= 1e11", BIG_FLOPS, 1e99)]


def gemm_verdict(dtype: str) -> str:
    """One sentence: does "H200 GEMMs = H100 GEMMs" hold within ASSUMPTION_TOL at >= BIG_FLOPS (the median H200 /
    H100 time, the H100 being the mean of its two leases), and how far dgx-h200's table is from the H200 and from
    each H100 lease there."""
    r = gemm_ratios(dtype, min_flops=BIG_FLOPS)
    same, spread = _stats(r["h200_over_h100"])[1], _stats(r["h100_lease_spread"])[1]
    _, pm, plo, phi = _stats(r["predicted_over_h200"])
    leases = " and ".join(f"{_stats(r[f'predicted_over_{s}'])[1]:.3f}" for s in H100_LEASES)
    holds = abs(same - 1.0) <= ASSUMPTION_TOL
    return (f"{dtype}, from 1e11 FLOPs: the H200's GEMMs take {same:.3f} x the H100's time (median per shape, the "
            f"two leases' mean; lease 1 / lease 2 {spread:.3f}), so \"H200 GEMMs = H100 GEMMs\" "
            f"{'holds' if holds else 'does not hold'} within {100 * ASSUMPTION_TOL:.0f} %; dgx-h200 predicts "
            f"{pm:.3f} x the H200's time ({plo:.2f}-{phi:.2f} per shape) and {leases} x the H100 lease 2's and "
            f"lease 1's.")


def gemm_lines() -> list[str]:
    """Markdown: per dtype and FLOP decade, H200 / H100 and dgx-h200 predicted / H200 measured, median (range)."""
    out = ["### GEMMs: H200 against the H100 and against dgx-h200", "",
           "The calibration's transformer-layer GEMM grid (validation/gpu_gemm_queued.py), bf16 `torch.matmul` and "
           "FP8 `torch._scaled_mm`, queued time per shape. Cells: median (range) of per-shape time ratios; "
           "dgx-h200's prediction is the H100's back-to-back tables (identical to dgx-h100's for every shape here).",
           "", "| dtype | FLOPs per GEMM | shapes | H200 / H100 lease 2 | H200 / H100 lease 1 | "
           "H200 / H100 (leases' mean) | H100 lease 1 / lease 2 | dgx-h200 predicted / H200 |",
           "|---|---|---|---|---|---|---|---|"]
    for dtype in ("bf16", "fp8"):
        for label, lo, hi in FLOP_BANDS:
            r = gemm_ratios(dtype, min_flops=lo, max_flops=hi)
            cols = ("h200_over_h100_owed2", "h200_over_h100_owed", "h200_over_h100", "h100_lease_spread",
                    "predicted_over_h200")
            if len(r["predicted_over_h200"]):
                out.append(f"| {dtype} | {label} | {len(r['predicted_over_h200'])} | "
                           + " | ".join(_cell(r[c]) for c in cols) + " |")
    out += ["", *(gemm_verdict(d) for d in ("bf16", "fp8")),
            "Below 1e11 FLOPs the queued calls hold the host's issue (the H200 run's host differs from the H100's), "
            "so those ratios compare hosts, not GPUs.", ""]
    return out


# ---- memory-bound kernels ------------------------------------------------------------------------------------------
def kernel_class_table(kernel: str) -> str:
    """The table parasim times a benchmark kernel with (memory_ops.kernel_table): RMSNorm is a row reduction."""
    from simulator.cost.memory_ops import kernel_table

    return kernel_table(SimpleNamespace(reduction=kernel == "rmsnorm"))


@lru_cache(maxsize=1)
def memory_frame():
    """DataFrame of the H200's queued memory-bound kernels (memory_queued.csv) with each H100 lease's queued time
    (`<lease>_s`) and dgx-h200's predicted time (`predicted_s`, one kernel moving `bytes_moved`)."""
    from simulator.cost.memory_ops import _memory_time

    key = ["kernel", "size_bytes"]
    h = _csv(H200 / "memory_queued.csv").drop_duplicates(key)
    for lease in H100_LEASES:
        q = _csv(ROOT / lease / "memory_queued.csv").drop_duplicates(key)[key + ["queued_s"]]
        h = h.merge(q.rename(columns={"queued_s": f"{lease}_s"}), on=key, how="left")
    hw = _hw()
    pred = [float(_memory_time(r.bytes_moved, 1.0, hw, kernel_class_table(r.kernel))) for r in h.itertuples()]
    return h.assign(predicted_s=pred)


def largest_rates() -> dict:
    """{kernel: {'h200', 'h200_cupti', <lease>, 'predicted'}}: bytes/s at inputs >= LARGEST_BYTES, median."""
    m = memory_frame()
    m = m[m["size_bytes"] >= LARGEST_BYTES]
    out = {}
    for k, g in m.groupby("kernel", sort=False):
        b = g["bytes_moved"]
        out[k] = {"h200": (b / g["queued_s"]).median(), "h200_cupti": (b / g["kernel_s"]).median(),
                  "predicted": (b / g["predicted_s"]).median(), **{s: (b / g[f"{s}_s"]).median() for s in H100_LEASES}}
    return out


def predicted_over_measured(kernel: str, *, large: bool, timing: str = "queued_s") -> tuple[int, float, float, float]:
    """_stats of dgx-h200 predicted / measured time of `kernel`, inputs >= STREAM_MIN_BYTES (large) or below;
    `timing` queued_s or kernel_s (CUPTI)."""
    m = memory_frame()
    m = m[(m["kernel"] == kernel) & ((m["size_bytes"] >= STREAM_MIN_BYTES) == large)]
    return _stats(m["predicted_s"] / m[timing])


def streaming_rates() -> dict:
    """{'h200', 'h100', 'preset'}: B_stream in bytes/s (h100_memory_table.stream_rate: the GPU-bound copy, add and
    SiLU calls, each GPU with its own memory-table t0) on the H200 and the H100's first lease; 'preset': the
    gpu-benches H200 rate dgx-h200's tables were scaled by before the H200 was measured."""
    import h100_memory_table as M
    import published_memory_tables as P

    return {"h200": M.stream_rate("H200"), "h100": M.stream_rate("H100"), "preset": P.small_kernel_fit("H200")[1]}


def memory_lines() -> list[str]:
    """Markdown: the H200's rates at the largest inputs against the H100's and dgx-h200's, and dgx-h200's predicted
    / measured time by input size."""
    tb = 1e12
    out = ["### Memory-bound kernels: H200 against the H100 and against dgx-h200", "",
           "validation/gpu_gemm_queued.py --memory: copy, add, RMSNorm, SiLU (bf16, one 64 KiB-1 GiB input). "
           f"Rates: bytes moved / time, median over inputs of {LARGEST_BYTES // 2**20} MiB-1 GiB (TB/s); "
           "predicted: dgx-h200's table of the kernel's class (`memory`, RMSNorm `memory_reduction`).", "",
           "| kernel | H200 queued | H200 CUPTI | H100 lease 2 | H100 lease 1 | H200 / H100 lease 2 rate | dgx-h200 "
           "predicted | dgx-h200 predicted / H200 measured time |", "|---|---|---|---|---|---|---|---|"]
    for k, r in largest_rates().items():
        out.append(f"| {k} | {r['h200'] / tb:.2f} | {r['h200_cupti'] / tb:.2f} | {r['h100_owed2'] / tb:.2f} | "
                   f"{r['h100_owed'] / tb:.2f} | {r['h200'] / r['h100_owed2']:.3f} | {r['predicted'] / tb:.2f} | "
                   f"{r['h200'] / r['predicted']:.3f} |")
    s = streaming_rates()
    hbm = HBM_TB_PER_S["H200"] / HBM_TB_PER_S["H100"]
    out += ["", f"HBM datasheets: {HBM_TB_PER_S['H200']} / {HBM_TB_PER_S['H100']} TB/s = {hbm:.3f}. Streaming rate "
            f"(GPU-bound copy, add, SiLU calls, each GPU's own t0): H200 measured "
            f"{s['h200'] / tb:.2f} TB/s, the H100's {s['h100'] / tb:.2f} (ratio {s['h200'] / s['h100']:.3f}); "
            f"dgx-h200's tables were scaled by gpu-benches' H200 rate {s['preset'] / tb:.2f} TB/s (ratio "
            f"{s['preset'] / s['h100']:.3f}), {100 * (1 - s['preset'] / s['h200']):.0f} % below the lent H200's.", "",
            "dgx-h200 predicted / H200 measured time, median (range), points. From 16 MiB the queued calls are the "
            "GPU's time; below, a queued call holds the host's issue (an upper bound of the kernel's time) and CUPTI "
            "the kernel alone without the gap between kernels (a lower bound). The lowest ratios of the first column "
            "are the 16 MiB inputs, which move 32-48 MiB, within the H200's 60 MiB L2 (env.txt).", "",
            "| kernel | table | inputs >= 16 MiB, queued | < 16 MiB, queued | < 16 MiB, CUPTI |",
            "|---|---|---|---|---|"]
    for k in memory_frame()["kernel"].unique():
        cells = [predicted_over_measured(k, large=True), predicted_over_measured(k, large=False),
                 predicted_over_measured(k, large=False, timing="kernel_s")]
        out.append(f"| {k} | `{kernel_class_table(k)}` | " + " | ".join(
            f"{m:.3f} ({lo:.2f}-{hi:.2f}), {n}" for n, m, lo, hi in cells) + " |")
    return out + [""]


# ---- power limit ---------------------------------------------------------------------------------------------------
def phase_summary(df, what: str, run_id: str) -> dict:
    """{phase: {'s', 'lo', 'hi', 'tflops', 'clock', 'power'}} of one workload's cold / sustained / hot rows
    (medians; sustained over its one-second rows, 'lo' / 'hi' the range of its time per call)."""
    g = df[(df["what"] == what) & (df["run_id"] == run_id)]
    return {ph: {"s": p["time_s"].median(), "lo": p["time_s"].min(), "hi": p["time_s"].max(),
                 "tflops": p["tflops"].median(), "clock": p["sm_clock_mhz"].median(), "power": p["power_w"].median()}
            for ph, p in ((ph, g[g["phase"] == ph]) for ph in ("cold", "sustained", "hot")) if len(p)}


def power_lines() -> list[str]:
    """Markdown: the 8192^3 GEMM and the harness steps cold / sustained / hot on both GPUs (power_step.csv), then
    the H200's GEMM-share mix and wgrad accumulate rows (power_mix.csv; protocol: validation/gpu_power_step.py)."""
    import pandas as pd

    gpus = (("H200", _csv(H200 / "power_step.csv")), ("H100 lease 2", _csv(ROOT / H100_LEASES[0] / "power_step.csv")))
    h2 = gpus[0][1]
    work = [("gemm", "8192^3")] + [("step", r) for r in h2.loc[h2["what"] == "step", "run_id"].unique()]
    out = ["### Power limit: cold, sustained (back to back, one row per second) and hot", "",
           "| workload | GPU | phase | TFLOP/s or ms per step | SM clock MHz | power W |", "|---|---|---|---|---|---|"]
    for what, rid in work:
        name = "8192^3 bf16 GEMM" if what == "gemm" else f"step {rid.split('-none')[0]}"
        for gpu, df in gpus:
            for ph, v in phase_summary(df, what, rid).items():
                span = f" ({1e3 * v['lo']:.1f}-{1e3 * v['hi']:.1f})" if ph == "sustained" else ""
                val = f"{v['tflops']:.0f} TFLOP/s" if what == "gemm" else f"{1e3 * v['s']:.1f} ms{span}"
                out.append(f"| {name} | {gpu} | {ph} | {val} | {v['clock']:.0f} | {v['power']:.0f} |")
    (c2, u2), (c1, u1) = ((p["cold"], p["sustained"]) for p in (phase_summary(df, "gemm", "8192^3") for _, df in gpus))
    big = pd.DataFrame([{"op": "8192^3", "m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "flops": 2.0 * 8192**3}])
    pred = 2.0 * 8192**3 / predicted_gemm_s(big, _hw())[0] / 1e12
    steps = [(rid.split("-none")[0], [phase_summary(df, w, rid)["sustained"]["s"] for _, df in gpus])
             for w, rid in work[1:]]
    out += ["", f"Sustained 8192^3 GEMM: H200 {u2['tflops']:.0f} TFLOP/s, {u2['tflops'] / c2['tflops']:.3f} x its "
            f"cold rate; H100 {u1['tflops']:.0f}, {u1['tflops'] / c1['tflops']:.3f} x; H200 / H100 sustained time "
            f"{u2['s'] / u1['s']:.3f}. dgx-h200 predicts {pred:.0f} TFLOP/s (the H100's back-to-back table): "
            f"{pred / u2['tflops']:.3f} x the H200's sustained rate. Harness steps, sustained H200 / H100 time: "
            + ", ".join(f"{name} {a / b:.3f}" for name, (a, b) in steps) + ".", ""]
    return out + mix_lines()


def mix_rows() -> list[dict]:
    """The H200's `mix` rows (power_mix.csv), GEMM share 1.0 first: the share of the cold time, copies per GEMM and
    phase_summary's cold and sustained entries (TFLOP/s: the GEMM's FLOPs / (GEMM + copies) time)."""
    df = _csv(H200 / "power_mix.csv")
    out = []
    for rid in df.loc[df["what"] == "mix", "run_id"].unique():
        share, copies = re.search(r"share ([\d.]+) \((\d+) x", rid).groups()
        out.append({"share": float(share), "copies": int(copies), **phase_summary(df, "mix", rid)})
    return out


def accumulate_rows() -> list[dict]:
    """Per wgrad shape of power_mix.csv: phase_summary of the bf16-out GEMM ('bf16') and of the same GEMM added
    into an fp32 gradient ('fp32')."""
    df = _csv(H200 / "power_mix.csv")
    return [{"shape": rid, "bf16": phase_summary(df, "wgrad_bf16_out", rid),
             "fp32": phase_summary(df, "wgrad_fp32_accumulate", rid)}
            for rid in df.loc[df["what"] == "wgrad_bf16_out", "run_id"].unique()]


def mix_lines() -> list[str]:
    """Markdown: the mix and accumulate rows as measured, each with one sentence of what they say."""
    rows = mix_rows()
    out = ["**GEMM share (H200, power_mix.csv `mix`)**: the 8192^3 GEMM with 256 MiB copies between, at the GEMMs' "
           "share of the cold time; TFLOP/s = the GEMM's FLOPs / (GEMM + copies) time.", "",
           "| GEMM share | copies per GEMM | cold TFLOP/s | sustained TFLOP/s | sustained / cold | sustained SM clock "
           "MHz | sustained power W |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        c, u = r["cold"], r["sustained"]
        out.append(f"| {r['share']:g} | {r['copies']} | {c['tflops']:.0f} | {u['tflops']:.0f} | "
                   f"{u['tflops'] / c['tflops']:.3f} | {u['clock']:.0f} | {u['power']:.0f} |")
    lo, hi = rows[0], rows[-1]
    out += ["", f"At the 700 W limit the GEMM alone keeps {lo['sustained']['tflops'] / lo['cold']['tflops']:.3f} of "
            f"its cold rate, at a GEMM share of {hi['share']:g} {hi['sustained']['tflops'] / hi['cold']['tflops']:.3f}"
            f": copies between the GEMMs let the SM clock stay higher ({lo['sustained']['clock']:.0f} -> "
            f"{hi['sustained']['clock']:.0f} MHz, all near 700 W), so a step's memory-bound kernels shield its "
            "GEMMs from most of the power-limit slowdown.", "",
            "**Weight-gradient GEMMs (H200, power_mix.csv `accumulate`)**: dW = dYᵀ·X over 4096 tokens, bf16 out "
            "against `addmm` into an fp32 gradient (Megatron's gradient_accumulation_fusion).", "",
            "| shape (out x in x tokens) | bf16 out: cold / sustained TFLOP/s | fp32 accumulate: cold / sustained "
            "TFLOP/s | fp32 / bf16 time, sustained |", "|---|---|---|---|"]
    ratios = []
    for r in accumulate_rows():
        b, a = r["bf16"], r["fp32"]
        ratios.append(a["sustained"]["s"] / b["sustained"]["s"])
        out.append(f"| {r['shape']} | {b['cold']['tflops']:.0f} / {b['sustained']['tflops']:.0f} | "
                   f"{a['cold']['tflops']:.0f} / {a['sustained']['tflops']:.0f} | {ratios[-1]:.3f} |")
    out += ["", f"Adding into fp32 makes these compute-bound GEMMs {100 * (min(ratios) - 1):.0f}-"
            f"{100 * (max(ratios) - 1):.0f} % slower at the power limit; parasim charges the fp32 read and write only "
            "in the weight GEMM's memory roofline (cost/compute.py `_gemm_times`), which these shapes never reach.", ""]
    return out


# ---- SDPA ----------------------------------------------------------------------------------------------------------
def sdpa_rows(path: Path) -> list[dict]:
    """The causal, fused-backend points of an sdpa.csv (status ok), typed as gpu_attention_report.measured_rows."""
    import csv

    out = []
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["status"] == "ok" and r["causal"] == "True" and r["backend"] in SDPA_BACKENDS:
                out.append({"backend": r["backend"], "shape": r["shape"], "causal": True,
                            **{k: int(r[k]) for k in ("batch", "heads", "seq", "head_dim")},
                            **{k: float(r[k]) for k in ("fwd_kernel_s", "bwd_kernel_s", "fwd_tflops", "bwd_tflops")}})
    return out


def _sdpa_key(r: dict) -> tuple:
    return r["backend"], r["shape"], r["batch"], r["heads"], r["seq"], r["head_dim"]


@lru_cache(maxsize=2)
def sdpa_compared(preset: str = PRESET) -> tuple[dict, ...]:
    """The H200's points with `preset`'s predicted times and errors (gpu_attention_report.compared) and the H100
    lease 2's kernel times at the same point (`h100_fwd_s`, `h100_bwd_s`; NaN where it has none)."""
    from gpu_attention_report import compared

    h100 = {_sdpa_key(r): r for r in sdpa_rows(ROOT / H100_LEASES[0] / "sdpa.csv")}
    nan = {"fwd_kernel_s": float("nan"), "bwd_kernel_s": float("nan")}
    return tuple({**r, "h100_fwd_s": h100.get(_sdpa_key(r), nan)["fwd_kernel_s"],
                  "h100_bwd_s": h100.get(_sdpa_key(r), nan)["bwd_kernel_s"]}
                 for r in compared(_hw(preset), sdpa_rows(H200 / "sdpa.csv")))


def sdpa_ratios(backend: str, pas: str, shape: str | None = None, preset: str = PRESET) -> dict:
    """{'predicted_over_h200', 'h200_over_h100', 'predicted_over_h100'}: per-point time ratios of `backend`'s `pas`
    ('fwd' / 'bwd'), `shape` one family or None for both (the H100: lease 2's time at the same point)."""
    rs = [r for r in sdpa_compared(preset) if r["backend"] == backend and shape in (None, r["shape"])]
    return {"predicted_over_h200": [1.0 + r[f"err_{pas}"] for r in rs],
            "h200_over_h100": [r[f"{pas}_kernel_s"] / r[f"h100_{pas}_s"] for r in rs],
            "predicted_over_h100": [r[f"pred_{pas}_s"] / r[f"h100_{pas}_s"] for r in rs]}


def sdpa_lines() -> list[str]:
    """Markdown: per backend, shape family and pass, dgx-h200 predicted / H200 measured and H200 / H100 kernel time."""
    from gpu_attention_report import BACKEND_KERNEL

    from simulator.cost.attention import attention_table_names

    hw = _hw()
    out = ["### SDPA: H200 against dgx-h200's attention tables and the H100", "",
           "validation/gpu_owed.py --stages sdpa: bf16 causal `scaled_dot_product_attention` per forced backend, "
           "kernel time by CUPTI (backward = forward + backward call - forward call); 16k tokens per call (seq "
           "512-16k, head dim 64/128) and the batch 1-8 x 8-32 heads x seq 1k/4k grid (head dim 128). Predicted: "
           "gpu_attention_report.call_times (the torchtitan stack with the backend's parasim kernel). Cells: median "
           "(range) of per-point time ratios.", "",
           "| backend | parasim kernel: fwd / bwd tables | points | shapes | fwd: predicted / H200 | bwd: predicted / "
           "H200 | fwd: H200 / H100 lease 2 | bwd: H200 / H100 lease 2 |", "|---|---|---|---|---|---|---|---|"]
    for be in SDPA_BACKENDS:
        k = BACKEND_KERNEL[be]
        tables = " / ".join(f"`{t}`" for t in attention_table_names(hw, k, 128))
        for shape in ("16k-tokens", "grid", None):
            f, b = sdpa_ratios(be, "fwd", shape), sdpa_ratios(be, "bwd", shape)
            out.append(f"| {be} | `{k}`: {tables} | {len(f['predicted_over_h200'])} | {shape or 'both'} | "
                       f"{_cell(f['predicted_over_h200'])} | {_cell(b['predicted_over_h200'])} | "
                       f"{_cell(f['h200_over_h100'])} | {_cell(b['h200_over_h100'])} |")
    on_h100 = "; ".join(f"{be} {_stats(sdpa_ratios(be, 'fwd')['predicted_over_h100'])[1]:.3f} / "
                        f"{_stats(sdpa_ratios(be, 'bwd')['predicted_over_h100'])[1]:.3f}" for be in SDPA_BACKENDS[:2])
    out += ["", f"The same predictions over the H100 lease 2's times at these points (fwd / bwd, median): {on_h100}. "
            "The memory-efficient backend reads dgx-h100's measured xFormers tables, which validation/"
            "h100_sdpa_tables.py writes into every preset of the H100 SXM's compute die (until 2026-11-28 dgx-h200 "
            "had none and read the generic FlashAttention-3 table: 0.28x / 0.25x the H200's time at 16k tokens).",
            ""]
    return out


def lines() -> list[str]:
    """Every section, in order."""
    return gemm_lines() + memory_lines() + power_lines() + sdpa_lines()


def main(argv=None) -> int:
    print("\n".join(lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
