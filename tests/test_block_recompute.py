"""Full recompute of the first N layers of each stage (Layout.recompute_layers; Megatron-LM's
--recompute-method block --recompute-num-layers N: megatron/core/transformer/transformer_block.py
`_checkpointed_forward` checkpoints layer l of a chunk when l < N and runs the others normally)."""
import pytest

from simulator.errors import InputError
from simulator.estimate import estimate
from simulator.memory.breakdown import memory_breakdown
from simulator.spec.hardware import load_hardware
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.training import Training

MODEL = load_model("llama3-70b")  # 80 layers: 20 per stage on pp = 4
TRAINING = Training(seq_length=8192, global_batch_size=64)
HW = load_hardware("dgx-h100")
KW = dict(num_gpus=64, tp=8, pp=4, micro_batch_size=1, sequence_parallel=True, zero=1)


def _est(recompute, n=0, **kw):
    return estimate(MODEL, TRAINING, Layout(recompute=recompute, recompute_layers=n, **{**KW, **kw}), HW)


def test_recompute_time_is_the_recomputed_layers_share_of_full_recompute():
    # pp = 1: one stage of 80 layers, 20 of them recomputed: a quarter of full recompute's extra compute,
    # of its re-run TP collectives and of its recompute FLOPs
    none, full, part = (_est(r, n, pp=1) for r, n in (("none", 0), ("full", 0), ("full", 20)))
    t = {k: e.to_dict()["time"] for k, e in (("none", none), ("full", full), ("part", part))}
    for get in (lambda d: d["compute_s"], lambda d: d["exposed_comm_by_group_s"]["tp"]):
        assert get(t["part"]) - get(t["none"]) == pytest.approx((get(t["full"]) - get(t["none"])) / 4, rel=1e-9)
    h = {k: e.to_dict()["throughput"]["hardware_tflops_per_gpu"] * e.step_s
         for k, e in (("none", none), ("full", full), ("part", part))}
    assert h["part"] - h["none"] == pytest.approx((h["full"] - h["none"]) / 4, rel=1e-9)
    assert none.step_s < part.step_s < full.step_s


def test_recomputing_at_least_a_stages_layers_is_full_recompute():
    full, all20, more = _est("full"), _est("full", 20), _est("full", 64)  # pp = 4: 20 layers per stage
    assert all20.step_s == pytest.approx(full.step_s, rel=1e-12)
    assert more.step_s == pytest.approx(full.step_s, rel=1e-12)
    assert all20.memory.worst.peak_bytes == pytest.approx(full.memory.worst.peak_bytes, rel=1e-12)


def test_memory_keeps_every_activation_of_the_layers_not_recomputed():
    from simulator.memory.activations import layer_activation_bytes

    none, full, part = (memory_breakdown(MODEL, TRAINING, Layout(recompute=r, recompute_layers=n, **KW), HW)
                        .per_stage[1] for r, n in (("none", 0), ("full", 0), ("full", 5)))  # a middle stage
    k = none.inflight_microbatches
    assert k == full.inflight_microbatches == part.inflight_microbatches
    per_layer_none = none.activations_bytes / (k * 20)
    layer_input = float(layer_activation_bytes(MODEL, TRAINING, tp=8, cp=1, micro_batch_size=1,
                                               sequence_parallel=True, recompute="full"))
    # full: k·20 layer inputs + one layer's working set; block 5: 15 layers per microbatch keep everything
    assert part.activations_bytes == pytest.approx(full.activations_bytes + k * 15 * (per_layer_none - layer_input),
                                                   rel=1e-9)
    assert full.activations_bytes < part.activations_bytes < none.activations_bytes


def test_recompute_layers_needs_full_recompute_and_a_count():
    with pytest.raises(InputError, match="recompute_layers\\(4\\) needs recompute = 'full'"):
        Layout(recompute="selective", recompute_layers=4, **KW)
    with pytest.raises(InputError, match="recompute_layers must be > 0"):
        Layout(recompute="full", recompute_layers=-2, **KW)


def test_megatron_block_recompute_imports_and_emits_back(tmp_path, capsys):
    from pathlib import Path

    from simulator.cli import main
    from simulator.spec.scenario import load_scenario

    src = (Path(__file__).parent / "data" / "configs" / "megatron_llama3_70b.sh").read_text()
    script = tmp_path / "run.sh"
    assert "--recompute-granularity selective" in src
    script.write_text(src.replace("--recompute-granularity selective", "--recompute-granularity full "
                                  "--recompute-method block --recompute-num-layers 5"))
    out = tmp_path / "s.toml"

    def run(args):
        with pytest.raises(SystemExit) as e:
            main([str(a) for a in args])
        return e.value.code, capsys.readouterr()

    code, io = run(["import", "megatron", script, "--out", out])
    assert code == 0, io.err
    assert "recompute-method" not in io.out  # understood: not reported as something parasim cannot do
    sc = load_scenario(str(out))
    assert (sc.layout.recompute, sc.layout.recompute_layers) == ("full", 5)
    code, io = run(["emit", "megatron", out])
    flags = " ".join(io.out.replace("\\\n", " ").split())
    assert code == 0 and "--recompute-method block --recompute-num-layers 5" in flags


def test_torchtitan_layer_level_ac_is_full_recompute_of_every_kth_layer(tmp_path, capsys):
    """torchtitan's selective_ac_option = k checkpoints every k-th block of a stage
    (activation_checkpoint.py `_apply_ac_to_transformer_block`): ⌊L/k⌋ layers fully recomputed."""
    from pathlib import Path

    from simulator.cli import main
    from simulator.spec.scenario import load_scenario

    src = (Path(__file__).parent / "data" / "configs" / "torchtitan_llama3_8b.toml").read_text()
    assert 'selective_ac_option = "op"' in src
    job, out = tmp_path / "job.toml", tmp_path / "s.toml"
    job.write_text(src.replace('selective_ac_option = "op"', 'selective_ac_option = "3"'))

    def run(args):
        with pytest.raises(SystemExit) as e:
            main([str(a) for a in args])
        return e.value.code, capsys.readouterr()

    code, io = run(["import", "torchtitan", job, "--gpus", 16, "--out", out])
    assert code == 0, io.err
    sc = load_scenario(str(out))
    assert (sc.layout.recompute, sc.layout.recompute_layers) == ("full", 32 // 3)  # 32 layers, pp 1
    code, io = run(["emit", "torchtitan", out])
    assert code == 0 and 'selective_ac_option = "3"' in io.out


def test_a_sweep_with_recompute_layers_gives_the_estimates_rows():
    from types import SimpleNamespace

    from simulator.sweep import SweepSpace, run_sweep

    sc = SimpleNamespace(model=MODEL, training=TRAINING, hardware=HW, num_gpus=64, sweep={}, name="t")
    space = SweepSpace(tp=(8,), pp=(4,), micro_batch_size=(1,), zero=(1,), recompute=("full",),
                       sequence_parallel=(True,), schedule=("1f1b",), recompute_layers=5)
    df = run_sweep(sc, space, allow_unsupported=True)
    row = df[(df.pp == 4) & (df.schedule == "1f1b")].iloc[0]
    est = _est("full", 5)
    assert row["step_s"] == pytest.approx(est.step_s, rel=1e-9)
    assert row["peak_bytes"] == pytest.approx(est.memory.worst.peak_bytes, rel=1e-9)
    for bad in (-1, 0):  # (0 is no count of layers: leave the key out for every layer)
        with pytest.raises(InputError, match="recompute_layers must be > 0"):
            SweepSpace(recompute_layers=bad)


@pytest.mark.parametrize("value", ['"four"', "-3", "2.5"])
def test_a_bad_recompute_layers_in_a_scenario_is_one_line(tmp_path, capsys, value):
    from simulator.cli import main

    path = tmp_path / "s.toml"
    path.write_text('[model]\npreset = "llama3-8b"\n[training]\nseq_length = 4096\nglobal_batch_size = 8\n'
                    f'[hardware]\nnum_gpus = 8\n[layout]\nrecompute = "full"\nrecompute_layers = {value}\n')
    with pytest.raises(SystemExit) as e:
        main(["estimate", str(path), "--hardware", "dgx-h100"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "recompute_layers" in err[0], err
