"""A sweep over several sets of selective-recompute modules (SweepSpace.recompute_module_sets, `sweep
--recompute-module-sets`; sweep/module_sets.py): each set's selective rows are what an estimate with that set in
the stack gives, the sets' other modes are not repeated, the table is ranked as one, and what the model or
Megatron refuses is refused in one line."""
import subprocess
import sys
from dataclasses import replace

import pytest

from simulator.errors import InputError
from simulator.estimate import estimate
from simulator.spec.layout import Layout
from simulator.spec.scenario import load_scenario
from simulator.sweep import SweepSpace, run_sweep

SETS = ("core_attn", "mla_up_proj", "mla_up_proj,mlp")


def _scenario():
    return load_scenario(None, require_layout=False, model="deepseek-v3", hardware="dgx-h100", num_gpus=1024,
                         seq_length=4096, global_batch_size=8192)


def _space(**kw):
    return SweepSpace(tp=(2,), pp=(1,), ep=(8, 16), etp=(1,), micro_batch_size=(1,), zero=(3,),
                      sequence_parallel=(True,), **kw)


def test_each_set_adds_its_selective_rows_and_they_are_the_estimates_of_that_set():
    sc = _scenario()
    df = run_sweep(sc, _space(recompute_module_sets=SETS))
    base = run_sweep(sc, _space())
    sel = base[base.recompute == "selective"]
    assert len(df) == len(base) + 2 * len(sel)  # the other sets add only their selective rows
    assert list(df["rank"]) == list(range(1, len(df) + 1))
    assert set(df.recompute_modules[df.recompute == "selective"]) == set(SETS)
    assert (df.recompute_modules[df.recompute != "selective"] == "").all()
    for _, r in df[df.recompute == "selective"].iterrows():
        st = replace(sc.training.stack, recompute_modules=r.recompute_modules)
        lay = Layout(num_gpus=1024, tp=2, cp=int(r.cp), ep=int(r.ep), etp=1, micro_batch_size=1, zero=3,
                     recompute="selective", sequence_parallel=True)
        est = estimate(sc.model, replace(sc.training, stack=st), lay, sc.hardware)
        assert float(est.peak_bytes) == pytest.approx(float(r.peak_bytes), rel=1e-9)
        if r.feasible:
            assert float(est.step_s) == pytest.approx(float(r.step_s), rel=1e-9)
    # MLA's up-projections recomputed keep less than the core attention alone, the dense MLPs less again
    peak = df[df.recompute == "selective"].pivot_table(index=["ep", "cp"], columns="recompute_modules",
                                                       values="peak_bytes")
    assert (peak["mla_up_proj"] < peak["core_attn"]).all() and (peak["mla_up_proj,mlp"] <= peak["mla_up_proj"]).all()


def test_sets_the_model_or_the_sweep_cannot_take_are_refused():
    sc = _scenario()
    with pytest.raises(InputError, match="recompute_module_sets 'shared_experts,bogus'"):
        run_sweep(sc, _space(recompute_module_sets=("core_attn", "shared_experts,bogus")))
    with pytest.raises(InputError, match="leaves out"):
        run_sweep(sc, _space(recompute=("full",), recompute_module_sets=SETS))
    llama = load_scenario(None, require_layout=False, model="llama3-8b", hardware="dgx-h100", num_gpus=8,
                          seq_length=4096, global_batch_size=16)
    with pytest.raises(InputError, match="needs multi-latent attention"):
        run_sweep(llama, SweepSpace(recompute_module_sets=("core_attn", "mla_up_proj")))
    with pytest.raises(InputError, match="recompute_module_sets must be"):
        SweepSpace(recompute_module_sets=("core_attn", ""))


def test_the_cli_ranks_the_sets_together_and_emits_the_winners_modules():
    cli = [sys.executable, "-c", "from simulator.cli import main; main()", "sweep", "--model", "deepseek-v3",
           "--hardware", "dgx-h100", "--gpus", "1024", "--seq", "4096", "--global-batch", "8192", "--no-progress",
           "--recompute", "selective", "--tp", "2", "--pp", "1", "--etp", "1", "--zero", "3",
           "--recompute-module-sets", "core_attn;mla_up_proj", "--emit", "megatron", "--top", "3"]
    r = subprocess.run(cli, capture_output=True, text=True, check=True)
    assert "selective recompute of the module sets core_attn | mla_up_proj" in r.stdout
    assert "sel-rc(mla_up_proj)" in r.stdout  # (the winner: it fits where the core attention alone does not)
    flags = r.stdout.split()
    assert flags[flags.index("--recompute-modules") + 1] == "mla_up_proj"
