"""Decode attention's own memory table, fitted to NVIDIA's published cuDNN decode kernels.

    python validation/decode_attention_tables.py            # the held-out check and the sections
    python validation/decode_attention_tables.py --write    # write [efficiency.memory_decode_attention]
    python validation/decode_attention_tables.py --check    # exit 1 if a preset's section differs

parasim times one layer's decode attention as one kernel streaming the layer's KV cache (cost/inference.py
`decode_attention`). On the generic memory table (torch's add and SiLU, or a transfer of them) the published cuDNN
decode kernels below 100 MB ran 19-40 % slower than predicted: a decode kernel at batch 1 spends ~6 µs whatever it
reads (a split-KV pass and its reduction over paged blocks), twice the elementwise kernels' fixed cost. This fits
the kernel's own curve, efficiency(bytes) = bytes / (time · the GPU's HBM peak), one knot per decade of bytes
(calibrate/fit.py `fit_efficiency_curve`, weighted least squares on relative error), to each GPU's published kernels
(validation/data/cudnn_decode.csv: cuDNN 9.27, bf16 paged KV cache, one query token, 64 query heads over 8 KV heads,
head dim 128, batch 1-128, context 2k-128k; 16 each on an H200, B200, GB200 and GB300, 15 on an A100 80GB PCIe), and
writes it into the presets of that GPU (`SOURCES`; the A100 SXM presets take the PCIe card's share of its peak).

Held out (`held_out`): the same fit on the 2k- and 32k-token kernels predicts the 8k- and 128k-token ones. Presets
of other GPUs (the H100's among them: no decode kernel of theirs is published) keep the memory table.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

from cudnn_decode_check import rows, shape  # noqa: E402
from h100_gemm_table import preset_cli, rewrite_presets  # noqa: E402

NAME = "memory_decode_attention"
# preset -> the GPU whose published kernels it holds (the B300 is the GB300's die, the P6 a B200 node; the A100 SXM
# presets the 80 GB PCIe card's kernels)
SOURCES = {"dgx-h200": "H200", "dgx-b200": "B200", "aws-p6-b200": "B200", "gb200-nvl72": "GB200",
           "gb300-nvl72": "GB300", "b300": "GB300", "dgx-a100-80g": "A100 PCIe", "jean-zay-a100": "A100 PCIe"}
# the HBM peak of a published GPU no preset describes: the curve is its kernels' share of their own GPU's peak, taken to
# hold on the presets' part [assumption] (NVIDIA A100 datasheet: 80 GB PCIe 1,935 GB/s, SXM 2,039 GB/s)
OWN_PEAK = {"A100 PCIe": 1.935e12}
NOTES = {"A100 PCIe": "the A100 80GB PCIe card's kernels as a share of its 1,935 GB/s, taken to hold on the SXM "
                      "part's 2,039 GB/s [assumption]; "}
FIT_CONTEXTS, HELD_CONTEXTS = (2048, 32768), (8192, 131072)


def points(gpu: str, contexts=None) -> list[tuple[float, float, dict]]:
    """(bytes, seconds, row) of the GPU's published kernels: the bytes decode_attention reads and writes for the
    row's shape (the K and V cache, Q and O), the kernel's measured time."""
    from simulator.cost.inference import decode_attention
    from simulator.spec.hardware import load_hardware

    hw = load_hardware(next(p for p, g in SOURCES.items() if g == gpu))
    out = []
    for r in rows():
        if r["gpu"] != gpu or (contexts and int(r["kv_len"]) not in contexts):
            continue
        model, tr, b, c = shape(r)
        cost = decode_attention(model, tr, hw, batch=b, context=c)
        out.append((float(cost.kv_bytes + cost.activation_bytes), float(r["time_ms"]) * 1e-3, r))
    return out


def fit(gpu: str, contexts=None):
    """The CurveFit of the GPU's kernels (all of them, or those at `contexts` tokens), as a share of the HBM peak of
    the GPU's presets."""
    from simulator.calibrate.fit import fit_efficiency_curve

    peak = _peak(gpu)
    pts = points(gpu, contexts)
    return fit_efficiency_curve([b for b, _, _ in pts], [b / (t * peak) for b, t, _ in pts], name=NAME,
                                x_unit="bytes moved by one kernel", source=source(gpu), per_decade=1.0)


def _peak(gpu: str) -> float:
    """The HBM peak the GPU's kernels are a share of: its own (OWN_PEAK), else its presets'."""
    from simulator.spec.hardware import load_hardware

    return OWN_PEAK.get(gpu) or load_hardware(next(p for p, g in SOURCES.items() if g == gpu)).hbm_bytes_per_s


def source(gpu: str) -> str:
    commit = next(r["commit"] for r in rows() if r["gpu"] == gpu)
    return (f"{NOTES.get(gpu, '')}fitted to NVIDIA's published cuDNN 9.27 decode attention kernels on an NVIDIA {gpu} "
            f"(NVIDIA/cudnn-frontend {commit[:9]} benchmark/attention_inference decode_sweep: bf16 paged KV cache, 64 "
            "query / 8 KV heads, head dim 128, batch 1-128, context 2k-128k), bytes / (time x HBM peak), one knot per "
            "decade; validation/decode_attention_tables.py")


def held_out() -> list[dict]:
    """Per held-out kernel: the fit of the 2k- and 32k-token kernels against the 8k- and 128k-token ones."""
    import numpy as np

    from simulator.calibrate.fit import efficiency_at

    out = []
    for gpu in dict.fromkeys(SOURCES.values()):
        f = fit(gpu, FIT_CONTEXTS)
        peak = _peak(gpu)
        for b, t, r in points(gpu, HELD_CONTEXTS):
            eff = float(efficiency_at(np.array(f.x), np.array(f.efficiency), np.array([b]))[0])
            out.append({"gpu": gpu, "batch": int(r["batch"]), "context": int(r["kv_len"]), "bytes": b,
                        "measured_s": t, "predicted_s": b / (peak * eff)})
    return out


def held_out_lines() -> list[str]:
    """Markdown: the held-out error by GPU."""
    c = held_out()
    out = ["| GPU | held-out kernels (8k, 128k tokens) | median abs error | max abs error | signed range |",
           "|---|---|---|---|---|"]
    for gpu in dict.fromkeys(SOURCES.values()):
        e = [r["predicted_s"] / r["measured_s"] - 1 for r in c if r["gpu"] == gpu]
        out.append(f"| {gpu} | {len(e)} | {100 * median(map(abs, e)):.1f} % | {100 * max(map(abs, e)):.1f} % | "
                   f"{100 * min(e):+.1f} to {100 * max(e):+.1f} % |")
    return out


def section(preset: str) -> str:
    f = fit(SOURCES[preset])
    return (f"[efficiency.{NAME}]\nx = [{', '.join(f'{x:.4g}' for x in f.x)}]\n"
            f"efficiency = [{', '.join(f'{e:.4f}' for e in f.efficiency)}]\n"
            f'x_unit = "{f.x_unit}"\nsource = "{f.source}"\n')


_PATTERN = re.compile(rf"\[efficiency\.{NAME}\]\n(?:[^\[\n][^\n]*\n)*")
_AFTER = re.compile(r"\[efficiency\.memory\]\n(?:[^\[\n][^\n]*\n)*")


def render(text: str, preset: str) -> str:
    """The preset's TOML with its decode attention section after [efficiency.memory] (an earlier copy removed)."""
    text = _PATTERN.sub("", text, count=1)
    m = _AFTER.search(text)
    text = text[:m.end()] + ("" if m.group(0).endswith("\n\n") else "\n") + section(preset) + "\n" + text[m.end():]
    return re.sub(r"\n{3,}", "\n\n", text)


def write() -> list[str]:
    return rewrite_presets(render, tuple(SOURCES), write=True)


def check() -> list[str]:
    return rewrite_presets(render, tuple(SOURCES), write=False)


def report(_argv) -> None:
    print("\n".join(["# held out", *held_out_lines()]))
    for preset in SOURCES:
        print(f"# {preset}\n{section(preset)}")


def main(argv=None) -> int:
    return preset_cli(argv, f"[efficiency.{NAME}] sections", write, check, report)


if __name__ == "__main__":
    sys.exit(main())
