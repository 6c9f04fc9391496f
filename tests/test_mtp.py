"""Multi-token prediction (ModelSpec.mtp_layers: DeepSeek-V3 §2.2, Megatron-Core --mtp-num-layers): D modules on
the last pipeline stage, each a transformer layer of the last layer's kind, a projection 2h -> h, two norms, and
the shared embedding and LM head. Checked against the released model card's count, Megatron-Core's FLOP terms
for MTP and its placement of the embedding copy."""
import numpy as np
import pytest

from simulator.cost import compute as C
from simulator.cost import flops as F
from simulator.errors import InputError
from simulator.spec.hardware import load_hardware
from simulator.spec.load import load_model
from simulator.spec.placement import stage_param_split, stage_placement
from simulator.spec.scenario import load_scenario
from simulator.spec.training import Training

DSV3 = load_model("deepseek-v3")
MTP = DSV3.with_(mtp_layers=1)
TR = Training(seq_length=4096, global_batch_size=1)


def test_the_released_checkpoint_adds_up_to_the_model_card():
    # deepseek-ai/DeepSeek-V3 model card: 685B total = 671B main model + 14B MTP module. The checkpoint's MTP layer
    # (model.layers.61) also stores its own embed_tokens and shared_head.head (2·V·h), which training shares
    h, V = DSV3.hidden_size, DSV3.vocab_size
    checkpoint = DSV3.total_params() + MTP.mtp_params() + 2 * V * h
    assert checkpoint == pytest.approx(685e9, rel=0.002)
    assert round(DSV3.total_params() / 1e9) == 671 and MTP.mtp_layer_is_moe
    assert MTP.summary()["mtp_params"] == MTP.mtp_params() and "mtp_params" not in DSV3.summary()


def test_mtp_flops_are_megatrons_terms():
    # Megatron-Core num_floating_point_operations with mtp_num_layers D: D more layers of the last layer's kind
    # (moe here), 3·2·D·(2h²) per token for the projections (their norms carry no matmul FLOPs) and the logit term
    # times (D + 1): 3·2·h·V per token per head
    s, h, V = TR.seq_length, DSV3.hidden_size, DSV3.vocab_size
    one_more_moe = DSV3.with_(num_layers=DSV3.num_layers + 1)  # layer 62 is routed, as layer 61 is
    layer = F.model_flops_per_sequence(one_more_moe, TR) - F.model_flops_per_sequence(DSV3, TR)
    want = layer + 6 * s * 2 * h * h + 6 * s * h * V
    assert F.model_flops_per_sequence(MTP, TR) - F.model_flops_per_sequence(DSV3, TR) == pytest.approx(want, rel=1e-9)


def test_the_head_stage_holds_the_modules_and_its_own_embedding():
    for pp, extra_embedding in ((16, True), (1, False)):
        split = [stage_param_split(m, stage_placement(m, pp=pp, layers_per_stage=(3,) + (4,) * 14 + (2,)
                                                      if pp == 16 else None)) for m in (DSV3, MTP)]
        diff = {k: split[1][k] - split[0][k] for k in split[0]}
        total = sum(diff.values())
        want = MTP.mtp_params() + (DSV3.vocab_size * DSV3.hidden_size if extra_embedding else 0)
        assert int(total[-1]) == want and not np.any(total[:-1]), pp  # the last stage only


def test_the_head_stage_runs_the_modules():
    hw = load_hardware("dgx-h100")
    kw = dict(tp=2, ep=64, etp=1, sequence_parallel=True, modes=("none",))
    base, mtp = (C.layer_basis_times_by_mode(m, TR, hw, **kw)["none"] for m in (DSV3, MTP))
    head, layer = C.BASIS.index("head"), C.BASIS.index("moe_layer")
    f = C.BASIS_KEYS.index("forward_s")
    # the head block gains a routed layer, the projection, the norms and a second LM head: more than a layer
    assert mtp[f, head] > base[f, head] + base[f, layer]
    assert np.array_equal(np.delete(mtp, head, axis=1), np.delete(base, head, axis=1))


def test_scenarios_and_megatron_imports_set_the_modules(tmp_path):
    p = tmp_path / "s.toml"
    split = ", ".join(["3"] + ["4"] * 14 + ["2"])
    p.write_text('[model]\npreset = "deepseek-v3"\nmtp_layers = 1\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 1024\n'
                 '[training]\nseq_length = 4096\nglobal_batch_size = 8192\n[layout]\ntp = 2\npp = 16\nep = 64\n'
                 f'etp = 1\nsequence_parallel = true\nlayers_per_stage = [{split}]\n')
    assert load_scenario(str(p)).model.mtp_layers == 1
    p.write_text(p.read_text().replace("mtp_layers = 1", "mtp_layers = 1.5"))
    with pytest.raises(InputError, match=r"mtp_layers in .* must be an integer from 0 to 16, got 1.5"):
        load_scenario(str(p))
    from helpers.megatron_dsv3 import import_then_emit

    sc, emitted = import_then_emit(tmp_path, "--mtp-num-layers 1")
    assert sc.model.mtp_layers == 1 and "--mtp-num-layers 1" in emitted


def test_the_head_stage_pays_the_mtp_layers_collectives():
    # an MTP module's layer has the collectives of any layer of its kind: with EP, its dispatch and combine
    from simulator.estimate import estimate
    from simulator.spec.layout import Layout

    hw = load_hardware("dgx-h100")
    tr = Training(seq_length=4096, global_batch_size=64)
    lay = Layout(num_gpus=128, tp=1, pp=2, ep=64, layers_per_stage=(31, 30))
    parts = [estimate(m, tr, lay, hw, keep_stage_times=True).stage_times["stage"] for m in (DSV3, MTP)]
    head_ep = [float(p["ep_f"][0, -1]) for p in parts]
    moe_per_layer = float(parts[0]["ep_f"][0, -1]) / 30  # 30 routed layers on the head stage
    assert head_ep[1] == pytest.approx(head_ep[0] + moe_per_layer, rel=1e-9)


def test_the_flag_sets_the_modules_and_refuses_nonsense():
    import subprocess
    import sys

    base = [sys.executable, "-c", "from simulator.cli import main; main()", "estimate", "--model", "deepseek-v3",
            "--hardware", "dgx-h100", "--gpus", "64", "--ep", "64", "--seq", "4096", "--global-batch", "64"]
    ok = subprocess.run(base + ["--mtp-layers", "1"], capture_output=True, text=True)
    assert ok.returncode == 0 and "+ 11.61 B MTP" in ok.stdout.splitlines()[0]
    bad = subprocess.run(base + ["--mtp-layers", "17"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --mtp-layers must be an integer from 0 to 16, got 17"
