"""`parasim models`, `parasim hardware` and `parasim stacks`: list the presets."""
import click


def _emit(df, fmt: str, table) -> None:
    """Print a preset listing as csv, json, or the human table `table` (a DataFrame)."""
    if fmt == "csv":
        click.echo(df.to_csv(index=False), nl=False)
    elif fmt == "json":
        click.echo(df.to_json(orient="records", indent=1))
    else:
        click.echo(table.to_string(index=False))


@click.command()
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
def models(fmt):
    """List model presets with parameter counts (total and active per token).

    \b
    Example:
      parasim models
    """
    from ..spec.load import list_models

    df = list_models()
    _emit(df, fmt, df.assign(params=(df.params / 1e9).map("{:.2f}B".format),
                             active_params=(df.active_params / 1e9).map("{:.2f}B".format)).drop(columns="source"))


def list_hardware():
    """One row per hardware preset: the numbers `parasim hardware` prints (decimal GB, TFLOP/s)."""
    import pandas as pd

    from ..spec.hardware import load_hardware
    from ..spec.presets import preset_names

    rows = []
    for name in preset_names("hardware_profiles"):
        p = load_hardware(name)
        bf16 = p.peak_flops_per_s.get("bf16")
        rows.append({
            "name": p.name,
            "gpu": p.gpu,
            "hbm_gib": round(p.hbm_bytes / 2**30, 1),  # capacity CUDA sees (usable), GiB
            "bf16_tflops": bf16 / 1e12 if bf16 else float("nan"),
            "gpus_per_node": p.gpus_per_node,
            "nvlink_domain_gpus": p.nvlink_domain_gpus,
            "nvlink_gb_per_s_per_dir": p.nvlink_bytes_per_s / 1e9,
            "nvls": p.nvls,
            "nics": f"{p.nics_per_node} x {p.nic_bytes_per_s * 8 / 1e9:g} Gb/s",
        })
    return pd.DataFrame(rows)


@click.command()
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
def hardware(fmt):
    """List hardware presets: GPU, HBM, dense BF16 peak, node size and links (per direction).

    \b
    Example:
      parasim hardware
    """
    df = list_hardware()
    _emit(df, fmt, df)


@click.command()
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
def stacks(fmt):
    """List software-stack presets (stacks/*.toml): framework, attention kernel, loss, optimizer
    implementation, eager or compiled, kernels per layer (forward/backward), the host time per kernel and
    what its framework runs (ZeRO stages, parallel dimensions, schedules, refused combinations: docs/stacks.md).
    Use one with --stack NAME (and --compile) on estimate, memory and sweep; every value's and rule's source
    is in its file.

    \b
    Example:
      parasim stacks
      parasim estimate scenarios/llama3-8b-8xh100.toml --stack torchtitan --compile
    """
    from ..spec.stack import list_stacks

    df = list_stacks()
    _emit(df, fmt, df.drop(columns="framework"))


COMMANDS = [models, hardware, stacks]
