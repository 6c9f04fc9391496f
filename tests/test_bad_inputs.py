"""Bad-input corpus (issue 24, input side): every case feeds one bad file, value or flag through the CLI
and asserts exit code 2, exactly one stderr line, starting `error:`, that names the key and the value as
the user wrote them (a TOML value may show as written or as Python prints it: `1e30` or `1e+30`), no
traceback, and the whole run within CASE_SECONDS (a SIGALRM timer stops a hang, e.g. a FIFO read).

The CLI runs in process (`simulator.cli.main` inside click's CliRunner isolation; Python warnings are
written to its stderr as the real CLI would) and, for a few cases, as the installed `parasim` script.
A case whose fix belongs to a module of another owner is xfail(strict=True) naming that module: it turns
into a failure (to un-mark) once fixed. Families: files, parsers, overflow, bounds, layout, hardware.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import traceback
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from simulator.cli import main
from simulator.spec.rules import BOUNDS

ROOT = Path(__file__).resolve().parent.parent
CASE_SECONDS = 5
HW_TEXT = (ROOT / "hardware_profiles" / "dgx-h100.toml").read_text()
MODEL_TOML = (ROOT / "models" / "llama3-8b.toml").read_text()
CONFIG_JSON = json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                          "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                          "vocab_size": 128256})
BASE = {"model": {"preset": '"llama3-8b"'}, "hardware": {"num_gpus": "8"},
        "training": {"seq_length": "4096", "global_batch_size": "64"}, "layout": {"tp": "1", "pp": "1"}}
FLAGS = {"--model": "llama3-8b", "--hardware": "dgx-h100", "--gpus": "8", "--seq": "4096", "--global-batch": "64"}
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


# ---- running the CLI ----------------------------------------------------------------------------
class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout(f"no answer within {CASE_SECONDS} s")


def run_cli(argv: list[str]) -> tuple[int, str, float, str]:
    """(exit code, stderr, seconds, stdout) of `parasim argv` in this process; an escaped exception is
    written to stderr as a traceback (exit 1), warnings as the interpreter would show them."""
    with CliRunner().isolation() as (out, err, _), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for cat in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", cat)
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        t0 = time.perf_counter()
        try:
            main(list(argv))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - what a user would see: a traceback
            sys.stderr.write(traceback.format_exc())
            code = 1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        seconds = time.perf_counter() - t0
        for w in caught:
            sys.stderr.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
        sys.stderr.flush()
        sys.stdout.flush()
        return code, err.getvalue().decode("utf-8", "replace"), seconds, out.getvalue().decode("utf-8", "replace")


def run_script(argv: list[str]) -> tuple[int, str, float, str]:
    """The same through the installed console script (a subprocess)."""
    exe = Path(sys.executable).parent / "parasim"
    if not exe.exists():
        pytest.skip("no installed parasim script next to this interpreter")
    t0 = time.perf_counter()
    try:
        p = subprocess.run([str(exe), *argv], capture_output=True, text=True, errors="replace",
                           timeout=CASE_SECONDS + 5)
    except subprocess.TimeoutExpired:
        return 1, "Traceback: timed out", CASE_SECONDS + 5, ""
    return p.returncode, p.stderr, time.perf_counter() - t0, p.stdout


def _pattern(needle: str) -> str:
    """A needle as a whole word: `tp` not in `tpp`, `3` not in `1.35` or `32`."""
    before = r"(?<!\w)" if re.match(r"[A-Za-z_]", needle) else r"(?<![\w.])" if re.match(r"[\w+-]", needle) else ""
    after = r"(?!\w|\.\d)" if re.search(r"\w$", needle) else ""
    return before + re.escape(needle) + after


def check(result, needles) -> None:
    code, stderr, seconds, _ = result
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = stderr.splitlines()
    assert code == 2, f"exit {code}; stderr: {stderr[-2000:]!r}"
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-2000:]
    for alts in needles:
        alts = (alts,) if isinstance(alts, str) else alts
        assert any(re.search(_pattern(a), lines[0]) for a in alts), f"none of {alts!r} in {lines[0][:600]!r}"
    assert seconds < CASE_SECONDS, f"took {seconds:.1f} s"


# ---- building inputs ----------------------------------------------------------------------------
def tq(s: str) -> str:
    """`s` as a TOML basic string."""
    return json.dumps(s)


def as_written(raw: str) -> tuple[str, str]:
    """A TOML value as written and as Python prints its parsed value (`1e30`, `1e+30`)."""
    return raw, repr(tomllib.loads(f"v = {raw}")["v"])


def hw_text(edits: dict | None = None, extra: str = "") -> str:
    """The dgx-h100 profile with {(section, key): raw TOML value, or None to drop} set, plus `extra`."""
    lines, cur, todo = [], None, dict(edits or {})

    def flush():
        for (sec, key), raw in list(todo.items()):
            if sec == cur and raw is not None:
                lines.append(f"{key} = {raw}")
                del todo[sec, key]
    for line in HW_TEXT.splitlines():
        if line.startswith("["):
            flush()
            cur = line.strip()[1:-1]
        elif cur and (cur, line.split("=")[0].strip()) in todo:
            raw = todo.pop((cur, line.split("=")[0].strip()))
            if raw is not None:
                lines.append(f"{line.split('=')[0].strip()} = {raw}")
            continue
        lines.append(line)
    flush()
    return "\n".join(lines) + "\n" + extra


def hw_file(tmp: Path, edits=None, extra: str = "", name: str = "hw.toml") -> str:
    p = tmp / name
    p.write_text(hw_text(edits, extra))
    return str(p)


def scenario_text(tmp: Path, sections: dict | None = None) -> str:
    doc = {sec: dict(keys) for sec, keys in BASE.items()}
    doc["hardware"]["path"] = tq(hw_file(tmp))
    for sec, keys in (sections or {}).items():
        for key, raw in keys.items():
            if raw is None:
                doc.setdefault(sec, {}).pop(key, None)
            else:
                doc.setdefault(sec, {})[key] = raw
    return "".join(f"[{sec}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()) for sec, keys in doc.items())


def scenario(tmp: Path, sections: dict | None = None) -> str:
    p = tmp / "scen.toml"
    p.write_text(scenario_text(tmp, sections))
    return str(p)


def flags(cmd: str = "memory", **over) -> list[str]:
    """`cmd` with the base flags, `over` ({'--seq': '1'} via seq='1'; None drops a flag) merged in."""
    d = dict(FLAGS)
    d.update({"--" + k.replace("_", "-"): v for k, v in over.items()})
    return [cmd] + [x for k, v in d.items() if v is not None for x in (k, v)]


CASES: list = []


def case(family: str, name: str, build, xfail: str | None = None, skip: str | None = None):
    """Register a case: build(tmp) -> (argv, needles)."""
    marks = ([pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []) + \
            ([pytest.mark.skip(reason=skip)] if skip else [])
    CASES.append(pytest.param(build, False, id=f"{family}-{name}", marks=marks))


# ---- family: files --------------------------------------------------------------------------------
def _made(p: Path, make) -> str:
    make(p)
    return str(p)


def _bytes(p: Path, data: bytes | str) -> str:
    return _made(p, lambda q: q.write_bytes(data.encode() if isinstance(data, str) else data))


def _unreadable(p: Path, text: str) -> str:
    _bytes(p, text)
    return _made(p, lambda q: q.chmod(0))


HF_ONLY, HF_JSON_READ = ("hf-config",), ("hf-config", "model-json")
FILE_KINDS = {  # kind: (make(path to use, valid content) -> path as written, targets whose fix is in hf.py)
    "missing": (lambda p, c: str(p), ()),
    "directory": (lambda p, c: _made(p, Path.mkdir), HF_ONLY),
    "directory-slash": (lambda p, c: _made(p, Path.mkdir) + "/", HF_ONLY),
    "empty-path": (lambda p, c: "", HF_ONLY),
    "name-too-long": (lambda p, c: str(p.with_name("n" * 300 + p.suffix)), HF_ONLY),
    "path-too-long": (lambda p, c: str(p.parent / ("d/" * 2100 + p.name)), HF_ONLY),
    "fifo": (lambda p, c: _made(p, os.mkfifo), HF_ONLY),
    "dev-null": (lambda p, c: "/dev/null", ()),
    "symlink-loop": (lambda p, c: _made(p, lambda q: q.symlink_to(q)), HF_ONLY),
    "unreadable": (_unreadable, HF_ONLY),
    "latin-1": (lambda p, c: _bytes(p, ("# café\n" + c).encode("latin-1")), HF_JSON_READ),
    "binary": (lambda p, c: _bytes(p, b"\xff\xfe\x00\x81\x9c" * 50), HF_JSON_READ),
    "utf-16": (lambda p, c: _bytes(p, c.encode("utf-16")), HF_JSON_READ),
    "utf-16-be": (lambda p, c: _bytes(p, c.encode("utf-16-be")), ()),
    "nul-byte": (lambda p, c: _bytes(p, c[:20] + "\x00" + c[20:]), ()),
    "utf-8-bom": (lambda p, c: _bytes(p, "\ufeff[x\n"), ()),
}
FILE_TARGETS = {  # target: (suffix, valid content(tmp), argv(tmp, path as written))
    "scenario": (".toml", scenario_text, lambda t, p: ["memory", p]),
    "hardware-flag": (".toml", lambda t: HW_TEXT, lambda t, p: flags(hardware=p)),
    "hardware-path": (".toml", lambda t: HW_TEXT, lambda t, p: ["memory", scenario(t, {"hardware": {"path": tq(p)}})]),
    "model-toml": (".toml", lambda t: MODEL_TOML, lambda t, p: flags(model=p)),
    "model-json": (".json", lambda t: CONFIG_JSON, lambda t, p: flags(model=p)),
    "hf-config": (".json", lambda t: CONFIG_JSON,
                  lambda t, p: ["memory", scenario(t, {"model": {"preset": None, "hf_config": tq(p)}})]),
}


def _file_case(target: str, kind: str):
    suffix, content, argv = FILE_TARGETS[target]
    make, _ = FILE_KINDS[kind]

    def build(tmp):
        path = make(tmp / f"f{suffix}", content(tmp))
        return argv(tmp, path), [path.rstrip("/") or "''"]
    case("files", f"{target}-{kind}", build,
         skip="root reads a chmod 000 file" if kind == "unreadable" and IS_ROOT else None)


for _t in FILE_TARGETS:
    for _k in FILE_KINDS:
        if (_t, _k) != ("hardware-path", "empty-path"):  # path = "" names the scenario's folder: `directory`
            _file_case(_t, _k)
case("files", "hardware-flag-blank", lambda t: (flags(hardware="  "), ["hardware", "'  '"]))
case("files", "model-flag-empty", lambda t: (flags(model=""), ["model", "''"]))
case("files", "scenario-preset-typo", lambda t: (["memory", "llama3-8b-8xh10"], ["'llama3-8b-8xh10'"]))


# ---- family: parsers ----------------------------------------------------------------------------
def _nested(shape: str, depth: int) -> str:
    return {"array": "[" * depth + "1" + "]" * depth,
            "table": "{a = " * depth + "1" + "}" * depth,
            "mixed": "[{a = " * (depth // 2) + "1" + "}]" * (depth // 2)}[shape]


def _parser_case(target: str, shape: str, depth: int):
    def build(tmp):
        if target == "scenario":
            p = scenario(tmp, {"training": {"seq_length": _nested(shape, depth)}})
            return ["memory", p], [p]
        if target in ("hardware-flag", "model-toml"):
            p = tmp / "deep.toml"
            base = HW_TEXT if target == "hardware-flag" else MODEL_TOML
            p.write_text(f"deep = {_nested(shape, depth)}\n" + base)
            return flags(**{target.split("-")[0]: str(p)}), [str(p)]
        p = tmp / "config.json"
        p.write_text(_nested(shape, depth).replace("a = ", '"a": '))
        if target == "model-json":
            return flags(model=str(p)), [str(p)]
        return ["memory", scenario(tmp, {"model": {"preset": None, "hf_config": tq(str(p))}})], [str(p)]
    case("parsers", f"{target}-{shape}-{depth}", build)


for _t in ("scenario", "hardware-flag", "model-toml", "model-json", "hf-config"):
    for _shape in ("array", "table", "mixed"):
        for _depth in (100, 2000, 100_000):
            _parser_case(_t, _shape, _depth)


# ---- family: overflow (integers too large for numpy) -------------------------------------------------
SECTION = {"seq_length": "training", "global_batch_size": "training", "micro_batch_size": "layout",
           "num_gpus": "hardware", "tp": "layout", "pp": "layout", "dp": "layout", "cp": "layout", "ep": "layout",
           "vpp": "layout", "zero": "layout", "shard_group_size": "layout"}
FLAG = {"num_gpus": "--gpus", "seq_length": "--seq", "global_batch_size": "--global-batch",
        "micro_batch_size": "--micro-batch", "tp": "--tp", "pp": "--pp", "dp": "--dp", "cp": "--cp", "ep": "--ep",
        "vpp": "--vpp", "zero": "--zero", "shard_group_size": "--shard-group"}
HUGE = {"2e63": str(2**63), "2e64": str(2**64), "1e100": "1" + "0" * 100, "1e400": "1" + "0" * 400,
        "float1e30": "1e30", "float1e400": "1e400", "neg2e63": str(-2**63 - 1)}


def _toml_case(family: str, key: str, raw: str, name: str, section: str | None = None, extra=()):
    def build(tmp):
        return ["memory", scenario(tmp, {section or SECTION[key]: {key: raw}})], [key, as_written(raw), *extra]
    case(family, f"toml-{key}-{name}", build)


def _flag_case(family: str, key: str, value: str, name: str, cmd: str = "memory", extra=(), xfail=None):
    def build(tmp):
        return flags(cmd, **{FLAG[key][2:]: value}), [(FLAG[key], key), value, *extra]
    case(family, f"{cmd}-{FLAG[key]}-{name}", build, xfail=xfail)


for _key in SECTION:
    for _name, _raw in HUGE.items():
        _toml_case("overflow", _key, _raw, _name)
    for _name in ("2e63", "1e100", "neg2e63"):
        _flag_case("overflow", _key, HUGE[_name], _name)
        _flag_case("overflow", _key, HUGE[_name], _name, cmd="estimate")
    _flag_case("overflow", _key, "1e30", "float1e30")
_toml_case("overflow", "micro_batch_size", HUGE["2e63"], "2e63-in-training", section="training")
for _key in ("num_gpus", "seq_length", "global_batch_size"):
    for _name in ("2e63", "1e100", "neg2e63"):
        _flag_case("overflow", _key, HUGE[_name], _name, cmd="sweep")
for _key in ("tp", "pp", "cp", "micro_batch_size"):
    for _name in ("2e63", "1e100"):
        _flag_case("overflow", _key, HUGE[_name], _name, cmd="sweep")


# ---- family: bounds (documented upper limits, spec/rules.py BOUNDS) -----------------------------------
for _key in ("seq_length", "global_batch_size", "micro_batch_size", "num_gpus", "tp", "pp", "dp", "cp", "ep",
             "vpp", "shard_group_size"):
    _lim = BOUNDS[_key][0]
    _toml_case("bounds", _key, str(_lim + 1), "limit+1", extra=[str(_lim)])
    _toml_case("bounds", _key, f"{_lim * 1024}.0", "float-limit*1024", extra=[str(_lim)])
    _flag_case("bounds", _key, str(_lim + 1), "limit+1", extra=[str(_lim)])
_toml_case("bounds", "seq_length", "1e30", "issue-1e30", extra=[str(BOUNDS["seq_length"][0])])


# ---- family: layout rules ----------------------------------------------------------------------------
LPS = {"negative": "[-1, 33]", "halves": "[16.5, 15.5]",
       "near-int": "[16.000001, 15.999999]", "strings": '["16", "16"]', "bool": "[true, 31]",
       "nested": "[[16], [16]]", "scalar": "32", "text": '"16,16"', "empty": "[]", "too-many": "[16, 16, 0]",
       "huge": f"[{2**63}, 1]", "float-huge": "[1e30, 1]", "nan": "[nan, 32]", "inf": "[inf, 32]",
       "sum-ok-negative": "[33, -1]", "table": "{a = 16}"}
for _name, _raw in LPS.items():
    case("layout", f"layers_per_stage-{_name}", lambda t, raw=_raw: (
        ["memory", scenario(t, {"layout": {"pp": "2", "layers_per_stage": raw}})],
        ["layers_per_stage", as_written(raw)]))
for _tp, _cp in ((1, 3), (1, 5), (1, 6), (1, 7), (1, 12), (1, 64), (8, 8), (4, 16), (2, 32)):
    case("layout", f"ulysses-tp{_tp}-cp{_cp}", lambda t, tp=_tp, cp=_cp: (
        ["memory", scenario(t, {"hardware": {"num_gpus": str(tp * cp)}, "training": {"seq_length": str(2048 * cp)},
                                "layout": {"tp": str(tp), "cp": str(cp), "cp_algorithm": '"ulysses"'}})],
        ["num_attention_heads", f"cp({cp})", "ulysses"]))
for _cp in (3, 6, 64):
    for _cmd in ("memory", "estimate"):
        case("layout", f"ulysses-flags-{_cmd}-cp{_cp}", lambda t, cp=_cp, cmd=_cmd: (
            flags(cmd, gpus=str(cp), seq=str(2048 * cp), cp=str(cp), cp_algorithm="ulysses"),
            ["num_attention_heads", f"cp({cp})", "ulysses"]))


# ---- family: routing settings on a dense model (llama3-8b has no experts: no number for them) -------------
for _key, _raw in (("moe_capacity_factor", "1.25"), ("moe_imbalance", "1.5")):
    for _cmd in ("memory", "estimate", "sweep"):
        case("layout", f"dense-{_key}-{_cmd}", lambda t, key=_key, raw=_raw, cmd=_cmd: (
            [cmd, scenario(t, {"training": {key: raw}})], [key, raw, "dense", "in [training] of"]))
        case("layout", f"dense-{_key}-flag-{_cmd}", lambda t, key=_key, raw=_raw, cmd=_cmd: (
            flags(cmd, **{key: raw}), ["--" + key.replace("_", "-"), raw, "dense"]))
# a [training] value the checks refuse names the file it came from, as a [stack] value does
for _key, _raw, _needle in (("moe_imbalance", "0.5", "moe_imbalance"), ("grad_dtype", '"int8"', "int8"),
                            ("optimizer", '"lion"', "lion")):
    case("layout", f"training-{_key}-names-file", lambda t, key=_key, raw=_raw, needle=_needle: (
        ["estimate", scenario(t, {"training": {key: raw}})], [needle, "in [training] of"]))


# multi-token-prediction modules beside a preset: a whole number from 0 to 16, named with the file
for _name, _raw in (("negative", "-1"), ("too-many", "17"), ("float", "1.5"), ("text", '"one"'), ("bool", "true")):
    case("layout", f"mtp_layers-{_name}", lambda t, raw=_raw: (
        ["estimate", scenario(t, {"model": {"mtp_layers": raw}})], ["mtp_layers", as_written(raw), "[model]"]))


# the experts' TP degree (a whole number the expert grid takes) and the new stack switches (true or false)
for _name, _raw in (("zero", "0"), ("negative", "-2"), ("float", "1.5"), ("text", '"one"'), ("huge", str(2**40))):
    case("layout", f"etp-{_name}", lambda t, raw=_raw: (
        ["estimate", scenario(t, {"model": {"preset": '"mixtral-8x7b"'}, "layout": {"ep": "8", "etp": raw}})],
        ["etp", as_written(raw)]))
case("layout", "etp-grid", lambda t: (
    ["estimate", scenario(t, {"model": {"preset": '"mixtral-8x7b"'}, "layout": {"ep": "8", "etp": "4"}})],
    ["etp(4)", "ep(8)", "tp(1)"]))
# what an FP8 GEMM keeps for backward and how the loss is computed: one of their named choices
for _key, _raw in (("fp8_saved_inputs", "fp8"), ("cross_entropy", "te2"), ("moe_router_probs", "combine"),
                   ("fp8_recipe", "block128")):
    case("layout", f"stack-{_key}-choice", lambda t, key=_key, raw=_raw: (
        ["estimate", scenario(t, {"stack": {key: f'"{raw}"'}})], [key, raw]))
for _key in ("whole_experts_with_ep", "ep_dispatch_fp8", "activation_input_fp8"):
    case("layout", f"stack-{_key}-text", lambda t, key=_key: (
        ["estimate", scenario(t, {"stack": {key: '"yes"'}})], [key, "yes"]))

# the SwiGLU's FP8 input store on a model without SwiGLU (Megatron-Core refuses it)
case("layout", "stack-activation_input_fp8-gelu", lambda t: (
    ["estimate", scenario(t, {"model": {"preset": '"gpt2-124m"'}, "stack": {"activation_input_fp8": "true"}})],
    ["activation_input_fp8", "SwiGLU"]))

# what selective recompute re-runs (Megatron's modules): a list of known module names the framework takes, named
# with the file; modules the model lacks and Megatron's FP8 refusal
for _name, _raw, _says in (("unknown", '["core_attn", "attention"]', ["recompute_modules", "attention"]),
                           ("empty", "[]", ["recompute_modules", "non-empty"]),
                           ("number", "[1]", ["recompute_modules", "[1]"]),
                           ("not-a-list", "true", ["recompute_modules", "True"])):
    case("layout", f"stack-recompute_modules-{_name}", lambda t, raw=_raw, says=_says: (
        ["estimate", scenario(t, {"stack": {"recompute_modules": raw}, "layout": {"recompute": '"selective"'}})],
        says))
case("layout", "stack-recompute_modules-no-mla", lambda t: (
    ["estimate", scenario(t, {"stack": {"recompute_modules": '["mla_up_proj"]'},
                              "layout": {"recompute": '"selective"'}})], ["mla_up_proj", "multi-latent attention"]))
case("layout", "stack-recompute_modules-framework", lambda t: (
    ["estimate", scenario(t, {"stack": {"preset": '"deepspeed"', "recompute_modules": '["moe"]'},
                              "layout": {"recompute": '"selective"'}})],
    ["recompute_modules", "moe", "core_attn only"]))
case("layout", "stack-recompute_modules-not-selective", lambda t: (
    ["estimate", scenario(t, {"stack": {"recompute_modules": '["mlp"]'}, "layout": {"recompute": '"full"'}})],
    ["recompute_modules", "mlp", "'full'"]))
case("layout", "stack-runs-selective_modules", lambda t: (
    ["estimate", scenario(t, {"stack.runs": {"selective_modules": '["core_attn", "all"]'}})],
    ["selective_modules", "all"]))


# ---- family: hardware profiles -------------------------------------------------------------------------
POSITIVE = {("gpu", "hbm_gb"): (), ("gpu", "hbm_usable_mib"): (), ("gpu", "hbm_gb_per_s"): (),
            ("gpu", "blas_workspace_mib"): (),
            ("gpu.peak_tflops", "bf16"): (), ("gpu.peak_tflops", "fp8"): (), ("node", "nvlink_gb_per_s"): (),
            ("node", "nvlink_link_gb_per_s"): (), ("network", "nic_gbit_per_s"): (),
            ("network", "leaf_oversubscription"): ("1e308",)}
BAD_POSITIVE = {"zero": "0", "negative": "-80", "inf": "inf", "minus-inf": "-inf", "nan": "nan", "text": '"fast"',
                "bool": "true", "overflow": "1e308", "list": "[80]"}
LATENCY = [("node", "nvlink_latency_us"), ("node", "nvls_latency_us"), ("network", "ib_latency_us")]
BAD_LATENCY = {"negative": "-1", "inf": "inf", "nan": "nan", "text": '"2us"', "huge-int": "1" + "0" * 400}
COUNTS = [("node", "gpus_per_node"), ("node", "nvlink_domain_gpus"), ("network", "nics_per_node"),
          ("network", "nodes_per_leaf")]
BAD_COUNT = {"zero": "0", "negative": "-8", "fraction": "8.5", "float": "8.0", "2e63": str(2**63), "text": '"8"',
             "float1e30": "1e30", "limit+1": str(2**20 + 1)}


def _hw_case(sec: str, key: str, raw: str, name: str, needles=None, inline=False):
    def build(tmp):
        p = hw_file(tmp, {(sec, key): raw})
        need = needles if needles is not None else [key, as_written(raw)]
        if inline:
            return ["memory", _inline_hw_scenario(tmp, Path(p).read_text())], ["[hardware]", "scen.toml", *need]
        return flags(hardware=p), ["hw.toml", *need]
    case("hardware", f"{'inline-' if inline else ''}{sec}.{key}-{name}", build)


def _inline_hw_scenario(tmp: Path, profile: str) -> str:
    top, rest = profile.split("\n[", 1)
    text = scenario_text(tmp, {"hardware": {"path": None}}).replace("[hardware]\n", "[hardware]\n" + top + "\n")
    p = tmp / "scen.toml"
    p.write_text(text + "\n" + re.sub(r"(?m)^\[", "[hardware.", "[" + rest))
    return str(p)


for (_sec, _key), _skip in POSITIVE.items():
    for _name, _raw in BAD_POSITIVE.items():
        if _raw not in _skip:
            _hw_case(_sec, _key, _raw, _name)
for (_sec, _key) in LATENCY:
    for _name, _raw in BAD_LATENCY.items():
        _hw_case(_sec, _key, _raw, _name)
for (_sec, _key) in COUNTS:
    for _name, _raw in BAD_COUNT.items():
        _hw_case(_sec, _key, _raw, _name)
for _sec, _key, _raw in (("gpu", "hbm_gb", "-80"), ("node", "nvlink_gb_per_s", "nan"), ("node", "gpus_per_node", "0"),
                         ("efficiency.gemm", "x", "[]")):
    _hw_case(_sec, _key, _raw, "as-scenario-table", inline=True)
_hw_case("node", "nvlink_domain_gpus", "12", "not-multiple", needles=["nvlink_domain_gpus", "12", "gpus_per_node", "8"])
_hw_case("node", "nvlink_link_gb_per_s", "451", "above-aggregate", needles=["nvlink_link_gb_per_s", "451", "450"])
_hw_case("node", "nvlink_topology", '"ring"', "unknown-topology")
_hw_case("node", "nvls", '"yes"', "not-bool")
_hw_case("gpu.peak_tflops", "bf61", "989", "unknown-dtype", needles=["bf61"])
CURVE = {"x": "[1e8, 1e9, 1.6e10, 1.28e11]", "efficiency": "[0.1, 0.5, 0.7, 0.8]"}  # a good table of 4 points
EFFICIENCY = {  # name: ({key: raw}, needles besides file and table)
    "unequal": ({"efficiency": "[0.1, 0.5, 0.8]"}, ["x", "efficiency", "4", "3"]),
    "both-empty": ({"x": "[]", "efficiency": "[]"}, ["x", "[]"]),
    "x-empty": ({"x": "[]"}, ["x", "[]"]),
    "efficiency-empty": ({"efficiency": "[]"}, ["efficiency", "[]"]),
    "decreasing": ({"x": "[3, 2, 1, 0.5]"}, ["x", "2", "3"]),
    "repeated": ({"x": "[1e8, 1e9, 1e9, 1e11]"}, ["x", ("1e9", "1000000000.0")]),
    "x-zero": ({"x": "[0, 1e9, 1.6e10, 1.28e11]"}, ["x", "0"]),
    "x-negative": ({"x": "[-1e8, 1e9, 1.6e10, 1.28e11]"}, ["x", ("-1e8", "-100000000.0")]),
    "x-nan": ({"x": "[nan, 1e9, 1.6e10, 1.28e11]"}, ["x", "nan"]),
    "x-inf": ({"x": "[1e8, 1e9, 1.6e10, inf]"}, ["x", "inf"]),
    "x-huge-int": ({"x": f"[1e8, 1e9, 1.6e10, {10**400}]"}, ["x", str(10**400)]),
    "eff-zero": ({"efficiency": "[0, 0.5, 0.7, 0.8]"}, ["efficiency", "0"]),
    "eff-above-2": ({"efficiency": "[0.1, 0.5, 0.7, 3]"}, ["efficiency", "3"]),
    "eff-nan": ({"efficiency": "[0.1, nan, 0.7, 0.8]"}, ["efficiency", "nan"]),
    "eff-text": ({"efficiency": '[0.1, "high", 0.7, 0.8]'}, ["efficiency", "'high'"]),
    "x-not-list": ({"x": '"1e8"'}, ["x", "'1e8'"]),
    "x-nested": ({"x": "[[1e8], [1e9], [1.6e10], [1.28e11]]"}, ["x", ("[1e8]", "[100000000.0]")]),
}
for _table in ("gemm", "nvlink_ring", "attention_bwd"):
    for _name, (_edits, _needles) in EFFICIENCY.items():
        case("hardware", f"efficiency.{_table}-{_name}", lambda t, tb=_table, ed=_edits, nd=_needles: (
            flags(hardware=hw_file(t, {(f"efficiency.{tb}", k): v for k, v in {**CURVE, **ed}.items()})),
            ["hw.toml", f"efficiency.{tb}", *nd]))
GEMM = HW_TEXT.split("[efficiency.gemm]")[1].split("\n[")[0]
for _bad in ("gemmm", "Gemm", "atention", "attention-bwd", "nvlink_rng", "gemm_fp16", "optimiser", "network2",
             "nccl_allreduce_middle"):
    case("hardware", f"misspelt-table-{_bad}", lambda t, bad=_bad: (
        flags(hardware=hw_file(t, extra=f"\n[efficiency.{bad}]{GEMM}\n")), ["hw.toml", f"efficiency.{bad}"]))
case("hardware", "misspelt-table-renamed", lambda t: (flags(hardware=_bytes(t / "hw.toml", HW_TEXT.replace(
    "[efficiency.attention_bwd]", "[efficiency.attention_bw]"))), ["hw.toml", "efficiency.attention_bw"]))
case("hardware", "misspelt-section", lambda t: (
    flags(hardware=hw_file(t, extra="[netwrok]\nnics_per_node = 8\n")), ["hw.toml", "netwrok"]))


# ---- family: stack (a [stack] value the stack's own checks refuse) --------------------------------------
for _key, _raw in (("attention_padding", '"gather"'), ("cp_ring_merge", "3"), ("attention_kernel", '"flash9"'),
                   ("fsdp_prefetch", "-1")):
    case("stack", f"{_key}-{_raw.strip(chr(34))}", lambda t, k=_key, r=_raw: (
        ["memory", scenario(t, {"stack": {k: r}})], ["scen.toml", k, as_written(r)]))


# ---- the corpus ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("build,via_script", CASES)
def test_bad_input(build, via_script, tmp_path):
    argv, needles = build(tmp_path)
    check((run_script if via_script else run_cli)(argv), needles)


SCRIPT_CASES = ["files-scenario-binary", "files-hardware-flag-name-too-long", "parsers-scenario-array-100000",
                "overflow-memory---seq-2e63", "bounds-toml-seq_length-issue-1e30", "layout-layers_per_stage-halves",
                "hardware-gpu.hbm_gb-negative", "hardware-misspelt-table-gemmm"]


@pytest.mark.parametrize("build,via_script", [pytest.param(p.values[0], True, id=p.id) for p in CASES
                                              if p.id in SCRIPT_CASES])
def test_bad_input_installed_script(build, via_script, tmp_path):
    """A few corpus cases through the installed `parasim` (subprocess): same exit, one line, no traceback."""
    argv, needles = build(tmp_path)
    check(run_script(argv), needles)


def test_corpus_size():
    assert len(CASES) >= 400


@pytest.mark.parametrize("over", [dict(seq=str(2**24)), dict(gpus=str(2**20), global_batch=str(2**31)),
                                  dict(seq=str(2**24), global_batch=str(2**31), micro_batch=str(2**11), gpus=str(2**20),
                                       tp="8", cp="16", pp="4")], ids=["seq", "gpus-batch", "all"])
@pytest.mark.parametrize("cmd", ["memory", "estimate"])
def test_values_at_their_bounds_are_accepted_and_print_no_negative_number(cmd, over):
    """The bounds are low enough: at them the simulator answers with finite, non-negative numbers."""
    code, stderr, seconds, stdout = run_cli(flags(cmd, **over))
    assert (code, stderr) == (0, ""), stderr[-2000:]
    assert not re.search(r"(?<![\w-])-[\d.,]*[1-9]|\b(nan|inf)\b", stdout), stdout
