"""The flags added for issues 22-26 (stack overrides, MoE routing, contention, plan, serving sweep): a bad
value exits 2 with one stderr line that names the flag the user typed and the value."""
import pytest

from simulator.cli import main

BASE = ["--model", "llama3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--seq", "2048", "--global-batch", "8"]
CASES = [
    ("estimate", ["--fsdp-prefetch", "-1"], "--fsdp-prefetch", "-1"),
    ("estimate", ["--fsdp-unit-layers", "0"], "--fsdp-unit-layers", "0"),
    ("estimate", ["--dp-bucket-mb", "0"], "--dp-bucket-mb", "0"),
    ("estimate", ["--fsdp-reshard-after-forward", "maybe"], "--fsdp-reshard-after-forward", "maybe"),
    ("estimate", ["--fsdp-reduce", "sometimes"], "--fsdp-reduce", "sometimes"),
    ("estimate", ["--moe-imbalance", "0.5"], "--moe-imbalance", "0.5"),
    ("estimate", ["--moe-capacity-factor", "-1"], "--moe-capacity-factor", "-1"),
    ("estimate", ["--comm-slowdown", "2"], "--comm-slowdown", "2"),
    ("estimate", ["--gpu-speed-cv", "1"], "--gpu-speed-cv", "1"),
    ("estimate", ["--gpu-speed-cv", "nan"], "--gpu-speed-cv", "nan"),
    ("sweep", ["--gpu-speed-cv", "2"], "--gpu-speed-cv", "2"),
    ("plan", ["--tokens", "1e12", "--gpu-counts", "8", "--gpu-speed-cv", "-1"], "--gpu-speed-cv", "-1"),
    ("sweep", ["--fsdp-prefetch", "-3"], "--fsdp-prefetch", "-3"),
    ("plan", ["--tokens", "1e12", "--gpu-counts", "8", "--max-days", "-1"], "--max-days", "-1"),
    ("plan", ["--tokens", "1e12", "--gpu-counts", "8", "--max-usd", "nan"], "--max-usd", "nan"),
    ("plan", ["--tokens", "1e12", "--gpu-counts", "0,8"], "--gpu-counts", "0,8"),
    ("plan", ["--tokens", "-5", "--gpu-counts", "8"], "--tokens", "-5"),
    ("serve-sweep", ["--max-tpot-ms", "-3"], "--max-tpot-ms", "-3"),
    ("serve-sweep", ["--top", "-1"], "--top", "-1"),
    ("estimate", ["--recompute", "full", "--recompute-layers", "-2"], "--recompute-layers", "-2"),
    ("memory", ["--recompute", "full", "--recompute-layers", "2.5"], "--recompute-layers", "2.5"),
    ("sweep", ["--recompute-layers", "-1"], "--recompute-layers", "-1"),
]


@pytest.mark.parametrize("command, args, flag, value", CASES, ids=[f"{c[0]}{c[1][-2]}{c[1][-1]}" for c in CASES])
def test_bad_value_is_one_line_naming_the_flag(capsys, command, args, flag, value):
    with pytest.raises(SystemExit) as e:
        main([command, *BASE, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert flag in err[0] and value.lstrip("-").split(",")[0] in err[0], err[0]
