"""The validated error an estimate prints (issue 22): the data file's groups, the lookup order (exact, same
hardware, same GPU family, none), the sentences, and what `parasim estimate` prints. The data file's
regeneration with the docs is checked in tests/test_validate_accuracy.py."""
import configparser
import fnmatch
import json
from pathlib import Path

import pytest

from simulator.validate import validated_error as ve

ROOT = Path(__file__).resolve().parent.parent
A40, A80, H100, H200 = ("NVIDIA A100 SXM4 40GB", "NVIDIA A100 SXM4 80GB", "NVIDIA H100 SXM5 80GB",
                        "NVIDIA H200 SXM 141GB")


def _g(hardware, gpu, stack, source, step=(10, 0.2, 0.3, -0.2), mem=(0, None, None, None), gen="gen.py"):
    keys = ("runs", "median_abs_error", "max_abs_error", "mean_error")
    return {"hardware": hardware, "gpu": gpu, "gpu_family": ve.gpu_family(gpu), "stack": stack, "source": source,
            "what": "published runs", "doc": "docs/accuracy.md", "generator": gen,
            "step": dict(zip(keys, step)), "memory": dict(zip(keys, mem))}


GROUPS = [
    _g("dgx-a100-40g", A40, "fsdp", "LLMFOUNDRY", step=(139, 0.266, 0.474, -0.271)),
    _g("dgx-a100-80g", A80, "megatron", "ZB24", step=(102, 0.212, 0.299, -0.214), mem=(102, 0.02, 0.094, -0.01)),
    _g("dgx-a100-80g", A80, "megatron", "NARAYANAN21", step=(10, 0.139, 0.204, -0.12)),
    _g("dgx-a100-80g", A80, "deepspeed", "BLOOM_PREQUEL", step=(52, 0.299, 0.475, -0.317)),
    _g("dgx-h100", H100, "torchtitan", "H100_HARNESS", step=(40, 0.184, 0.344, -0.195), mem=(40, 0.045, 0.13, -0.052)),
]


def test_gpu_family_reads_the_architecture_from_the_profile_gpu_model():
    assert ve.gpu_family(A40) == ve.gpu_family(A80) == "Ampere"
    assert ve.gpu_family(H100) == ve.gpu_family(H200) == ve.gpu_family("NVIDIA H800 SXM5 80GB") == "Hopper"
    assert ve.gpu_family("NVIDIA GB200 (Blackwell GPU, 186GB)") == ve.gpu_family("NVIDIA B200 180GB") == "Blackwell"
    assert ve.gpu_family("AMD Instinct MI300X 192GB") == "CDNA 3"
    assert ve.gpu_family("some accelerator") is None and ve.gpu_family(None) is None


def test_exact_match_comes_first_and_lists_every_source_largest_first():
    f = ve.lookup("dgx-a100-80g", "megatron", A80, groups=GROUPS)
    assert f["match"] == "exact" and [g["source"] for g in f["groups"]] == ["ZB24", "NARAYANAN21"]
    head, zb, nar = f["text"]
    assert head == "measured on this hardware and stack (dgx-a100-80g, megatron):"
    assert zb == ("validated on dgx-a100-80g with the megatron stack (ZB24: published runs, docs/accuracy.md): "
                  "median |step error| 21.2 % (max 29.9 %) over 102 runs, predictions ran fast by 21 % on average; "
                  "median |memory error| 2.0 % (max 9.4 %) over 102 runs, predicted low by 1 % on average")
    assert "memory" not in nar  # no memory row compared: no memory clause


def test_the_brief_example_line():
    f = ve.lookup("dgx-a100-40g", "fsdp", A40, groups=GROUPS)
    assert f["match"] == "exact"
    assert f["text"][1] == ("validated on dgx-a100-40g with the fsdp stack (LLMFOUNDRY: published runs, "
                            "docs/accuracy.md): median |step error| 26.6 % (max 47.4 %) over 139 runs, "
                            "predictions ran fast by 27 % on average")


def test_same_hardware_other_stack_is_the_first_fallback():
    f = ve.lookup("dgx-a100-80g", "torchtitan", A80, groups=GROUPS)
    assert f["match"] == "same hardware"
    assert [g["source"] for g in f["groups"]] == ["ZB24", "BLOOM_PREQUEL", "NARAYANAN21"]  # by rows compared
    assert f["text"][0] == "no validation with the torchtitan stack on dgx-a100-80g; nearest: the same hardware with other stacks:"
    assert "with the deepspeed stack" in f["text"][2]


def test_same_gpu_family_prefers_the_same_stack_then_takes_any():
    f = ve.lookup("dgx-a100-40g", "megatron", A40, groups=GROUPS[1:])  # no 40 GB group left
    assert f["match"] == "same GPU family" and {g["source"] for g in f["groups"]} == {"ZB24", "NARAYANAN21"}
    assert f["text"][0] == "no validation on dgx-a100-40g; nearest: the same GPU family (Ampere) on other hardware:"
    f = ve.lookup("dgx-h200", "megatron", H200, groups=GROUPS)  # Hopper: only the torchtitan harness
    assert f["match"] == "same GPU family" and [g["hardware"] for g in f["groups"]] == ["dgx-h100"]
    assert "validated on dgx-h100 with the torchtitan stack" in f["text"][1]
    # the same preset with another GPU string is still "same hardware", not family
    assert ve.lookup("dgx-h100", "megatron", None, groups=GROUPS)["match"] == "same hardware"


def test_no_data_says_so():
    for hw, gpu in (("dgx-b200", "NVIDIA B200 180GB"), ("my-profile", None), ("mi300x", "AMD Instinct MI300X 192GB")):
        f = ve.lookup(hw, "megatron", gpu, groups=GROUPS)
        assert f["match"] == "none" and f["groups"] == [] and len(f["text"]) == 1
        assert f["text"][0].startswith(f"no validation data for this hardware and stack ({hw}, megatron)")
    assert "its GPU family (Blackwell)" in ve.lookup("dgx-b200", "megatron", "NVIDIA B200", groups=GROUPS)["text"][0]


def test_sign_words_and_an_unbiased_mean():
    g = _g("x", H100, "megatron", "S", step=(3, 0.1, 0.2, 0.12), mem=(3, 0.01, 0.02, 0.004))
    text = ve.describe(g)
    assert "predictions ran slow by 12 % on average" in text and "predicted within 0.5 % on average" in text


def test_stats_and_merge_keep_the_other_generator_groups():
    s = ve.stats([-0.2, 0.25, 0.0, float("nan")])
    assert s == {"runs": 3, "median_abs_error": 0.2, "max_abs_error": 0.25, "mean_error": 0.016667}  # (0.05 / 3 to DIGITS)
    assert ve.stats([]) == {"runs": 0, "median_abs_error": None, "max_abs_error": None, "mean_error": None}
    a = [_g("h1", H100, "megatron", "A", gen="a.py"), _g("h0", H100, "fsdp", "A", gen="a.py")]
    b = [_g("h0", H100, "megatron", "B", gen="b.py")]
    data = ve.merge(ve.merge(None, "a.py", a), "b.py", b)
    assert [(g["hardware"], g["generator"]) for g in data["groups"]] == [("h0", "a.py"), ("h0", "b.py"), ("h1", "a.py")]
    again = ve.merge(data, "a.py", a[:1])  # a.py rewrites its groups only
    assert [(g["hardware"], g["generator"]) for g in again["groups"]] == [("h0", "b.py"), ("h1", "a.py")]
    assert ve.dumps(data) == ve.dumps(json.loads(ve.dumps(data))) and ve.dumps(data).endswith("}\n")


def test_groups_from_results_group_by_hardware_and_the_source_stack():
    import types

    import simulator.validate as sv

    def stand_in(model, training, layout, hardware):
        step = 1.0 * model.num_layers
        return types.SimpleNamespace(step_s=step, tokens_per_s=training.tokens_per_step / step, feasible=True,
                                     reason="", memory=types.SimpleNamespace(peak_bytes=4.0 * 2**30 * model.num_layers))

    df = sv.read_runs(ROOT / "tests" / "data" / "validate" / "runs_fixture.csv")
    res, _ = sv.predict_runs(df, estimate_fn=stand_in)
    gs = ve.groups_from_results(res, doc="docs/x.md", generator="g.py", what="fixture")
    assert ve.stack_of_source("FIXTURE") == "megatron" and ve.stack_of_source("LLMFOUNDRY") == "fsdp"
    assert {(g["hardware"], g["stack"], g["source"]) for g in gs} == set(
        zip(res["hardware"], ["megatron"] * len(res), res["source_id"]))
    # the same numbers as docs/accuracy.md's fixture table (test_validate_accuracy.py): 3 step rows,
    # median 20 %, max 25 %, mean +1.7 %; 2 memory rows
    assert sum(g["step"]["runs"] for g in gs) == 3 and sum(g["memory"]["runs"] for g in gs) == 2
    assert all(g["gpu_family"] == "Ampere" and g["doc"] == "docs/x.md" for g in gs)


def test_shipped_file_is_package_data_and_every_group_is_well_formed():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    globs = [x.strip() for x in cfg["options.package_data"]["simulator"].replace(",", "\n").split()]
    rel = ve.DATA.relative_to(ROOT / "simulator").as_posix()
    assert any(fnmatch.fnmatch(rel, g) for g in globs)
    data = ve.read()
    assert data["groups"] and data["about"] == ve.ABOUT
    for g in data["groups"]:
        assert g["generator"] in ("validation/make_accuracy.py", "validation/h100_report.py",
                                  "validation/h200_report.py")
        assert (ROOT / g["doc"]).exists() and (ROOT / "stacks" / f"{g['stack']}.toml").exists()
        assert (ROOT / "hardware_profiles" / f"{g['hardware']}.toml").exists()
        assert g["step"]["runs"] + g["memory"]["runs"] > 0


@pytest.mark.parametrize("args, match", [
    (["--hardware", "dgx-h100", "--stack", "torchtitan"], "exact"),
    (["--hardware", "dgx-h100"], "exact"),  # the megatron stack: NVIDIA's NeMo recipes (DGXC_H100)
    (["--hardware", "dgx-h100", "--stack", "deepspeed"], "same hardware"),
    (["--hardware", "dgx-h200"], "same hardware"),  # the lent H200's harness steps (H200_HARNESS, torchtitan)
    (["--hardware", "dgx-h200", "--stack", "torchtitan"], "exact"),
    (["--hardware", "h200-nvl"], "same GPU family"),
    # Blackwell: NVIDIA's Megatron-Bridge recipes on DGX-B200 and DGX-B300 (MBRIDGE_B200, MBRIDGE_B300)
    (["--hardware", "dgx-b200"], "exact"),
    (["--hardware", "b300"], "exact"),
    (["--hardware", "gb200-nvl72"], "exact"),
    (["--hardware", "mi300x"], "none"),
])
def test_estimate_prints_the_validated_error(args, match, capsys):
    from simulator.cli import main

    base = ["estimate", "--model", "llama3-8b", "--gpus", "8", "--seq", "4096", "--global-batch", "16",
            "--micro-batch", "1", *args]

    def run(extra):
        with pytest.raises(SystemExit) as e:
            main(base + extra)
        out = capsys.readouterr()
        assert e.value.code == 0, out.err
        return out.out

    d = json.loads(run(["--format", "json"]))["validated_error"]
    assert d["match"] == match and d["hardware"] == args[1]
    table = run([])
    assert f"validated error     {d['text'][0]}" in table
    for line in d["text"][1:]:
        assert f"  {line}" in table
    if match == "exact" and "torchtitan" in args:
        source = "H200_HARNESS" if args[1] == "dgx-h200" else "H100_HARNESS"
        assert f"validated on {args[1]} with the torchtitan stack ({source}" in table
    elif match == "exact":
        want = {"gb200-nvl72": "gb200-nvl72 with the megatron stack (DGXC_MOE",
                "dgx-b200": "dgx-b200 with the megatron stack (MBRIDGE_B200",
                "b300": "b300 with the megatron stack (MBRIDGE_B300"}.get(args[1],
                                                                       "dgx-h100 with the megatron stack (DGXC_H100")
        assert f"validated on {want}" in table
    if match == "none":
        assert "no validation data for this hardware and stack (mi300x, megatron)" in table
