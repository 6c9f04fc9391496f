"""The Blackwell presets' cuDNN attention tables, from NVIDIA's published cuDNN SDPA training benchmarks.

    python validation/cudnn_sdpa_tables.py            # the releases, the tables against the old ones, the sections
    python validation/cudnn_sdpa_tables.py --write    # write [efficiency.attention_cudnn] / attention_bwd_cudnn
    python validation/cudnn_sdpa_tables.py --check    # exit 1 if a preset's sections differ

Megatron-LM runs its attention in Transformer Engine's fused attention, which is cuDNN's (stacks/megatron.toml
attention_kernel "cudnn"). The Blackwell presets had no cuDNN table, so the megatron stack read their generic
`attention` tables: FlashAttention (CuTe, SM100)'s causal rate at 8k tokens on a B200 with the H100 FlashAttention-3
curve's length shape (validation/blackwell_attention.py), a different kernel.

NVIDIA publishes cuDNN's own attention timings on Blackwell with each cuDNN frontend release
(validation/data/cudnn_sdpa.csv, transcribed by validation/cudnn_sdpa_extract.py: bf16, head dim 128, causal,
forward and backward, 128 query rows of 8 KV heads per call). Each table here is the newest training release
published for the preset's GPU die (`SOURCES`: the B200 presets read the GB200's, the B200's own being cuDNN 9.13 of
2025; the B300 the GB300's), as a fraction of that GPU's peak:

- efficiency(s) = FLOPs / (time · dense bf16 peak of the preset) / occupancy, FLOPs the benchmark's own (forward
  4·b·h·s²·d / 2 causal, backward 2.5 times that: cost/compute.py's convention); occupancy = cost/attention.py
  `causal_occupancy` of the benchmark's grid on the preset's SMs (1 where the preset gives no sm_count: every
  Blackwell preset but the B200's 148);
- from the shortest length the release's call outlasts the host (`MIN_SEQ` per backend: torch's SDPA path,
  `pyt_cudnn`, spends 0.1-0.3 ms per call whatever its work, so its points count from 8192 tokens; the frontend
  called directly, `cudnn` / `cudnn_fe`, from its shortest published length); below it, the shape of the same
  GPU family's earliest frontend-called release (`SHAPE`, which starts at 512 tokens) anchored at that point.

validation/cudnn_sdpa_checks.py checks them, and the tables measured on the lent H100, against the same benchmarks'
rows no table was built from (the H200's training rows, the H200's and B200's newer forward kernels).
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
from simulator.calibrate.microbench import attention_forward_flops  # noqa: E402
from simulator.cost.attention import Q_TILE, causal_occupancy  # noqa: E402

DATA = ROOT / "data" / "cudnn_sdpa.csv"
# preset -> (the GPU whose rows it reads, cuDNN version of the release): the newest training release published for
# that GPU's die (B200 and GB200 share one, B300 and GB300 another)
SOURCES = {"dgx-b200": ("GB200", 92200), "aws-p6-b200": ("GB200", 92200), "gb200-nvl72": ("GB200", 92200),
           "gb300-nvl72": ("GB300", 92200), "b300": ("GB300", 92200)}
# the GPUs of one die, whose releases each of its presets also holds by version (`release_name`): a job's container
# names its cuDNN, and the stack's cudnn_version picks the newest release published up to it (cost/attention.py)
DIES = {"dgx-b200": ("B200", "GB200"), "aws-p6-b200": ("B200", "GB200"), "gb200-nvl72": ("GB200", "B200"),
        "gb300-nvl72": ("GB300",), "b300": ("GB300",)}
# the earliest frontend-called release per GPU family, whose points start at 512 tokens: the shape below MIN_SEQ
SHAPE = {"B200": ("GB200", 91700), "GB200": ("GB200", 91700), "GB300": ("GB300", 91700)}
MIN_SEQ = {"pyt_cudnn": 8192, "pyt_flash_attention": 8192, "cudnn_fe": 512, "cudnn": 2048}
PEAK_PRESET = {"B200": "dgx-b200", "GB200": "gb200-nvl72", "GB300": "gb300-nvl72", "H200": "dgx-h200"}  # the GPU's peak
KERNELS = {"cudnn": ("pyt_cudnn", "cudnn_fe", "cudnn"), "flash2": ("pyt_flash_attention",)}  # the rows' backends


def passes(kernel: str = "cudnn") -> tuple:
    """(pass, table name, FLOPs over the forward's) of a kernel's two tables."""
    return (("fwd", f"attention_{kernel}", 1.0), ("bwd", f"attention_bwd_{kernel}", 2.5))


PASSES = passes("cudnn")
# torch's flash backend (FlashAttention-2, Ampere code on Blackwell): the newest release that publishes it per die
FLASH_SOURCES = {"dgx-b200": ("GB200", 91700), "aws-p6-b200": ("GB200", 91700), "gb200-nvl72": ("GB200", 91700),
                 "gb300-nvl72": ("GB300", 91700), "b300": ("GB300", 91700)}
FLASH_SHAPE = "dgx-h100"  # below MIN_SEQ: the length shape of this preset's FlashAttention-2 tables (published charts)
_B200 = ("the GB200's table (the same B200 GPU at a higher power limit): its rate as a fraction of the GB200's peak, "
         "taken to hold at this GPU's lower peak [assumption], checked on the B200's own published cuDNN 9.27 forward "
         "kernels (prefill, 64 heads, 2k-16k tokens: validation/cudnn_sdpa_checks.py); the B200's own training release "
         "is cuDNN 9.13 (2025-10, 0.52 forward and 0.42 backward at 8k), from before the 9.17 kernels; ")
NOTES = {"b300": "the GB300's table (the same Blackwell Ultra GPU; no B300 row is published): its rate as a fraction "
                 "of the GB300's peak, taken to hold at this GPU's lower peak [assumption]; ",
         "dgx-b200": _B200, "aws-p6-b200": _B200}


def rows(gpu: str | None = None, version: int | None = None, *, window: bool = False,
         kernel: str = "cudnn") -> list[dict]:
    """The causal rows of `kernel` (KERNELS) in validation/data/cudnn_sdpa.csv, optionally of one GPU and cuDNN version:
    head dim 128 without a window, or (`window`) the windowed ones."""
    out = []
    for r in csv.DictReader(open(DATA)):
        if r["causal"] != "True" or (int(r["window"]) > 0) != window or (not window and int(r["head_dim"]) != 128):
            continue
        if r["backend"] not in KERNELS[kernel]:
            continue
        if (gpu and r["gpu"] != gpu) or (version and int(r["cudnn_version"]) != version):
            continue
        text = ("gpu", "backend", "commit", "date", "path", "deterministic")
        out.append({k: (r[k] if k in text else float(r[k])) for k in r if k != "causal"})
    return out


def peak_flops(gpu: str) -> float:
    """The dense bf16 FLOP/s of the preset that describes `gpu` (PEAK_PRESET): a published rate's denominator."""
    from simulator.spec.hardware import load_hardware

    return load_hardware(PEAK_PRESET[gpu]).peak_flops("bf16")


def efficiencies(gpu: str, version: int, peak: float, sm_count: int, kernel: str = "cudnn") -> dict:
    """{(pass, seq): efficiency} of one release's `kernel` on one GPU (module docstring)."""
    out = {}
    for r in rows(gpu, version, kernel=kernel):
        b, h, s, d = r["batch"], r["heads"], r["seq_len"], r["head_dim"]
        occ = float(causal_occupancy(b * h, math.ceil(s / Q_TILE), sm_count, d))
        flops = attention_forward_flops(b, h, s, d)
        for p, _, mult in PASSES:
            out[p, int(s)] = flops * mult / (r[f"{p}_ms"] * 1e-3) / peak / occ
    return out


def _release(gpu: str, version: int, kernel: str = "cudnn") -> dict:
    rs = rows(gpu, version, kernel=kernel)
    return {"backend": rs[0]["backend"], "date": rs[0]["date"], "commit": rs[0]["commit"], "path": rs[0]["path"],
            "heads": int(rs[0]["heads"]), "batch": int(rs[0]["batch"])}


def _flash_shape() -> dict:
    """{(pass, seq): efficiency} of FLASH_SHAPE's FlashAttention-2 tables at their knots: the length shape below the
    published Blackwell points (only its ratios are used)."""
    from simulator.spec.hardware import load_hardware

    hw = load_hardware(FLASH_SHAPE)
    out = {}
    for p, name, _ in passes("flash2"):
        x, e = hw.efficiency_curve(name)
        out.update({(p, int(s)): float(v) for s, v in zip(x, e)})
    return out


def releases(preset: str) -> list[tuple[str, int]]:
    """(GPU, cuDNN version) of every cuDNN training release published for the preset's die (DIES), one per version
    (the preset's own GPU's where two publish one), oldest first."""
    seen = {}
    for gpu in reversed(DIES[preset]):  # the first GPU of the die (the preset's own) last: it wins a shared version
        seen.update({int(r["cudnn_version"]): gpu for r in rows(gpu)})
    return [(gpu, v) for v, gpu in sorted(seen.items())]


def release_name(name: str, version: int) -> str:
    """The table of one release: `attention_cudnn-9-13` for `attention_cudnn` and cuDNN 9.13."""
    return f"{name}-{version // 10000}-{version // 100 % 100}"


def table(preset: str, kernel: str = "cudnn", release: tuple[str, int] | None = None) -> dict:
    """{table name: {seq: efficiency}} of `kernel` on a Blackwell preset (`release`: that (GPU, version) instead of
    the preset's default, SOURCES)."""
    from simulator.spec.hardware import load_hardware

    sms = load_hardware(preset).sm_count
    gpu, version = release or (SOURCES if kernel == "cudnn" else FLASH_SOURCES)[preset]
    own = efficiencies(gpu, version, peak_flops(gpu), sms, kernel)
    low = MIN_SEQ[_release(gpu, version, kernel)["backend"]]
    shape = efficiencies(*SHAPE[gpu], peak_flops(SHAPE[gpu][0]), sms) if kernel == "cudnn" else _flash_shape()
    out = {}
    for p, name, _ in passes(kernel):
        long = {s: e for (q, s), e in own.items() if q == p and s >= low}
        anchor = min(long)  # a knot of both: the published lengths are powers of two from 512, as the shapes' knots
        short = {s: long[anchor] * e / shape[p, anchor] for (q, s), e in shape.items() if q == p and s < anchor}
        out[name] = dict(sorted({**short, **long}.items()))
    return out


def source(preset: str, kernel: str = "cudnn", release: tuple[str, int] | None = None) -> str:
    if kernel == "flash2":
        return _flash_source(preset)
    gpu, version = release or SOURCES[preset]
    rel, shp = _release(gpu, version), _release(*SHAPE[gpu])
    low = MIN_SEQ[rel["backend"]]
    v = f"{version // 10000}.{version // 100 % 100}"
    note = NOTES.get(preset, "") if gpu == SOURCES[preset][0] else _other_gpu(preset, gpu)
    return (f"{note}published kernel benchmark: NVIDIA cuDNN frontend "
            "benchmark/sdpa_benchmark_training "
            f"(NVIDIA/cudnn-frontend {rel['commit']}, {rel['date']}: {rel['path']}), cuDNN {v} fused attention on an "
            f"NVIDIA {gpu}, backend {rel['backend']}, bf16, causal, head dim 128, batch {rel['batch']} x "
            f"{rel['heads']} query heads (8 KV heads), forward and backward timed alone; efficiency = the benchmark's "
            f"FLOPs (causal-halved forward, 2.5x backward) / (time x the {PEAK_PRESET[gpu]} preset's dense bf16 peak) "
            "/ cost/attention.py "
            f"causal_occupancy of that grid; points from {low} tokens, below them the shape of cuDNN "
            f"{SHAPE[gpu][1] // 10000}.{SHAPE[gpu][1] // 100 % 100} on the {SHAPE[gpu][0]} ({shp['commit']}, "
            f"{shp['date']}) anchored there; validation/data/cudnn_sdpa.csv, validation/cudnn_sdpa_tables.py")


def _other_gpu(preset: str, gpu: str) -> str:
    """The assumption of a release table measured on another GPU of the preset's die ('' for its own)."""
    own = DIES[preset][0]
    return "" if gpu == own else (f"the {gpu}'s release (the same die as the {own}): its rate as a fraction of the "
                                  f"{gpu}'s peak, taken to hold at this GPU's peak [assumption]; ")


def _flash_source(preset: str) -> str:
    gpu, version = FLASH_SOURCES[preset]
    rel = _release(gpu, version, "flash2")
    return (f"published kernel benchmark: torch's flash SDPA backend (FlashAttention-2, whose Ampere-generation "
            f"kernels "
            f"run on Blackwell without its new tensor-core instructions) in NVIDIA's cuDNN frontend "
            f"benchmark/sdpa_benchmark_training (NVIDIA/cudnn-frontend {rel['commit']}, {rel['date']}: {rel['path']}) "
            f"on an NVIDIA {gpu}, bf16, causal, head dim 128, batch {rel['batch']} x {rel['heads']} query heads (8 KV "
            f"heads), forward and backward timed alone; efficiency = the benchmark's FLOPs (causal-halved forward, "
            f"2.5x "
            f"backward) / (time x the {PEAK_PRESET[gpu]} preset's dense bf16 peak); points from "
            f"{MIN_SEQ[rel['backend']]} tokens (torch's call path: below, the host's time), below them the length "
            f"shape of {FLASH_SHAPE}'s FlashAttention-2 tables (its published charts) anchored there "
            f"[derived]; validation/data/cudnn_sdpa.csv, validation/cudnn_sdpa_tables.py")


def section(preset: str, name: str, kernel: str = "cudnn", release: tuple[str, int] | None = None) -> str:
    t = table(preset, kernel, release)[name]
    return (f"[efficiency.{release_name(name, release[1]) if release else name}]\n"
            f"x = [{', '.join(f'{s:g}' for s in t)}]\n"
            f"efficiency = [{', '.join(f'{e:.4f}' for e in t.values())}]\n"
            'x_unit = "sequence length (keys per query), head dim 128, causal"\n'
            f'source = "{source(preset, kernel, release)}"\n')


def _pattern(name: str):
    return re.compile(rf"\[efficiency\.{re.escape(name)}\]\n(?:[^\[\n][^\n]*\n)*")


def render(text: str, preset: str) -> str:
    """The preset's TOML with its cuDNN and FlashAttention-2 sections written, in that order after
    [efficiency.attention_bwd], then a cuDNN pair per published release of its die (any earlier copies removed)."""
    names = [(k, name) for k in KERNELS for _, name, _ in passes(k)]
    versioned = [(rel, name) for rel in releases(preset) for _, name, _ in PASSES]
    for name in [n for _, n in names] + [release_name(n, rel[1]) for rel, n in versioned]:
        text = _pattern(name).sub("", text, count=1)
    m = _pattern("attention_bwd").search(text)
    block = "".join(section(preset, name, kernel) + "\n" for kernel, name in names)
    block += "".join(section(preset, name, "cudnn", rel) + "\n" for rel, name in versioned)
    text = text[:m.end()] + ("" if m.group(0).endswith("\n\n") else "\n") + block + text[m.end():]
    return re.sub(r"\n{3,}", "\n\n", text)


def write() -> list[str]:
    return rewrite_presets(render, tuple(SOURCES), write=True)


def check() -> list[str]:
    return rewrite_presets(render, tuple(SOURCES), write=False)


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


def report(_argv) -> None:
    print("\n".join(["# releases", *release_lines(), "", "# tables", *comparison_lines()]))
    for preset in SOURCES:
        for _, name, _ in PASSES:
            print(f"# {preset}\n{section(preset, name)}")


def main(argv=None) -> int:
    return preset_cli(argv, "[efficiency.attention_cudnn] sections", write, check, report)


if __name__ == "__main__":
    sys.exit(main())
