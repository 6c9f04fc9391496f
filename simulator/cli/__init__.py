"""`parasim` command line: a thin layer over the library.

Each command lives in its own module of this package and is registered here. Bad input anywhere
below raises `InputError`; `main` turns it into a one-line `error: ...` on stderr and exit code 2,
never a traceback (so do a file that cannot be read or written and running out of memory).
`check_output` checks a path a command will write before the command does any work.
"""
import sys

import click

from ..errors import InputError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="parasim")
def cli():
    """parasim: predict per-GPU memory, step time, pipeline bubble and MFU of transformer training
    under every parallel layout, before renting the GPUs.

    \b
    Examples:
      parasim memory scenarios/llama3-70b-64xh100.toml
      parasim memory --model llama3-70b --hardware dgx-h100 --gpus 64 --tp 8 --pp 2 --seq 8192
      parasim schedule --schedule 1f1b --pp 8 --microbatches 32
    """


def check_output(flag: str, path, suffixes: tuple[str, ...] = (), *, makes_folders: bool = False) -> None:
    """InputError (one line naming `flag` and `path` as given) unless `path` can be written as a file:
    its suffix one of `suffixes` (when given; lower-case, with the dot), not a directory, not under a
    regular file, and its folder an existing directory (unless the writer `makes_folders`). Called
    before any work is done."""
    from pathlib import Path

    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        listed = ", ".join(suffixes[:-1]) + (" or " if len(suffixes) > 1 else "") + suffixes[-1]
        raise InputError(f"{flag} must end in {listed}, got {str(path)!r}")
    if p.is_dir():
        raise InputError(f"{flag} {str(path)!r} is a directory, not a file")
    for folder in (p.parent, *p.parent.parents):
        if folder.exists():
            if not folder.is_dir():
                raise InputError(f"{flag} {str(path)!r}: {str(folder)!r} is a file, not a directory")
            break
    if not makes_folders and not p.parent.exists():
        raise InputError(f"{flag} {str(path)!r}: directory {str(p.parent)!r} does not exist")
    if p.parent.exists():
        _check_writable(flag, p)


def _check_writable(flag: str, p) -> None:
    """InputError naming `flag` and the path unless `p` can be opened for writing: an existing regular file is
    opened to append (nothing written), a new one created and removed again (a read-only or a virtual folder such
    as /proc refuses it; a FIFO or a device is never opened)."""
    import os

    if p.exists() and not p.is_file():
        raise InputError(f"{flag} {str(p)!r} is not a regular file")
    existed = p.exists()
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    except OSError as exc:
        raise InputError(f"{flag} {str(p)!r}: cannot write there ({exc.strerror or type(exc).__name__})") from None
    if not existed:
        os.unlink(p)


def _register():
    import importlib

    for name in ("presets", "memory", "estimate", "schedule", "sweep", "serving", "plan", "plot", "calibrate", "validate",
                 "torch_model", "io"):
        try:
            mod = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:  # command not written yet
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        for cmd in getattr(mod, "COMMANDS", ()):
            cli.add_command(cmd)


_register()


def main(argv=None):
    """Entry point of the `parasim` console script."""
    try:
        rv = cli.main(args=argv, prog_name="parasim", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:  # usage errors: unknown option, bad choice, ...
        msg = exc.format_message().splitlines()[0] if exc.format_message() else str(exc)
        click.echo(f"error: {msg}", err=True)
        sys.exit(2)
    except InputError as exc:
        click.echo(f"error: {str(exc).splitlines()[0]}", err=True)
        sys.exit(2)
    except FileNotFoundError as exc:
        click.echo(f"error: file not found: {exc.filename or exc}", err=True)
        sys.exit(2)
    except OSError as exc:  # a path that cannot be written or read (not a directory, permission, disk full)
        what = exc.strerror or type(exc).__name__
        click.echo(f"error: {what}: {exc.filename}" if exc.filename else f"error: {what}", err=True)
        sys.exit(2)
    except MemoryError:
        click.echo("error: out of memory (the problem is too large for this machine)", err=True)
        sys.exit(2)
    sys.exit(rv if isinstance(rv, int) else 0)
