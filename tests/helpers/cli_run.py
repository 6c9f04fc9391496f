"""Run `parasim` in process under pytest's capsys: (exit code, stdout, stderr)."""


def run(args, capsys):
    from simulator.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err
