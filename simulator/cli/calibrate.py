"""`parasim calibrate`: measure kernels and collectives, fit efficiency tables, write a profile."""
from __future__ import annotations

import re
from pathlib import Path

import click

from ..errors import InputError
from ..spec.rules import check_text
from . import check_output

_KINDS = ("gemm", "attention", "memory", "optimizer", "collectives")


def _need_torch():
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        raise InputError("calibrate needs torch: pip install torch") from None


def _common(fn):
    fn = click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
                      help="profile TOML to write (default hardware_profiles/measured/NAME.toml)")(fn)
    fn = click.option("--name", default=None, help="profile name (default: the --out file stem, else 'measured')")(fn)
    fn = click.option("--base", default=None, help="hardware preset/profile whose peaks define efficiency (GPU: required)")(fn)
    fn = click.option("--residuals", type=click.Path(dir_okay=False), default=None,
                      help="also write the measured points and fit residuals to this CSV")(fn)
    return fn


def _names(out, name, residuals=None):
    """(profile path, profile name); InputError for a path that cannot be written (checked before measuring)."""
    if name is None:
        name = Path(out).stem if out else "measured"
    check_text(name, "--name")
    if out is None:
        out = str(Path("hardware_profiles") / "measured" / f"{name}.toml")
    check_output("--out", out, (".toml",), makes_folders=True)  # write_profile makes the folders
    if residuals:
        check_output("--residuals", residuals, (".csv",))
    return out, name


def _check_device(device: str, world_size) -> None:
    """InputError unless --device is auto, cpu, cuda or cuda:N and --world-size (when given) is >= 1."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", str(device).strip()):
        raise InputError(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}")
    if world_size is not None and world_size < 1:
        raise InputError(f"--world-size must be >= 1, got {world_size}")


def _report(fits, out, notes=()):
    from ..calibrate.run import residual_table

    t = residual_table(fits)
    click.echo(t.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for n in notes:
        click.echo(f"note: {n}")
    click.echo(f"wrote {out}")


def _run(kinds, *, device, dtype, base, name, out, grid, world_size, residuals):
    _check_device(device, world_size)
    out, name = _names(out, name, residuals)
    if base is not None:  # a mistyped --base is an error before minutes of measuring, not after
        from ..spec.hardware import load_hardware
        load_hardware(base)
    _need_torch()
    from ..calibrate.profile_writer import write_profile
    from ..calibrate.run import run_calibration

    device = str(device).strip()
    res = run_calibration(kinds, device=device, dtype=dtype, base=base, name=name, grid=grid, world_size=world_size,
                          progress=lambda m: click.echo(f"measuring {m} ...", err=True))
    write_profile(out, res.profile)
    if residuals:
        import pandas as pd

        frames = [df.assign(measurement=k) for k, df in res.measurements.items()]
        pd.concat(frames, ignore_index=True).to_csv(residuals, index=False)
    _report(res.fits, out, res.notes)


@click.group()
def calibrate():
    """Measure GEMM / attention / memory kernels and collectives with torch, fit the efficiency
    tables, and write a measured hardware profile (provenance + residuals reported).

    \b
    Examples:
      parasim calibrate all --base dgx-h100 --out hardware_profiles/measured/my-h100.toml
      parasim calibrate gemm --device cpu --out cpu.toml
      parasim calibrate nccl-tests all_reduce_perf.log all_gather_perf.log --base dgx-h100 --out h100-nccl.toml
    """


def _bench_command(kind_name, kinds, help_text):
    @calibrate.command(kind_name, help=help_text)
    @_common
    @click.option("--device", default="auto", help="cuda, cuda:N or cpu (default: cuda if available)")
    @click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default=None,
                  help="GEMM/attention dtype (default bf16 on GPU, fp32 on CPU)")
    @click.option("--grid", type=click.Choice(["cpu", "gpu"]), default=None,
                  help="shape grid (default: gpu on a GPU, small cpu grid on the CPU)")
    @click.option("--world-size", type=int, default=None, help="ranks for collectives (default: all GPUs; 2 on CPU)")
    def cmd(out, name, base, residuals, device, dtype, grid, world_size):
        _run(kinds, device=device, dtype=dtype, base=base, name=name, out=out, grid=grid, world_size=world_size,
             residuals=residuals)

    return cmd


_bench_command("gemm", ("gemm",), "Time transformer-layer GEMMs (fwd, dgrad, wgrad over hidden × tokens × TP) and fit [efficiency.gemm].")
_bench_command("gemm-fp8", ("gemm_fp8",), "Time FP8 GEMMs (torch._scaled_mm, e4m3, sm89+ GPUs) over transformer-layer shapes and fit [efficiency.gemm_fp8] against the FP8 peak.")
_bench_command("attention", ("attention",), "Time causal scaled_dot_product_attention fwd/bwd over sequence lengths and head dims; fit attention, attention_bwd.")
_bench_command("memory", ("memory",), "Time copy/add/RMSNorm/SiLU over buffer sizes and fit [efficiency.memory].")
_bench_command("optimizer", ("optimizer",), "Time torch's fused AdamW step over parameter counts and fit [efficiency.optimizer] (the optimizer step's HBM efficiency; without it the memory table is used).")
_bench_command("collectives", ("collectives",), "Time torch.distributed collectives on the local GPUs (gloo on CPU) and fit the collective tables.")
_bench_command("all", _KINDS, "gemm + attention + memory + optimizer + collectives.")


@calibrate.command("nccl-tests")
@click.argument("logs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@_common
@click.option("--all-reduce-algorithm", type=click.Choice(["ring", "nvls"]), default="ring",
              help="how single-node all_reduce logs ran (NCCL_ALGO): ring feeds nvlink_ring, nvls feeds nvls")
@click.option("--placement", type=click.Choice(["out-of-place", "in-place"]), default="out-of-place")
@click.option("--no-latency-correction", is_flag=True, help="fit busbw/peak as printed (keep the latency in eta)")
def nccl_tests_cmd(logs, out, name, base, residuals, all_reduce_algorithm, placement, no_latency_correction):
    """Parse nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf,
    sendrecv_perf) into collective efficiency by message size and group span, and write a profile =
    --base with the fitted collective tables. Needs no torch.

    \b
    Example:
      parasim calibrate nccl-tests ar.log ag.log --base dgx-h100 --out hardware_profiles/measured/h100-nccl.toml
    """
    import pandas as pd

    from ..calibrate import nccl_tests as nt
    from ..calibrate.profile_writer import base_profile_dict, measured_profile_dict, write_profile
    from ..calibrate.run import fit_collective_tables
    from ..spec.hardware import hardware_from_dict

    if base is None:
        raise InputError("nccl-tests needs --base PRESET: the link bandwidths efficiency is measured against")
    out, name = _names(out, name, residuals)
    df = _checked_rows(pd.concat([nt.read_nccl_tests(p) for p in logs], ignore_index=True), placement)
    base_d = base_profile_dict(base)
    hw = hardware_from_dict(base_d, where=base)
    _warn_other_gpu(df, hw, base)
    fits, pts = fit_collective_tables(df, hw, label=f"nccl-tests logs ({', '.join(Path(p).name for p in logs)})",
                                      all_reduce_algorithm=all_reduce_algorithm, placement=placement) \
        if not no_latency_correction else _fit_raw(df, hw, logs, all_reduce_algorithm, placement)
    import datetime as dt

    devs = sorted({d for d in df["device"] if d})
    vers = sorted({v for v in df["nccl_version"] if v})
    prov = {"device": ", ".join(devs) or "not stated in the logs",
            "versions": ("NCCL " + ", ".join(vers)) if vers else "NCCL version not stated in the logs",
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "protocol": f"nccl-tests {placement} times; eta = volume / (link bandwidth × (t − cost-model latency))"
                        + (" (latency kept)" if no_latency_correction else ""),
            "source": "parasim calibrate nccl-tests " + " ".join(Path(p).name for p in logs)}
    write_profile(out, measured_profile_dict(base_d, fits, name=name, provenance=prov))
    if residuals:
        pts.to_csv(residuals, index=False)
    _report(fits, out)


_GPU_NAME = re.compile(r"\b(GB\d{3}|[ABHL]\d{2,3}|MI\d{3}X?)\b")


def _warn_other_gpu(df, hw, base: str) -> None:
    """One warning line when the logs name a GPU (nccl-tests' '# Using devices' block) that is not --base's: the
    fitted tables are then a share of another fabric's link bandwidth."""
    base_gpu = set(_GPU_NAME.findall(hw.gpu))
    logged = {m for d in df["device"] if d for m in _GPU_NAME.findall(str(d))}
    if base_gpu and logged and not logged & base_gpu:
        click.echo(f"warning: the logs ran on {', '.join(sorted(logged))}, --base {base} is a "
                   f"{', '.join(sorted(base_gpu))}: its tables will hold that fabric's share of {base}'s links", err=True)


def _checked_rows(df, placement: str):
    """The rows nccl-tests' data check did not mark wrong ('#wrong' > 0: the collective returned mismatched
    elements, so its time is not a measurement of a correct collective), with one warning line naming what was left
    out of the `placement` fitted; InputError when none of its rows is left."""
    df = df[df["placement"] == placement]
    bad = df["wrong"] > 0
    if bad.any() and not bad.all():  # (all of them: the error alone, one line)
        where = ", ".join(sorted({f"{r.source} size {int(r.size_bytes)}" for r in df[bad].itertuples()})[:3])
        click.echo(f"warning: {int(bad.sum())} result row(s) nccl-tests marked wrong (#wrong > 0) left out of the "
                   f"fit: {where}{', ...' if bad.sum() > 3 else ''}", err=True)
    if bad.all():
        raise InputError(f"every {placement} nccl-tests result row is marked wrong (#wrong > 0): no correct "
                         f"collective to fit")
    untimed = ~bad & ~((df["time_s"] > 0) & (df["size_bytes"] > 0))  # (NaN compares False: N/A times)
    if untimed.any():
        where = ", ".join(sorted({f"{r.source} size {int(r.size_bytes)}" for r in df[untimed].itertuples()})[:3])
        click.echo(f"warning: {int(untimed.sum())} result row(s) without a time or size above 0 (N/A, 0) left out of "
                   f"the fit: {where}{', ...' if untimed.sum() > 3 else ''}", err=True)
    return df[~bad].reset_index(drop=True)


def _fit_raw(df, hw, logs, algo, placement):
    from ..calibrate.fit import fit_efficiency_curve
    from ..calibrate.nccl_tests import efficiency_points

    pts = efficiency_points(df, hw, placement=placement, all_reduce_algorithm=algo, subtract_latency=False)
    fits = {t: fit_efficiency_curve(g["x_bytes"], g["efficiency"], name=t, x_unit="buffer bytes (nccl-tests size)",
                                    source=f"nccl-tests logs ({', '.join(Path(p).name for p in logs)}), latency kept")
            for t, g in pts.groupby("table")}
    return fits, pts


COMMANDS = [calibrate]
