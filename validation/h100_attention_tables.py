"""The GH100 SXM presets' cuDNN attention tables, from the attention microbenchmarks measured on the lent H100.

    python validation/h100_attention_tables.py            # the TOML sections
    python validation/h100_attention_tables.py --write    # write them into the GH100 SXM presets
    python validation/h100_attention_tables.py --check    # exit 1 if a preset's sections differ

The presets: dgx-h100 and those of the same compute die at the same 700 W limit (h100_gemm_table.py GH100_SXM:
gcp-a3-mega, dgx-h200, dgx-h800), which held the published cuDNN chart until 2026-11-27 while dgx-h100 held these.

Reads the causal scaled-dot-product-attention points of both H100 calibrations
(`validation/h100/calib_points.csv`, `calib_points2.csv`: torch 2.11 SDPA, which dispatched cuDNN's
fused attention there, batch 1, 32 heads, head dim 64 and 128, 512-32768 tokens, forward and forward +
backward, CUDA events; protocol in validation/h100/README.md) and prints the `[efficiency.attention_cudnn*]`
and `[efficiency.attention_bwd_cudnn*]` sections of hardware_profiles/dgx-h100.toml, in the FLOP convention
cost/compute.py reads (forward 4·b·h·s²·d / 2 causal; backward 2.5 × forward, FlashAttention's recompute
of S included):

- Each point's efficiency = FLOPs / (time · 989.4 TFLOP/s) / occ, the faster of the two calibrations per point
  (the rule of the preset's other measured tables: a kernel's slow timings come from clocks and
  interference); occ = cost/attention.py `causal_occupancy` of the measured grid (1 × 32 heads), which the
  cost model multiplies back in: a table holds the rate at the published benchmarks' grid (0.93 of it at 4096
  tokens, 1 from 8192, before 2026-11-27 taken as 1).
- Measured lengths are used from `MIN_SEQ` = 4096 tokens up. Below it one call of batch 1 issues less
  GPU work than the host takes to issue the call (the shortest calls take 30-50 µs forward and 120-220 µs
  backward whatever their work), so the events time the host, not the kernel; at 4096 the timed call
  equals the kernel (backward 790-802 µs against the profiled `..._flash_bprop_...` kernel's 802 µs at the
  same shape, validation/h100/kernel_breakdown.csv). Below 4096 the table follows the published cuDNN
  causal forward chart's shape at the same head dim (FlashAttention-3 README figure, kernel_benchmarks.csv:
  kernel-only at full occupancy), anchored at the measured 4096 value: η(s) = η(4096) · chart(s) / chart(4096).
  The backward uses the forward chart's shape (no cuDNN backward by length is published).
- Head dim 256 (not measured here): the measured head dim 128 table times the 256/128 ratio of NVIDIA's published
  cuDNN 9.27 prefill kernels on an H200 at the same 32-head grid (`hd256_ratio`, each over its occupancy; the
  nearest published length's outside 2k-16k). Until 2026-11-28 the FlashAttention-3 chart's older fp16 cuDNN
  ratio (0.94 at 8k), with which those kernels were predicted 20-28 % slow.

No training step is used: the cuDNN kernels profiled in the harness's training steps
(validation/h100/kernel_breakdown.csv) are the check (`kernel_check`, docs/validation-h100.md,
tests/test_attention_head_dim.py).
"""
from __future__ import annotations

import csv
import math
import re
import sys
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
from simulator.calibrate.microbench import attention_forward_flops  # noqa: E402
from simulator.cost.attention import Q_TILE, causal_occupancy  # noqa: E402
from h100_gemm_table import same_die_note  # noqa: E402  (the GH100 SXM presets' note)
CALIB = (ROOT / "h100" / "calib_points.csv", ROOT / "h100" / "calib_points2.csv")
CHART = ROOT / "data" / "kernel_benchmarks.csv"
PREFILL = ROOT / "data" / "cudnn_prefill.csv"  # NVIDIA's published cuDNN prefill kernels (head dim 256 against 128)
PEAK = 989.4e12  # H100 SXM dense bf16 FLOP/s (NVIDIA datasheet)
SMS = 132  # H100 SXM streaming multiprocessors (dgx-h100's sm_count)
MIN_SEQ = 4096
SOURCE = ("measured: torch 2.11 scaled_dot_product_attention (cuDNN fused attention, "
          "cudnn_generated_fort_native_sdpa_sm90_flash_fprop/bprop) on one NVIDIA H100 80GB HBM3 SXM, two "
          "`parasim calibrate` leases (validation/h100/calib_points.csv, calib_points2.csv; faster of the two "
          "per point), batch 1, 32 heads, causal, from 4096 tokens, over cost/attention.py causal_occupancy of that "
          "grid; below 4096 the published cuDNN causal forward "
          "chart's shape at this head dim anchored at the measured 4096 point (FlashAttention-3 README figure, "
          "kernel_benchmarks.csv); validation/h100_attention_tables.py")


def measured() -> dict:
    """{(pass, head_dim, seq): efficiency}, the faster of the two calibrations."""
    best = {}
    for path in CALIB:
        for r in csv.DictReader(open(path)):
            if r["measurement"] != "attention" or r["causal"] != "True":
                continue
            b, h, s, d = (int(float(r[k])) for k in ("batch", "heads", "seq", "head_dim"))
            fl = attention_forward_flops(b, h, s, d) * (2.5 if r["pass"] == "bwd" else 1.0)
            key = (r["pass"], d, s)
            occ = float(causal_occupancy(b * h, math.ceil(s / Q_TILE), SMS, d))
            best[key] = max(best.get(key, 0.0), fl / float(r["time_s"]) / PEAK / occ)
    return best


def chart() -> dict:
    """{(head_dim, seq): TFLOP/s} of the published cuDNN causal forward on the H100 (fp16)."""
    out = {}
    for r in csv.DictReader(open(CHART)):
        if (r["kind"], r["gpu"], r["kernel"], r["causal"], r["direction"], r["dtype"]) == \
                ("attention", "H100-SXM5-80GB", "cudnn", "true", "fwd", "fp16"):
            out[int(r["head_dim"]), int(r["seq_len"])] = float(r["tflops"])
    return out


def hd256_ratio() -> dict:
    """{seq: η(head dim 256) / η(head dim 128)} at the same grid, from NVIDIA's published H200 prefill kernels
    (validation/data/cudnn_prefill.csv: cuDNN 9.27, one causal forward, batch 1 x 32 query heads, head dim 256
    (Qwen3.5) against head dim 128 (Llama 3.1 70B at TP 2), 2048-16384 tokens), each over its causal_occupancy."""
    rate = {}
    for r in csv.DictReader(open(PREFILL)):
        b, h, s, d = (int(r[k]) for k in ("batch", "heads", "q_tokens", "head_dim"))
        if r["gpu"] != "H200" or h != 32:
            continue
        occ = float(causal_occupancy(b * h, math.ceil(s / Q_TILE), SMS, d))
        rate[d, s] = attention_forward_flops(b, h, s, d) / float(r["time_ms"]) / occ
    return {s: rate[256, s] / rate[128, s] for (d, s) in sorted(rate) if d == 256}


def tables() -> dict:
    """{table name: {seq: efficiency}} (module docstring)."""
    m, c = measured(), chart()
    out = {}
    for pas, prefix in (("fwd", "attention_cudnn"), ("bwd", "attention_bwd_cudnn")):
        for d in (128, 64):
            long = {s: e for (p, dd, s), e in m.items() if p == pas and dd == d and s >= MIN_SEQ}
            short = {s: long[MIN_SEQ] * c[d, s] / c[d, MIN_SEQ] for (dd, s) in c if dd == d and s < MIN_SEQ}
            out[prefix + ("" if d == 128 else f"_hd{d}")] = dict(sorted({**short, **long}.items()))
        base = out[prefix]
        r = hd256_ratio()
        near = lambda s: min(r, key=lambda k: abs(math.log2(k / s)))  # noqa: E731 (the nearest published length)
        out[prefix + "_hd256"] = {s: e * r[near(s)] for s, e in base.items()}
    return out


def profiled_cudnn_kernels() -> dict:
    """{run_id: (forward s, backward s) per call} of the cuDNN SDPA kernels the torch profiler recorded in the
    H100 harness's training steps (validation/profile_step.py; a full-recompute run calls the forward twice)."""
    tot = {}
    for r in csv.DictReader(open(ROOT / "h100" / "kernel_breakdown.csv")):
        if r["category"] == "kernel:attention" and "cudnn_generated" in r["kernel"]:
            tot.setdefault(r["run_id"], [0.0, 0.0])[1 if "bprop" in r["kernel"] else 0] += float(r["time_s"])
    out = {}
    for run, (f, b) in tot.items():
        layers = int(re.match(r"L(\d+)-", run).group(1))
        out[run] = (f / (2 * layers if "-full-" in run else layers), b / layers)
    return out


def kernel_check(hardware) -> list[dict]:
    """Per profiled run: measured and predicted cuDNN attention per call (forward, backward) with the
    harness's stack (compare_train_steps.specs_for_row) on `hardware`."""
    sys.path.insert(0, str(ROOT))
    from compare_train_steps import specs_for_row
    from simulator.cost.compute import layer_op_times

    rows = []
    for run, (mf, mb) in profiled_cudnn_kernels().items():
        d = dict(re.findall(r"(?:^|-)([a-z]+|L)(\d+)", run))
        row = {"run_id": run, "dtype": "bf16", "hidden": int(d["h"]), "layers": int(d["L"]), "heads": int(d["a"]),
               "kv_heads": int(d["kv"]), "ffn_hidden": int(d["f"]), "vocab": 32000, "attention": "sdpa",
               "seq_len": int(d["s"]), "micro_batch": int(d["b"]), "recompute": "none"}
        m, tr, _ = specs_for_row(row)
        att = {o.name: o for o in layer_op_times(m, tr, hardware, micro_batch_size=row["micro_batch"])}["attention"]
        rows.append({"run_id": run, "head_dim": m.head_dim, "seq": row["seq_len"], "batch": row["micro_batch"],
                     "measured_fwd_s": mf, "measured_bwd_s": mb,
                     "predicted_fwd_s": float(att.forward_s), "predicted_bwd_s": float(att.backward_s)})
    return rows


def kernel_check_lines(profiles=(("dgx-h100", "shipped dgx-h100"), ("dgx-h100-datasheet", "dgx-h100-datasheet"))):
    """Markdown table of `kernel_check` for each profile (docs/validation-h100.md)."""
    from simulator.spec.hardware import load_hardware

    checks = {p: kernel_check(load_hardware(p)) for p, _ in profiles}
    head = "| run | head dim | measured fwd / bwd µs | " + " | ".join(f"{lab}: fwd / bwd µs (error)" for _, lab in profiles)
    out = [head + " |", "|---|---|---|" + "---|" * len(profiles)]
    errs = {p: [] for p, _ in profiles}
    for i, r in enumerate(checks[profiles[0][0]]):
        cells = []
        for p, _ in profiles:
            q = checks[p][i]
            ef, eb = q["predicted_fwd_s"] / q["measured_fwd_s"] - 1, q["predicted_bwd_s"] / q["measured_bwd_s"] - 1
            errs[p] += [ef, eb]
            cells.append(f"{1e6 * q['predicted_fwd_s']:.1f} / {1e6 * q['predicted_bwd_s']:.1f} "
                         f"({100 * ef:+.1f} % / {100 * eb:+.1f} %)")
        out.append(f"| {r['run_id']} | {r['head_dim']} | {1e6 * r['measured_fwd_s']:.1f} / {1e6 * r['measured_bwd_s']:.1f} | "
                   + " | ".join(cells) + " |")
    summ = "; ".join(f"{lab}: median {100 * median(map(abs, errs[p])):.1f} %, max {100 * max(map(abs, errs[p])):.1f} %"
                     for p, lab in profiles)
    return out + ["", f"Median / max |error| over the {len(errs[profiles[0][0]])} kernels: {summ}.", ""]


def kernel_check_section() -> list[str]:
    """The section of docs/validation-h100.md that checks the attention tables against the profiled kernels."""
    return ["## Attention kernels: the shipped tables against the profiled cuDNN kernels", "",
            "The torch profiler recorded cuDNN's SDPA kernels (`..._flash_fprop_...`, `..._flash_bprop_...`) in six "
            "SDPA runs (`validation/h100/kernel_breakdown.csv`; per call: a full-recompute run calls the forward twice). "
            "`dgx-h100` reads the measured cuDNN tables of `validation/h100_attention_tables.py` (the calibration "
            "microbenchmarks from 4096 tokens, where a call outlasts the host's issue time; below, the published cuDNN "
            "chart's shape) at the model's head dim; `dgx-h100-datasheet` reads the published charts (FlashAttention-3 "
            "README: cuDNN forward by head dim; FlashAttention-3's backward at head dim 128, scaled by the forward's "
            "head-dim ratio). No table was fitted to these kernels.", "",
            *kernel_check_lines(), *preset_gap_lines()]


def preset_gap_lines() -> list[str]:
    """Where the shipped preset's step error on the primary and held-out grids comes from: its GEMM, memory
    and optimizer tables are the faster calibration's per point, its attention the kernels alone."""
    import copy
    import tomllib

    import pandas as pd

    sys.path.insert(0, str(ROOT))
    from compare_train_steps import compare
    from simulator.spec.hardware import hardware_from_dict
    from simulator.spec.presets import read_toml, resolve

    ship = read_toml(resolve("hardware_profiles", "dgx-h100"))
    lease1 = tomllib.load(open(ROOT / "h100" / "lent-opt.toml", "rb"))["efficiency"]
    mixed = copy.deepcopy(ship)
    for k in ("gemm", "memory", "optimizer"):
        mixed["efficiency"][k] = lease1[k]
    cells = []
    for label, d in (("the shipped preset", ship), ("with the first lease's GEMM, memory and optimizer tables", mixed)):
        hw = hardware_from_dict(d, where=label)
        e = [compare(pd.read_csv(ROOT / "h100" / f), hw)["step_error"] for f in
             ("fused_persistent_gpu.csv", "fused_persistent_gpu-holdout.csv")]
        cells.append(f"{label}: median |error| {' / '.join(f'{100 * x.abs().median():.1f} %' for x in e)}, "
                     f"mean {' / '.join(f'{100 * x.mean():+.1f} %' for x in e)}")
    return ["**Why the shipped preset predicts less time than the calibrated profile** (primary / held-out grid, fused "
            "AdamW, persistent gradients): " + "; ".join(cells) + ". Its GEMM and optimizer tables are the faster "
            "of the two leases at each point, its memory table the kernels queued back to back on a fourth "
            "(validation/h100_memory_table.py); the training steps ran on the first and a third lease, where the "
            "kernels ran slower (finding 7): that spread between machines is the first part. The rest is the "
            "small kernels: the calibrated profile's attention and memory tables were timed one call at a time, "
            "and their short calls hold the host's issue of the call, which the shipped tables leave out as "
            "not the kernels' own time (the eager stack's launch bound counts the host); so the calibrated "
            "profile charges time that stood in for the harness's strided elementwise kernels while the shipped "
            "preset timed them as contiguous ones (finding 10; it now has a table of their own). Calibrate on the machine that runs the job "
            "(`parasim calibrate`).", ""]


# presets that take another preset's cuDNN tables as an assumption, saying so (tests/test_presets_2025.py)
ASSUMED_AS = {"h200-nvl": ("dgx-h200", "same GH100 die; fractions of the NVL's own lower-clock dense peak, no H200 "
                                        "NVL attention benchmark found")}


def sections(preset: str = "dgx-h100") -> str:
    text = []
    for name, vals in tables().items():
        d = name.rsplit("_hd", 1)[1] if "_hd" in name else "128"
        extra = "" if d != "256" else ("; head dim 256 not measured here: the head dim 128 table x the 256/128 ratio of "
                                       "NVIDIA's published cuDNN 9.27 prefill kernels on an H200 at 32 heads "
                                       "(validation/data/cudnn_prefill.csv; the nearest length's outside 2k-16k)")
        text.append(f"[efficiency.{name}]\nx = {list(vals)}\n"
                    f"efficiency = [{', '.join(f'{e:.4f}' for e in vals.values())}]\n"
                    f"x_unit = \"sequence length (keys per query), head dim {d}, causal\"\n"
                    f"source = \"{_assumed(preset, name)}{SOURCE}{extra}{same_die_note(preset)}\"\n")
    return "\n".join(text)


def _assumed(preset: str, name: str) -> str:
    """The source's opening words for a preset that takes the tables as an assumption (ASSUMED_AS), else ""."""
    if preset not in ASSUMED_AS:
        return ""
    other, why = ASSUMED_AS[preset]
    return f"assumed: as {other} [efficiency.{name}] ({why}): "


_GENERIC_BWD = re.compile(r"\[efficiency\.attention_bwd\]\n(?:[^\[\n][^\n]*\n)*\n?")


def preset_text(text: str, preset: str) -> str:
    """A preset's TOML with its cuDNN attention sections replaced by `sections(preset)`, placed after the generic
    `[efficiency.attention_bwd]` section (where dgx-h100 has them)."""
    for name in tables():  # its own sections only (mla_attention_tables.py writes the `_hd192` ones)
        text = re.sub(rf"\[efficiency\.{re.escape(name)}\]\n(?:[^\[\n][^\n]*\n)*\n?", "", text, count=1)
    m = _GENERIC_BWD.search(text)
    return text[:m.end()] + sections(preset) + "\n" + text[m.end():]


def _presets() -> tuple:
    from h100_gemm_table import GH100_SXM

    return (*GH100_SXM, *ASSUMED_AS)


def write() -> list[str]:
    from h100_gemm_table import rewrite_presets

    return rewrite_presets(preset_text, _presets(), write=True)


def check() -> list[str]:
    """The presets whose cuDNN attention sections are not the measured ones."""
    from h100_gemm_table import rewrite_presets

    return rewrite_presets(preset_text, _presets(), write=False)


if __name__ == "__main__":
    from h100_gemm_table import preset_cli

    sys.exit(preset_cli(None, "cuDNN attention sections", write, check, lambda _: sys.stdout.write(sections())))
