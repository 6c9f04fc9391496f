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


@click.command()
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
def hardware(fmt):
    """List hardware presets: GPU, HBM, dense BF16 peak, node size and links (per direction).

    \b
    Example:
      parasim hardware
    """
    from ..spec.hardware import list_hardware

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
