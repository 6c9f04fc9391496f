"""The Blackwell presets' attention tables, causal, from the one published causal Blackwell measurement.

    python validation/blackwell_attention.py            # print the sections
    python validation/blackwell_attention.py --write    # write them into the Blackwell presets
    python validation/blackwell_attention.py --check    # exit 1 if a preset differs

The cost model reads `[efficiency.attention]` and `[efficiency.attention_bwd]` as causal work (cost/attention.py
times causal-halved FLOPs with them, as dgx-h100's causal tables). The Blackwell presets held the non-causal
FlashAttention (CuTe, SM100) point with a non-causal length shape: at 8k tokens 8 % (forward) and 11 %
(backward) faster than the same kernel runs causal work, more at short lengths.

Now: the causal point of the same benchmark (Dao-AILab/flash-attention PR #2280, 2026-02-27, head dim 128,
sequence 8192, batch 4, 16 heads, causal: forward 1418.1 TFLOP/s, backward 1208.6 with the 2-CTA path the PR
enables) over the B200's dense peak, and the length shape of the FlashAttention-3 causal curves that dgx-h100
holds (`attention_flash3`, `attention_bwd_flash3`) scaled to that point [derived: the Blackwell kernel's
fall-off at short lengths is taken to be the Hopper kernel's].
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PROFILES = ROOT.parent / "hardware_profiles"
sys.path.insert(0, str(ROOT.parent))

B200_PEAK_TFLOPS = 2250.0  # the dgx-b200 preset's dense bf16 peak, the benchmark's GPU
CAUSAL_8K_TFLOPS = {"attention": 1418.1, "attention_bwd": 1208.6}  # PR #2280, hdim 128, seqlen 8192, causal
SHAPE = {"attention": "attention_flash3", "attention_bwd": "attention_bwd_flash3"}  # dgx-h100's causal FA3 curves
PRESETS = ("dgx-b200", "aws-p6-b200", "gb200-nvl72", "b300", "gb300-nvl72")
POINT_X = 8192
COPIED = {"b300": "dgx-b200", "gb300-nvl72": "gb200-nvl72"}  # Blackwell Ultra: the B200's tables, said so


def table(kind: str) -> tuple[list[float], list[float]]:
    """Knots (sequence length) and efficiencies: the H100 causal shape scaled to the Blackwell causal point."""
    from simulator.spec.hardware import load_hardware

    x, e = load_hardware("dgx-h100").efficiency_curve(SHAPE[kind])
    at = dict(zip(x, e))[POINT_X]
    point = CAUSAL_8K_TFLOPS[kind] / B200_PEAK_TFLOPS
    return [float(v) for v in x], [round(float(v) * point / at, 3) for v in e]


def section(preset: str, kind: str) -> str:
    x, e = table(kind)
    what = "forward" if kind == "attention" else "backward (2-CTA path)"
    src = (f"FlashAttention (CuTe, SM100) on a B200, causal {what}, head dim 128, seqlen 8192, batch 4, 16 heads: "
           f"{CAUSAL_8K_TFLOPS[kind]} TFLOP/s (Dao-AILab/flash-attention PR #2280 benchmark, 2026-02-27) / "
           f"{B200_PEAK_TFLOPS:g} B200 dense peak = {CAUSAL_8K_TFLOPS[kind] / B200_PEAK_TFLOPS:.3f} at 8k; the length "
           f"shape is dgx-h100's FlashAttention-3 causal curve ({SHAPE[kind]}) scaled to that point [derived]; "
           "validation/blackwell_attention.py.")
    if preset in COPIED:
        src = (f"assumed: as {COPIED[preset]} [efficiency.{kind}] (no Blackwell Ultra attention benchmark found; its "
               "doubled SFU exponent throughput, NVIDIA blog, is not credited): " + src)
    return (f"[efficiency.{kind}]\nx = [{', '.join(f'{v:g}' for v in x)}]\n"
            f"efficiency = [{', '.join(f'{v:.3f}' for v in e)}]\n"
            'x_unit = "sequence length (keys per query), head dim 128, causal"\n'
            f'source = "{src}"\n')


def _section_re(kind: str):
    return re.compile(r"\[efficiency\.%s\]\n(?:[^\[\n][^\n]*\n)*" % kind)


def write(preset: str, kind: str) -> bool:
    path = PROFILES / f"{preset}.toml"
    text = path.read_text()
    new = _section_re(kind).sub(lambda _: section(preset, kind), text, count=1)
    if new != text:
        path.write_text(new)
    return new != text


def check() -> list[str]:
    bad = []
    for preset in PRESETS:
        text = (PROFILES / f"{preset}.toml").read_text()
        for kind in CAUSAL_8K_TFLOPS:
            m = _section_re(kind).search(text)
            if m is None or m.group(0) != section(preset, kind):
                bad.append(f"{preset} [efficiency.{kind}]")
    return bad


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        bad = check()
        print("stale: " + ", ".join(bad) if bad else "ok")
        return 1 if bad else 0
    for preset in PRESETS:
        for kind in CAUSAL_8K_TFLOPS:
            if "--write" in argv:
                print(("wrote " if write(preset, kind) else "unchanged ") + f"{preset} [efficiency.{kind}]")
            else:
                print(f"# {preset}\n{section(preset, kind)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
