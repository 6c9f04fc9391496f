"""Memory-bound kernel tables for the A100, H200 NVL, H800 and Blackwell presets, from published microbenchmarks and
the H100's.

    python validation/published_memory_tables.py           # the fits, their checks and the TOML sections
    python validation/published_memory_tables.py --check   # exit 1 if a preset's tables differ from them
    python validation/published_memory_tables.py --write   # write them into the presets

No A100, H200 NVL or H800 was lent here. Their presets held Calculon's step table (0.30 of HBM peak below 1 MB ...
0.90 from 100 MB), which has no per-kernel cost, so a 100 KB kernel took 0.2 µs where every measured GPU takes
2-3 µs, and no slower class for strided or reduction kernels. The data (validation/data/gpu_benches.csv,
transcribed from te42kyfo/gpu-benches, the numbers each device's text file prints):

- gpu-small-kernels: a streaming scale kernel A[i] = B[i]·c (fp64: 16 bytes moved per element) queued 2,000-30,000
  calls back to back, the median time per call; the best of the thread-block sizes, as the source's plot takes it.
- gpu-stream: the same kernel over 1 GiB arrays (the best of the occupancy scan), a second benchmark of the rate.

Per GPU, one kernel's time has the H100 tables' form t(x) = t0 + x / B (validation/h100_memory_table.py):

- t0: the median time per call of the queued kernels that move at most 256 KiB (a launch's fixed cost: the data
  sit in L2 and take a small part of it);
- the streaming rate B_stream: the median of x / (t − t0) over the queued kernels that move at least 4x the GPU's
  L2, which must stream from HBM (smaller ones run partly from L2, faster than any training tensor);
- each table (memory, memory_strided, memory_reduction, memory_indexed) the H100's with the GPU's t0 and its rate
  scaled by the streaming rates:  B_table(G) = B_table(H100) · B_stream(G) / B_stream(H100),  B_stream(H100) the
  lent H100's copy, add and SiLU calls fitted with the memory table's t0. That carries the H100's kernel classes
  (torch's strided kernels at 0.55 of its streaming rate, its norms at 0.72) to these GPUs: an assumption, stated
  in each source.

The A100 40GB has no small-kernel file: its t0 is the A100 80GB's (the same GA100 die) and its streaming rate the
80GB's scaled by the two cards' gpu-stream rates. The H800 (the same GH100 die and HBM3 as the H100 SXM) takes the
lent H100's tables as they are. The H200 SXM was lent: dgx-h200's tables are its measured ones
(validation/h100_memory_table.py and the reduction, strided and indexed scripts, h100_memory_table.LEASES), not
these; the H200 NVL (h200-nvl) keeps this transfer of gpu-benches' H200, which streams 0.79 of the lent H200 SXM's
rate (3.37 against 4.24 TB/s), so it is likely 1.2-1.3x slow on streaming kernels. Checked on what the fits never
saw (`checks`): gpu-benches' H200 t0 against the lent H100's memory-table t0 (the same GH100 die), and each
small-kernel streaming rate against the same GPU's gpu-stream rate.

The Blackwell presets (B200, GB200, B300, GB300) held the same step table. No Blackwell GPU has a published queued
small-kernel benchmark; what is published is a measured streaming rate (validation/data/blackwell_stream.csv: Meta's
KernelAgent-Oink STREAM-like Triton copy/triad roof, 6.98 TB/s on a GB200, 7.14 TB/s on a GB300). Their tables take
that rate as B_stream and the lent H100's t0 (assumed: a Blackwell kernel's fixed cost is not measured here), with
the H100's kernel classes carried over as above. B200 and GB200 have the same 8 TB/s HBM3e (so B300 and GB300):
the B200 presets take the GB200's rate, the B300's the GB300's.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))
DATA = ROOT / "validation" / "data" / "gpu_benches.csv"
ROOFS = ROOT / "validation" / "data" / "blackwell_stream.csv"
FLOOR_MAX_BYTES = 256 * 1024
L2_BYTES = {"A100-SXM4-80GB": 40e6, "H200": 50e6}  # NVIDIA A100 whitepaper: 40 MB; H100/H200 (GH100 SXM): 50 MB
HBM_FACTOR = 4  # kernels moving >= 4x the L2 stream from HBM
LENT = "the lent H100"  # its own tables (validation/h100_memory_table.py and the strided and reduction scripts)
# preset -> (the GPU whose small kernels give t0 and B_stream, the gpu-stream card that scales B_stream or None)
PRESETS = {"dgx-a100-80g": ("A100-SXM4-80GB", None), "jean-zay-a100": ("A100-SXM4-80GB", None),
           "dgx-a100-40g": ("A100-SXM4-80GB", "A100-SXM4-40GB"),
           "h200-nvl": ("H200", None), "dgx-h800": (LENT, None),
           "dgx-b200": ("GB200", None), "aws-p6-b200": ("GB200", None), "gb200-nvl72": ("GB200", None),
           "b300": ("GB300", None), "gb300-nvl72": ("GB300", None)}
ROOF_GPUS = ("GB200", "GB300")  # a published streaming rate, no small-kernel file (roof_rate)
TABLES = ("memory", "memory_strided", "memory_reduction", "memory_indexed")


def data():
    import pandas as pd

    return pd.read_csv(DATA)


def small_kernel_fit(gpu: str) -> tuple[float, float]:
    """(t0 seconds, B_stream bytes/s) of `gpu`'s queued scale kernels (module docstring)."""
    d = data()
    d = d[(d["gpu"] == gpu) & (d["benchmark"] == "gpu-small-kernels")]
    t = d["bytes_moved"] / (d["gb_per_s"] * 1e9)
    t0 = float(t[d["bytes_moved"] <= FLOOR_MAX_BYTES].median())
    hbm = d["bytes_moved"] >= HBM_FACTOR * L2_BYTES[gpu]
    return t0, float((d["bytes_moved"][hbm] / (t[hbm] - t0)).median())


def stream_rate(gpu: str, kernel: str = "scale") -> float:
    """`gpu`'s gpu-stream rate of `kernel` over 1 GiB arrays, bytes/s."""
    d = data()
    row = d[(d["gpu"] == gpu) & (d["benchmark"] == "gpu-stream") & (d["kernel"] == kernel)]
    return float(row["gb_per_s"].iloc[0]) * 1e9


def roof_rate(gpu: str) -> float:
    """`gpu`'s published STREAM-like rate, bytes/s: the mean of its chart readings in blackwell_stream.csv."""
    import pandas as pd

    d = pd.read_csv(ROOFS)
    d = d[(d["gpu"] == gpu) & d["reading"].str.startswith("figure")]
    if d.empty:
        raise KeyError(f"no figure reading of {gpu} in {ROOFS.name}")
    return float(d["tb_per_s"].mean()) * 1e12


def h100_rates() -> dict:
    """{table: B bytes/s} of dgx-h100's tables, with 'stream': the lent H100's copy, add and SiLU calls fitted with
    the memory table's t0; and 't0'."""
    import h100_indexed_table as I
    import h100_memory_table as M
    import h100_reduction_table as R
    import h100_strided_table as S

    t0, b = M.fit()
    return {"t0": t0, "memory": b, "memory_strided": S.fit()[1], "memory_reduction": R.fit()[1],
            "memory_indexed": I.fit()[1], "stream": M.stream_rate()}


def preset_fit(preset: str) -> dict:
    """{'t0': seconds, table: B bytes/s for each of TABLES, 'stream': B_stream} of `preset`."""
    gpu, card = PRESETS[preset]
    h = h100_rates()
    if gpu == LENT:
        t0, stream = h["t0"], h["stream"]
    elif gpu in ROOF_GPUS:
        t0, stream = h["t0"], roof_rate(gpu)
    else:
        t0, stream = small_kernel_fit(gpu)
    if card is not None:
        stream *= stream_rate(card) / stream_rate(gpu)
    return {"t0": t0, "stream": stream, **{name: h[name] * stream / h["stream"] for name in TABLES}}


def hbm_bytes_per_s(preset: str) -> float:
    import tomllib

    return tomllib.loads((ROOT / "hardware_profiles" / f"{preset}.toml").read_text())["gpu"]["hbm_gb_per_s"] * 1e9


def table(preset: str, name: str):
    """(knots, efficiencies) of `preset`'s [efficiency.<name>]."""
    from h100_memory_table import efficiencies

    f = preset_fit(preset)
    return efficiencies(f["t0"], f[name], hbm_bytes_per_s(preset))


_WHAT = {"memory": "the H100 memory table's (add and SiLU back to back, validation/graphed.py)",
         "memory_strided": "the H100 strided table's (torch's generic elementwise kernel on strided or broadcast "
                           "operands)",
         "memory_reduction": "the H100 reduction table's (norms, softmax)",
         "memory_indexed": "the H100 indexed-write table's (index_put_)"}


def source(preset: str, name: str) -> str:
    gpu, card = PRESETS[preset]
    f, h = preset_fit(preset), h100_rates()
    if gpu == LENT:
        return (f"as dgx-h100, measured on the lent H100 80GB HBM3 SXM: this GPU has the same GH100 die and HBM3 "
                f"(3.35 TB/s; [gpu] source); {_WHAT[name]} t0 = {f['t0'] * 1e6:.2f} us, "
                f"B = {f[name] / 1e12:.2f} TB/s; efficiency = bytes / ((t0 + bytes/B) x HBM peak) at two knots per "
                f"decade; validation/published_memory_tables.py")
    if gpu in ROOF_GPUS:
        return (f"published streaming rate with a transfer, no Blackwell GPU measured here: Meta's KernelAgent-Oink "
                f"STREAM-like Triton copy/triad roof measured on a {gpu} (8 TB/s HBM3e, as this GPU), "
                f"{f['stream'] / 1e12:.2f} TB/s (validation/data/blackwell_stream.csv); t0 = the lent H100's "
                f"{f['t0'] * 1e6:.2f} us (assumed: no Blackwell small-kernel benchmark is published); "
                f"B = {_WHAT[name]} {h[name] / 1e12:.2f} TB/s x this rate / the lent H100's streaming rate {h['stream'] / 1e12:.2f} TB/s "
                f"= {f[name] / 1e12:.2f} TB/s (assumed: torch's kernel classes keep their H100 ratios); efficiency = "
                f"bytes / ((t0 + bytes/B) x HBM peak) at two knots per decade; validation/published_memory_tables.py")
    scaled = (f"; the {card}'s rate is the {gpu}'s scaled by their gpu-stream scale rates "
              f"({stream_rate(card) / 1e12:.3f} / {stream_rate(gpu) / 1e12:.3f} TB/s; no small-kernel file for it)"
              if card else "")
    return (f"published microbenchmark with a transfer, no GPU of this kind measured here: te42kyfo/gpu-benches "
            f"(validation/data/gpu_benches.csv) gpu-small-kernels on the {gpu}, a streaming fp64 scale kernel queued "
            f"back to back: t0 = {f['t0'] * 1e6:.2f} us (median of the calls moving <= 256 KiB), streaming rate "
            f"{f['stream'] / 1e12:.2f} TB/s (calls moving >= {HBM_FACTOR}x the L2){scaled}; B = {_WHAT[name]} "
            f"{h[name] / 1e12:.2f} TB/s x this rate / the lent H100's streaming rate {h['stream'] / 1e12:.2f} TB/s = "
            f"{f[name] / 1e12:.2f} TB/s (assumed: torch's kernel classes keep their H100 ratios); efficiency = bytes "
            f"/ ((t0 + bytes/B) x HBM peak) at two knots per decade; validation/published_memory_tables.py")


def check() -> list[str]:
    """'preset: table' for each table that differs from this script's."""
    from h100_memory_table import presets_differing

    return [f"{p}: {name}" for p in PRESETS for name in TABLES
            if presets_differing(name, *table(p, name), source(p, name), presets=(p,))]


def checks():
    """DataFrame of the held-out checks: what, fitted, reference, error."""
    import pandas as pd

    h = h100_rates()
    rows = [dict(what="H200 t0 vs the lent H100's memory-table t0 (GH100)", fit=small_kernel_fit("H200")[0],
                 reference=h["t0"])]
    for gpu in L2_BYTES:
        rows.append(dict(what=f"{gpu} small-kernel streaming rate vs its gpu-stream scale rate",
                         fit=small_kernel_fit(gpu)[1], reference=stream_rate(gpu)))
    d = pd.read_csv(ROOFS)
    text = d[(d["gpu"] == "GB300") & (d["reading"] == "text")]["tb_per_s"].iloc[0] * 1e12
    rows.append(dict(what="GB300 roof read off its chart vs the README's printed rate", fit=roof_rate("GB300"),
                     reference=text))
    d = pd.DataFrame(rows)
    return d.assign(error=d["fit"] / d["reference"] - 1.0)


def toml_section(preset: str, name: str) -> str:
    """`preset`'s [efficiency.<name>] section, its x_unit dgx-h100's."""
    import tomllib

    from h100_memory_table import table_toml

    unit = tomllib.loads((ROOT / "hardware_profiles" / "dgx-h100.toml").read_text())["efficiency"][name]["x_unit"]
    return table_toml(name, *table(preset, name), unit, source(preset, name))


def _report() -> None:
    print(checks().to_string(index=False), "\n")
    for p in PRESETS:
        print(f"# {p}\n" + "\n\n".join(toml_section(p, name) for name in TABLES) + "\n")


def write() -> list[str]:
    """Write every preset's tables; 'preset: table' for each one rewritten."""
    from h100_memory_table import replace_section

    return [f"{p}: {name}" for p in PRESETS for name in TABLES if replace_section(p, name, toml_section(p, name))]


def main(argv=None) -> int:
    from h100_memory_table import table_main

    return table_main(argv, __doc__, "memory*", "published_memory_tables.py", check, _report, write_fn=write)


if __name__ == "__main__":
    sys.exit(main())
