"""dgx-h100's attention tables per torch SDPA backend, from the SDPA benchmark on the lent H100 (2026-11-27),
and the rule that decides which of them the GH100 SXM presets ship.

    python validation/h100_sdpa_tables.py            # the TOML sections of the kernels the rule ships
    python validation/h100_sdpa_tables.py --all      # those of every kernel measured (flash2, cudnn, xformers)
    python validation/h100_sdpa_tables.py --write    # write the shipped sections into the GH100 SXM presets
    python validation/h100_sdpa_tables.py --check    # exit 1 if a preset's sections differ

The presets: dgx-h100 and those of the same compute die at the same 700 W limit (h100_gemm_table.py GH100_SXM:
gcp-a3-mega, dgx-h200, dgx-h800; the source of dgx-h200's and dgx-h800's says so, h100_gemm_table.same_die_note),
as h100_attention_tables.py writes its cuDNN tables. The rule is decided on dgx-h100 against the H100's points; the
others take its outcome and values (the lent H200's SDPA forwards are the H100's within 1 %:
validation/h200_kernels.py). In a preset the shipped sections sit before `[efficiency.attention_unfused]`
(`preset_text`).

Data: `validation/h100_owed/sdpa.csv` (protocol: validation/gpu_attention_report.py and the README there).
Tables are built for the backends parasim times with FlashAttention-style tables (gpu_attention_report
BACKEND_KERNEL: flash -> flash2, cudnn -> cudnn, efficient -> xformers); not for math, which torch 2.11 runs
in fp32 while parasim's `unfused` kernel models bf16 GEMMs (its tables stay the published charts).

- Fit family FIT_SHAPE = the 16k-token points (batch = 16384 / seq, heads x head dim = 2048): the grid a table
  is defined at (cost/attention.py REFERENCE_TILES, the FlashAttention benchmarks' grid the published tables
  come from), where parasim's occupancy factor is 1, so a table value is the measured rate over the peak:
  η(s) = FLOPs / (kernel time · 989.4 TFLOP/s), forward FLOPs 4·b·h·s²·d / 2 (causal), backward 2.5 x forward
  (the benchmark's convention = parasim's executed FLOPs); seq 512-16384 (clamped outside), head dim 128 (the
  base table) and 64 (`_hd64`). The held-out family HELD_OUT_SHAPE = the batch-1, 32-head points.
- Spread (`spread`): what a table can be trusted to: the attention microbenchmarks' lease-to-lease spread,
  3.5 % median time per shape between two calibrations on two leases (docs/validation-h100.md, finding 7),
  plus the largest difference between two points of identical work measured here (16k tokens at seq 8192 is
  batch 2 x 16 heads, batch-1 at 8192 is 1 x 32: the same kernel grid).
- Shipping rule (`decisions`, every criterion here): a kernel's measured tables replace the presets' when
  (1) the shipped tables miss the fit family by more than the spread (median |error|, forward or backward),
  (2) the measured tables do not raise the held-out family's median |error| in either pass and (3), for a
  kernel the H100 training runs profiled (cuDNN), they do not raise the median |error| on those kernels. Where (2) fails
  the shape dependence the tables would have to carry is the occupancy rule's (gpu_attention_report: "the shape
  term"), and shipping would trade one family's error for the other's.
- Head dim 256 is not measured: a shipped kernel without a `_hd256` table reads its head dim 128 table there
  (cost/attention.py clamps to the end table).

The cuDNN kernels profiled in the H100 training runs (h100_attention_tables.kernel_check) are reported beside
the decision for cudnn; no table is fitted to them or to any training step.
"""
from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

from gpu_attention_report import BACKEND_KERNEL, abs_stats, compared, forward_flops, measured_rows  # noqa: E402
from h100_gemm_table import same_die_note  # noqa: E402  (the GH100 SXM presets' note)

FIT_SHAPE, HELD_OUT_SHAPE = "16k-tokens", "batch-1"
KERNELS = {b: k for b, k in BACKEND_KERNEL.items() if b != "math"}  # backend -> parasim kernel with tables here
HEAD_DIMS = (128, 64)
LEASE_SPREAD = 0.035  # docs/validation-h100.md finding 7: attention, median time per shape, two leases
PRESET = "dgx-h100"
PROFILED_IN_TRAINING = ("cudnn",)  # kernels whose calls the H100 training runs profiled (kernel_breakdown.csv)
SCRIPT = "validation/h100_sdpa_tables.py"
BACKEND_TEXT = {
    "flash": "torch's FlashAttention-2 backend (SDPBackend.FLASH_ATTENTION)",
    "cudnn": "cuDNN fused attention (SDPBackend.CUDNN_ATTENTION, cuDNN 9.19)",
    "efficient": "the memory-efficient backend (SDPBackend.EFFICIENT_ATTENTION: xFormers' CUTLASS FMHA kernels "
                 "vendored in ATen, aten/src/ATen/native/transformers/cuda/mem_eff_attention, Ampere Sm80 code)",
}


def source(backend: str) -> str:
    """Provenance of a measured table of `backend`: device, driver, versions, date, protocol, file, script."""
    return (f"measured: torch 2.11.0+cu130 scaled_dot_product_attention, {BACKEND_TEXT[backend]}, bf16, causal, on "
            "one NVIDIA H100 80GB HBM3 SXM5 (132 SMs, driver 580.159.04, CUDA 13.0), 2026-11-27; "
            "validation/gpu_owed.py --stages sdpa (validation/h100_owed/sdpa.csv, README there): 16k tokens per "
            "call (batch = 16384 / seq, heads x head dim = 2048), kernel time per call summed by torch.profiler "
            "(CUPTI), mean over 3-50 calls, backward = forward + backward call - forward call; efficiency = FLOPs "
            "(forward 4*b*h*s^2*d / 2, backward 2.5 x forward) / (time x 989.4 TFLOP/s); held out: the batch-1, "
            f"32-head points; {SCRIPT}")


def _peak_flops_per_s() -> float:
    from simulator.spec.hardware import load_hardware

    return load_hardware(PRESET).peak_flops("bf16")


def table_name(kernel: str, pas: str, head_dim: int) -> str:
    """`attention[_bwd]_<kernel>[_hd<d>]` (cost/attention.py head_dim_tables: head dim 128 is the base)."""
    return f"attention_{'bwd_' if pas == 'bwd' else ''}{kernel}{'' if head_dim == 128 else f'_hd{head_dim}'}"


def tables(shape: str = FIT_SHAPE) -> dict[str, dict[str, dict[int, float]]]:
    """{kernel: {table name: {seq: efficiency}}} from the causal points of `shape` (module docstring)."""
    peak = _peak_flops_per_s()
    out = {}
    for be, k in KERNELS.items():
        out[k] = {}
        for d in HEAD_DIMS:
            rows = sorted((r for r in measured_rows() if r["backend"] == be and r["shape"] == shape
                           and r["head_dim"] == d), key=lambda r: r["seq"])
            for pas, factor in (("fwd", 1.0), ("bwd", 2.5)):
                out[k][table_name(k, pas, d)] = {r["seq"]: factor * forward_flops(r) / r[f"{pas}_kernel_s"] / peak
                                                 for r in rows}
    return out


def spread() -> float:
    """LEASE_SPREAD + the largest |relative difference| of kernel time between two measured points of identical
    work (same backend, batch x heads, seq, head dim, causal; different shape family), either pass."""
    seen, worst = {}, 0.0
    for r in measured_rows(causal=None):
        key = (r["backend"], r["batch"] * r["heads"], r["seq"], r["head_dim"], r["causal"])
        if key in seen and seen[key]["shape"] != r["shape"]:
            worst = max(worst, *(abs(r[f"{p}_kernel_s"] / seen[key][f"{p}_kernel_s"] - 1.0) for p in ("fwd", "bwd")))
        seen.setdefault(key, r)
    return LEASE_SPREAD + worst


def _preset_dict() -> dict:
    from simulator.spec.presets import read_toml, resolve

    return read_toml(resolve("hardware_profiles", PRESET))


def before_dict() -> dict:
    """dgx-h100 as it was before this script's tables: the preset less every table whose source names it."""
    d = copy.deepcopy(_preset_dict())
    d["efficiency"] = {k: v for k, v in d["efficiency"].items() if SCRIPT not in str(v.get("source", ""))}
    return d


def with_tables(base: dict, kernels) -> dict:
    """`base` with the measured tables of `kernels` in place of its own."""
    d = copy.deepcopy(base)
    built = tables()
    for k in kernels:
        for name, vals in built[k].items():
            hd = name.rsplit("_hd", 1)[1] if "_hd" in name else "128"
            backend = next(b for b, kk in KERNELS.items() if kk == k)
            d["efficiency"][name] = {"x": list(vals), "efficiency": [round(e, 4) for e in vals.values()],
                                     "x_unit": f"sequence length (keys per query), head dim {hd}, causal",
                                     "source": source(backend)}
    return d


def _hardware(d: dict, label: str):
    from simulator.spec.hardware import hardware_from_dict

    return hardware_from_dict(d, where=label)


def _stats(results, shape: str) -> dict:
    rs = [r for r in results if r["shape"] == shape]
    return {p: abs_stats(r[f"err_{p}"] for r in rs) for p in ("fwd", "bwd")}


def decisions() -> dict[str, dict]:
    """Per kernel: the fit-family and held-out (median, max) |error| of the tables before and with the measured
    ones, and whether the rule ships them (module docstring)."""
    before = before_dict()
    hw_before = _hardware(before, "dgx-h100 before")
    lim = spread()
    out = {}
    for be, k in KERNELS.items():
        rows = [r for r in measured_rows() if r["backend"] == be]
        hw_after = _hardware(with_tables(before, [k]), f"dgx-h100 with measured {k}")
        res_b, res_a = compared(hw_before, rows), compared(hw_after, rows)
        c = {"backend": be, "fit_before": _stats(res_b, FIT_SHAPE), "fit_after": _stats(res_a, FIT_SHAPE),
             "held_before": _stats(res_b, HELD_OUT_SHAPE), "held_after": _stats(res_a, HELD_OUT_SHAPE)}
        off = any(c["fit_before"][p][0] > lim for p in ("fwd", "bwd"))
        transfers = all(c["held_after"][p][0] <= c["held_before"][p][0] for p in ("fwd", "bwd"))
        in_step = True
        if k in PROFILED_IN_TRAINING:
            c["training_before"], c["training_after"] = kernel_check_stats([k])
            in_step = c["training_after"][0] <= c["training_before"][0]
        c["off"], c["transfers"], c["in_step"] = off, transfers, in_step
        c["ship"] = off and transfers and in_step
        out[k] = c
    return out


def shipped_kernels() -> list[str]:
    """The kernels whose measured tables the rule ships (decisions)."""
    return [k for k, c in decisions().items() if c["ship"]]


def sections(kernels=None, preset: str = PRESET) -> str:
    """The TOML sections of `kernels`' measured tables (default: the shipped ones) as `preset` holds them (its
    source ends with same_die_note(preset))."""
    kernels = shipped_kernels() if kernels is None else kernels
    d = with_tables({"efficiency": {}}, kernels)["efficiency"]
    text = []
    for name, t in d.items():
        eff = ", ".join(f"{e:.4f}" for e in t["efficiency"])
        text.append(f"[efficiency.{name}]\nx = {t['x']}\nefficiency = [{eff}]\n"
                    f"x_unit = \"{t['x_unit']}\"\nsource = \"{t['source']}{same_die_note(preset)}\"\n")
    return "\n".join(text)


_TABLE = re.compile(r"\[efficiency\.([^\]\n]+)\]\n(?:[^\[\n][^\n]*\n)*\n?")
ANCHOR = "[efficiency.attention_unfused]"  # the shipped sections go just before it (where dgx-h100 has them)


def preset_text(text: str, preset: str, kernels=None) -> str:
    """A preset's TOML with the tables of `kernels` (default: the shipped ones) and every table whose source names
    this script replaced by `sections(kernels, preset)`, placed before ANCHOR."""
    new = sections(kernels, preset)
    names = set(re.findall(r"^\[efficiency\.([^\]\n]+)\]", new, re.M))
    text = _TABLE.sub(lambda m: "" if m.group(1) in names or SCRIPT in m.group(0) else m.group(0), text)
    if not new:
        return text
    at = text.find(ANCHOR)
    if at < 0:
        raise ValueError(f"{preset}: no {ANCHOR} section to place the measured SDPA tables before")
    return text[:at] + new + "\n" + text[at:]


def _rewrite(write: bool) -> list[str]:
    from h100_gemm_table import GH100_SXM, rewrite_presets

    kernels = shipped_kernels()  # decided once, on dgx-h100
    return rewrite_presets(lambda text, preset: preset_text(text, preset, kernels), GH100_SXM, write=write)


def write() -> list[str]:
    """Write the shipped sections into the GH100 SXM presets; the presets rewritten."""
    return _rewrite(True)


def check() -> list[str]:
    """The GH100 SXM presets whose measured SDPA sections are not the shipped ones."""
    return _rewrite(False)


def kernel_check_stats(kernels) -> tuple[tuple[float, float], tuple[float, float]]:
    """(median, max) |error| on the cuDNN kernels profiled in the H100 training runs
    (h100_attention_tables.kernel_check), before and with the measured tables of `kernels`."""
    from h100_attention_tables import kernel_check

    def stats(d):
        rows = kernel_check(_hardware(d, "check"))
        return abs_stats(r[f"predicted_{p}_s"] / r[f"measured_{p}_s"] - 1.0 for r in rows for p in ("fwd", "bwd"))

    before = before_dict()
    return stats(before), stats(with_tables(before, kernels))


def shipping_lines() -> list[str]:
    """Markdown: the held-out check per kernel, the rule's decision, and the cuDNN training-kernel check."""
    dec, lim = decisions(), spread()

    def cell(s):
        return " / ".join(f"{100 * s[p][0]:.1f} % ({100 * s[p][1]:.0f} %)" for p in ("fwd", "bwd"))

    out = ["**Measured tables: fit on the 16k-token points, held out on batch 1** (`validation/h100_sdpa_tables.py`). "
           "A table is the measured rate over the bf16 peak at the 16k-token grid, where parasim's occupancy "
           "factor is 1 (the grid a table is defined at). It replaces dgx-h100's when the shipped table misses the "
           f"fit family by more than the spread ({100 * lim:.1f} %: the lease-to-lease 3.5 % of "
           "docs/validation-h100.md finding 7 plus the largest difference between two points of identical work "
           "here), does not raise the held-out family's median |error| and, for cuDNN, does not raise it on the "
           "kernels "
           "profiled in the H100 training runs. Before: dgx-h100 without this script's "
           "tables; measured tables: the kernel's 16k-token tables in their place (`python "
           "validation/h100_sdpa_tables.py --all` prints them all). Cells: median |error| (max), forward / "
           "backward.", "",
           "| SDPA backend | parasim kernel | fit family, before | fit family, measured tables | held out, before | "
           "held out, measured tables | shipped |", "|---|---|---|---|---|---|---|"]
    for k, c in dec.items():
        why = ("yes" if c["ship"] else "no: within the spread" if not c["off"]
               else "no: the held-out error would rise" if not c["transfers"]
               else "no: the profiled training kernels' error would rise")
        out.append(f"| {c['backend']} | `{k}` | {cell(c['fit_before'])} | {cell(c['fit_after'])} | "
                   f"{cell(c['held_before'])} | {cell(c['held_after'])} | {why} |")
    (kb_m, kb_x), (ka_m, ka_x) = kernel_check_stats(["cudnn"])
    shipped = [k for k, c in dec.items() if c["ship"]]
    out += ["", f"Shipped in dgx-h100: {', '.join(f'`{k}`' for k in shipped) or 'none'} (forward and backward, head "
            "dims 128 and 64); dgx-h100-datasheet keeps the published charts. The cuDNN kernels profiled in the "
            "six SDPA training runs (docs/validation-h100.md, 'Attention kernels: the shipped tables against the "
            f"profiled cuDNN kernels') would move from median {100 * kb_m:.1f} % / max "
            f"{100 * kb_x:.1f} % to {100 * ka_m:.1f} % / {100 * ka_x:.1f} % with the measured cuDNN tables, "
            "all too fast: those kernels ran on the earlier leases, slower than this lease's isolated calls of "
            "the same shapes, which the calibration's tables (earlier leases) match. Which lease is typical is "
            "not established; the kernels of real training steps decide.", ""]
    return out


if __name__ == "__main__":
    from h100_gemm_table import preset_cli

    sys.exit(preset_cli(None, "measured SDPA sections", write, check, lambda argv: sys.stdout.write(
        sections(list(KERNELS.values()) if "--all" in argv else None))))
