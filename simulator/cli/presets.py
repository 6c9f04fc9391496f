"""`parasim models` and `parasim hardware`: list the presets."""
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


COMMANDS = [models, hardware]
