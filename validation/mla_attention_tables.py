"""cuDNN attention tables for multi-head latent attention (DeepSeek-V3: head dim 192 for QKᵀ, 128 for A·V), from
NVIDIA's published cuDNN SDPA training benchmarks.

    python validation/mla_attention_tables.py            # the ratios by release and the TOML sections
    python validation/mla_attention_tables.py --write    # write the `_hd192` sections into the presets
    python validation/mla_attention_tables.py --check    # exit 1 if a preset's sections differ

A model's attention kernel is timed from the table of its QK head dim (cost/attention.py `attention_efficiency`);
the presets' cuDNN tables held head dims 128 (and 64, 256 on the GH100 SXM presets), so DeepSeek-V3's 192 read the
head-dim-128 table on Blackwell and a log2 interpolation between 128 and 256 on Hopper. NVIDIA's benchmark publishes
DeepSeek-V3's own attention shape (validation/data/cudnn_sdpa.csv, `head_dim` 192, `head_dim_v` 128: 128 heads,
causal, forward and backward timed alone) beside Llama 3.1's head-dim-128 shape in the same releases, on the same
GPUs: cuDNN 9.18 and 9.19 on the GB200 and GB300, 9.19 on the H200, 9.22 on the GB200 and GB300. At equal work the
latent shape's forward runs at about the rate of head dim 128 and its backward 2-18 % slower (`ratio_lines`), where
the interpolation towards 256 had made both faster.

Each table is its preset's head-dim-128 table of the same release times the measured ratio of the two shapes,

    eta_192(s) = eta_128(s) * [eta_mla(s) / eta_128,published(s)]    (same GPU, release and pass),

each eta the benchmark's time against parasim's executed FLOPs (forward 2·b·h·(d_qk + d_v)·s²/2, backward
2·b·h·(3·d_qk + 2·d_v)·s²/2: cost/flops.py attention_ops, the benchmark's own convention) over the cost/attention.py
`causal_occupancy` of its grid on the preset's SMs; the ratio linear in log2(s) between the published lengths
(2048-32768) and constant outside. So a Blackwell release table keeps its own curve and, at the published lengths,
becomes the latent shape's own rate; the Hopper presets with the lent H100's cuDNN tables (measured under cuDNN
9.19: h100_attention_tables.py) take the H200's 9.19 ratio. Written: the Blackwell presets' default tables and every
release table whose release publishes the latent shape on the preset's die (9.18, 9.19, 9.22:
cudnn_sdpa_tables.releases); older releases (9.10-9.17) keep reading head dim 128 [not published]. The cuDNN
9.18-9.19 and H200 files time the latent shape only with the deterministic backward (the data's `deterministic`),
read here as the backward's rate [assumption: on the GB200 under 9.22, the one release timing both, the two are
within -8 % to +4 % of each other].
The table stands for head dim 192 whatever d_v; only the latent shape (d_v 128) is published.
"""
from __future__ import annotations

import csv
import math
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))
import cudnn_sdpa_tables as T  # noqa: E402
from h100_attention_tables import ASSUMED_AS  # noqa: E402  (the Hopper presets that take dgx-h200's cuDNN tables)
from h100_gemm_table import GH100_SXM, preset_cli, rewrite_presets  # noqa: E402
from simulator.cost.attention import Q_TILE, causal_occupancy  # noqa: E402

D_QK, D_V = 192, 128
HOPPER_RELEASE = ("H200", 91901)  # the lent H100's cuDNN tables were measured under cuDNN 9.19
HOPPER = GH100_SXM + tuple(ASSUMED_AS)
PRESETS = tuple(T.SOURCES) + HOPPER
KERNEL = "cudnn"
ANCHOR = "[efficiency.memory]"  # the sections go just before it (after every attention table's generator's)


def _mla_rows(gpu: str, version: int) -> list[dict]:
    return [r for r in csv.DictReader(open(T.DATA))
            if r["gpu"] == gpu and int(r["cudnn_version"]) == version and r["backend"] in T.KERNELS[KERNEL]
            and r["causal"] == "True" and int(r["head_dim"]) == D_QK and int(r["head_dim_v"]) == D_V]


def published_releases(gpu: str | None = None) -> list[tuple[str, int]]:
    """(GPU, cuDNN version) pairs that publish the latent shape (and, as every release does, head dim 128)."""
    got = {(r["gpu"], int(r["cudnn_version"])) for r in csv.DictReader(open(T.DATA))
           if int(r["head_dim"]) == D_QK and int(r["head_dim_v"]) == D_V}
    return sorted(g for g in got if gpu is None or g[0] == gpu)


def _eff(b, h, s, d, dv, ms: float, backward: bool, sms: int) -> float:
    """Executed FLOP/s of one timed pass over its grid's occupancy (the peak cancels in a ratio)."""
    scores = s * s / 2.0
    flops = 2.0 * b * h * scores * ((3 * d + 2 * dv) if backward else (d + dv))
    return flops / (ms * 1e-3) / float(causal_occupancy(b * h, math.ceil(s / Q_TILE), sms, d))


def ratios(gpu: str, version: int, sms: int) -> dict[str, dict[int, float]]:
    """{pass: {seq: latent-shape rate / head-dim-128 rate}} of one release on one GPU, at the lengths both publish."""
    base = {int(r["seq_len"]): r for r in T.rows(gpu, version)}
    out: dict[str, dict[int, float]] = {"fwd": {}, "bwd": {}}
    for r in _mla_rows(gpu, version):
        s = int(r["seq_len"])
        if s not in base:
            continue
        q = base[s]
        for p in out:
            mla = _eff(float(r["batch"]), float(r["heads"]), s, D_QK, D_V, float(r[f"{p}_ms"]), p == "bwd", sms)
            ref = _eff(q["batch"], q["heads"], s, 128, 128, q[f"{p}_ms"], p == "bwd", sms)
            out[p][s] = mla / ref
    return {p: dict(sorted(v.items())) for p, v in out.items()}


def _ratio_at(r: dict[int, float], s: float) -> float:
    xs = sorted(r)
    return float(np.interp(math.log2(s), [math.log2(x) for x in xs], [r[x] for x in xs]))


def _sm_count(preset: str) -> int:
    from simulator.spec.hardware import load_hardware

    return load_hardware(preset).sm_count


def tables(preset: str) -> dict[str, tuple[list[float], list[float], tuple[str, int]]]:
    """{hd192 table name: (knots, efficiencies, (GPU, version) of the ratio)} of one preset."""
    from simulator.spec.hardware import load_hardware

    hw, sms = load_hardware(preset), _sm_count(preset)
    if preset in HOPPER:
        plan = [("", HOPPER_RELEASE)]
    else:
        die = set(T.DIES[preset])
        held = {v: gpu for gpu, v in T.releases(preset)}
        plan = [("", T.SOURCES[preset])] + [(T.release_name("", v), (held[v], v)) for v in sorted(held)
                                             if (held[v], v) in published_releases() and held[v] in die]
    out = {}
    for suffix, release in plan:
        r = ratios(*release, sms)
        for p, name, _ in T.PASSES:
            base = name + suffix
            x, e = hw.efficiency_curve(base)
            out[f"{base}_hd{D_QK}"] = (list(x), [float(v) * _ratio_at(r[p], s) for s, v in zip(x, e)], release)
    return out


def source(preset: str, name: str, release: tuple[str, int]) -> str:
    gpu, v = release
    rel = _mla_rows(gpu, v)[0]
    base = name.removesuffix(f"_hd{D_QK}")
    det = " (deterministic backward [assumption: its rate])" if rel["deterministic"] == "True" else ""
    return (f"derived from published kernel benchmarks: this preset's [efficiency.{base}] (head dim 128) times the "
            f"rate of DeepSeek-V3's multi-head latent attention (head dim {D_QK} for QK, {D_V} for AV, "
            f"{rel['batch']} x {rel['heads']} heads, causal{det}) over Llama 3.1's head-dim-128 attention in the "
            f"same release on the same GPU: NVIDIA cuDNN frontend benchmark/sdpa_benchmark_training, cuDNN "
            f"{v // 10000}.{v // 100 % 100} on an NVIDIA {gpu} ({rel['commit']}, {rel['date']}: {rel['path']}), "
            "both in parasim's executed FLOPs over cost/attention.py causal_occupancy of their grids, linear in "
            "log2(tokens) between the published lengths, constant outside; validation/data/cudnn_sdpa.csv, "
            "validation/mla_attention_tables.py")


def section(preset: str, name: str) -> str:
    x, e, release = tables(preset)[name]
    return (f"[efficiency.{name}]\n"
            f"x = [{', '.join(f'{s:g}' for s in x)}]\n"
            f"efficiency = [{', '.join(f'{v:.4f}' for v in e)}]\n"
            f'x_unit = "sequence length (keys per query), head dim {D_QK} (latent attention: {D_V} for AV), causal"\n'
            f'source = "{source(preset, name, release)}"\n')


def render(text: str, preset: str) -> str:
    """The preset's TOML with its `_hd192` cuDNN sections just before [efficiency.memory] (earlier copies removed)."""
    names = list(tables(preset))
    for name in names:
        text = re.sub(rf"\[efficiency\.{re.escape(name)}\]\n(?:[^\[\n][^\n]*\n)*\n?", "", text, count=1)
    at = text.index(ANCHOR)
    return text[:at] + "".join(section(preset, n) + "\n" for n in names) + text[at:]


def write() -> list[str]:
    return rewrite_presets(render, PRESETS, write=True)


def check() -> list[str]:
    return rewrite_presets(render, PRESETS, write=False)


def ratio_lines() -> list[str]:
    """Markdown: the latent shape's rate over head dim 128's, by release and length (occupancy on the GPU's preset)."""
    sms = {"GB200": _sm_count("gb200-nvl72"), "GB300": _sm_count("gb300-nvl72"), "H200": _sm_count("dgx-h200")}
    out = ["| GPU | cuDNN | backward timed | tokens | forward | backward |", "|---|---|---|---|---|---|"]
    for gpu, v in published_releases():
        r = ratios(gpu, v, sms[gpu])
        det = "deterministic" if _mla_rows(gpu, v)[0]["deterministic"] == "True" else "default"
        for s in r["fwd"]:
            out.append(f"| {gpu} | {v // 10000}.{v // 100 % 100} | {det} | {s} | {r['fwd'][s]:.3f} | "
                       f"{r['bwd'][s]:.3f} |")
    return out


def report(_argv) -> None:
    print("\n".join(ratio_lines()))
    for preset in PRESETS:
        for name in tables(preset):
            print(f"# {preset}\n{section(preset, name)}")


def main(argv=None) -> int:
    return preset_cli(argv, f"[efficiency.attention_cudnn*_hd{D_QK}] sections", write, check, report)


if __name__ == "__main__":
    sys.exit(main())
