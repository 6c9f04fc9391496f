"""Megatron-LM command lines and NeMo (1.x) YAML configs, read into `Fields` keyed by Megatron's
argparse `dest` names (megatron/training/arguments.py: `--tensor-model-parallel-size` ->
`tensor_model_parallel_size`), so one translator (frameworks/megatron.py) serves both.

Command line: a text file holding the arguments as a launch script has them (`torchrun ... pretrain_gpt.py
--num-layers 80 ...`): `#` comments, backslash line continuations, `--flag value`, `--flag=value`, a
store-true `--flag` alone, and a flag with several values (`--cp-comm-type p2p`, `--data-path 0.5 a 0.5
b`). Shell variables set in the file (`TP=8`, `GPUS_PER_NODE=8`) are substituted where `$TP`, `${TP}`
or `${TP:-8}` appear, and bash arrays (`MODEL_ARGS=( --num-layers 32 ... )`, used by Megatron-LM's
examples/*.sh) contribute their flags; torchrun's `--nproc-per-node` and `--nnodes` give the world size.
The last of a repeated flag wins, as in argparse.

NeMo: the `trainer` and `model` trees of a megatron_gpt_config.yaml-style file (NVIDIA/NeMo
examples/nlp/language_modeling/conf/megatron_llama_config.yaml): the keys NeMo shares with Megatron keep
their name, the others are renamed (`encoder_seq_length` -> `seq_length`,
`activations_checkpoint_granularity` -> `recompute_granularity`, `num_moe_experts` -> `num_experts`, ...)
or turned into Megatron's switches (`activation: fast-swiglu` -> `swiglu`, `bias: false` ->
`disable_bias_linear`, `optim.name: distributed_fused_adam` -> `use_distributed_optimizer`,
`trainer.precision: bf16-mixed` -> `bf16`, `trainer.devices` x `trainer.num_nodes` -> the world size).
OmegaConf interpolations `${model.x}` and `${.x}` are resolved; resolver calls (`${multiply:...}`) are not.
"""
from __future__ import annotations

import re
import shlex

from ..errors import InputError
from .fields import Fields

LAUNCHER = {"nproc_per_node": "gpus_per_node", "nnodes": "nnodes"}  # torchrun's, spelt with - or _
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=([^\s(#]*)\s*(?:#.*)?$", re.M)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _substitute(text: str) -> str:
    """`text` with the shell variables it assigns (NAME=value lines) substituted, repeatedly (a value
    may use another variable); unknown variables are left as written (their flag's value then fails)."""
    env: dict[str, str] = {}
    for name, value in _ASSIGN.findall(text):
        env[name] = value.strip("'\"")

    def one(m):
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        return m.group(2) if m.group(2) is not None else m.group(0)

    for _ in range(8):
        new = _VAR.sub(one, text)
        if new == text:
            break
        text = new
    return text


def _tokens(text: str, where: str) -> list[str]:
    text = _substitute(text.replace("\\\r\n", " ").replace("\\\n", " "))
    try:
        toks = shlex.split(text, comments=True)
    except ValueError as exc:
        raise InputError(f"{where}: cannot split the command line into arguments ({exc})") from None
    # a quoted "--flag value" (bash arrays of Megatron-LM's examples/*.sh hold them so) is two tokens
    return [t for tok in toks for t in (tok.split() if tok.startswith("--") else [tok])]


def _is_flag(tok: str) -> bool:
    return tok.startswith("--") and len(tok) > 2


def _ends_values(tok: str) -> bool:
    """A token that is no flag's value: a script, a shell word, an array bracket, an assignment, an
    unexpanded array reference, a single-dash option."""
    return (tok.endswith((".py", ".sh")) or tok in ("(", ")", "export", "&&", ";", "|")
            or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tok) is not None or tok.startswith("${")
            or (tok.startswith("-") and not tok.startswith("--") and not re.match(r"^-[0-9.]", tok)))


def read_command_line(text: str, where: str) -> tuple[Fields, dict]:
    """(Fields keyed by dest with the flag as written and its list of values, launcher settings)."""
    items: dict[str, tuple[str, object]] = {}
    launcher: dict[str, str] = {}
    toks = _tokens(text, where)
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not _is_flag(tok):
            continue
        flag, eq, first = tok.partition("=")
        values = [first] if eq else []
        while not eq and i < len(toks) and not _is_flag(toks[i]) and not _ends_values(toks[i]):
            values.append(toks[i])
            i += 1
        dest = flag[2:].replace("-", "_")
        if dest in LAUNCHER:
            launcher[LAUNCHER[dest]] = values[0] if values else ""
            continue
        items.pop(dest, None)  # argparse: the last occurrence wins (and is listed where it was written)
        items[dest] = (flag, values)
    return Fields(items, where), launcher


def world_size(launcher: dict, where: str) -> int | None:
    """torchrun's nnodes x nproc-per-node, when both are whole numbers (an elastic range '1:4' is not)."""
    if "gpus_per_node" not in launcher:
        return None
    try:
        per, nodes = int(launcher["gpus_per_node"]), int(launcher.get("nnodes", "1"))
    except ValueError:
        raise InputError(f"{where}: torchrun's --nproc-per-node {launcher['gpus_per_node']!r} / --nnodes "
                         f"{launcher.get('nnodes')!r} is not a GPU count; give --gpus") from None
    return per * nodes


# ---- NeMo ---------------------------------------------------------------------------------------

# NeMo model.<key> -> Megatron dest, where the name differs
NEMO_RENAME = {
    "model.encoder_seq_length": "seq_length",
    "model.activations_checkpoint_granularity": "recompute_granularity",
    "model.activations_checkpoint_method": "recompute_method",
    "model.activations_checkpoint_num_layers": "recompute_num_layers",
    "model.num_moe_experts": "num_experts",
    "model.ub_tp_comm_overlap": "tp_comm_overlap",
    "model.qk_layernorm": "qk_layernorm",
    "model.moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "model.cpu_offloading": "cpu_offloading",
    "model.tokenizer.type": "tokenizer_model",
    "model.tokenizer.library": "tokenizer_type",
    "model.optim.overlap_grad_sync": "overlap_grad_reduce",
    "model.optim.overlap_param_sync": "overlap_param_gather",
    "model.optim.grad_sync_dtype": "grad_sync_dtype",
    "model.optim.bucket_cap_mb": "bucket_cap_mb",
    "model.use_flash_attention": "use_flash_attn",
}


def _flatten(tree, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _resolve(flat: dict) -> dict:
    """OmegaConf's plain interpolations: `${a.b}` (absolute) and `${.x}` / `${..x}` (relative to the key's
    own node); a value that is exactly one interpolation takes the target's type."""
    pat = re.compile(r"^\$\{(\.*)([A-Za-z0-9_.]+)\}$")

    def target(key: str, m):
        dots, path = m.group(1), m.group(2)
        if not dots:
            return path
        parent = key.split(".")[:-len(dots)]
        return ".".join(parent + [path])

    out = dict(flat)
    for _ in range(8):
        changed = False
        for k, v in out.items():
            m = pat.match(v) if isinstance(v, str) else None
            t = target(k, m) if m else None
            if t in out and out[t] != v:
                out[k], changed = out[t], True
        if not changed:
            break
    return out


def read_nemo_yaml(text: str, where: str) -> Fields:
    """Fields keyed by Megatron dests (NEMO_RENAME, switches, the world size) from a NeMo YAML config."""
    try:
        import yaml
    except ImportError:
        raise InputError(f"{where}: reading a NeMo YAML config needs PyYAML (pip install pyyaml)") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"malformed YAML in {where}{at}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise InputError(f"{where}: a NeMo config needs a 'model:' section (and 'trainer:' for the GPU count)")
    flat = _resolve(_flatten(doc))
    items: dict[str, tuple[str, object]] = {}
    for key, v in flat.items():
        dest = NEMO_RENAME.get(key) or (key[6:] if key.startswith("model.") and key.count(".") == 1 else key)
        items[dest] = (key, v)
    _nemo_switches(items, flat, where)
    return Fields(items, where)


def _nemo_switches(items: dict, flat: dict, where: str) -> None:
    """Turn NeMo's valued settings into Megatron's switches (in place)."""
    def put(old: str, dest: str, value) -> None:
        items.pop(old, None)
        items.pop(old[6:] if old.startswith("model.") else old, None)
        items[dest] = (old, value)

    act = flat.get("model.activation")
    if isinstance(act, str):
        kind = act.lower().replace("fast-", "")
        if kind in ("swiglu", "geglu", "squared-relu", "gelu"):
            put("model.activation", {"squared-relu": "squared_relu"}.get(kind, kind), kind != "gelu")
    if isinstance(flat.get("model.bias"), bool):
        put("model.bias", "disable_bias_linear", not flat["model.bias"])
    share = flat.get("model.share_embeddings_and_output_weights")
    if isinstance(share, bool):
        put("model.share_embeddings_and_output_weights", "untie_embeddings_and_output_weights", not share)
    prec = str(flat.get("trainer.precision", "32")).lower()
    if "trainer.precision" in flat:
        dest = "bf16" if prec.startswith("bf16") else "fp16" if prec in ("16", "16-mixed", "fp16") else "fp32"
        put("trainer.precision", dest, True)
    name = flat.get("model.optim.name")
    if isinstance(name, str):
        put("model.optim.name", "use_distributed_optimizer", name in ("distributed_fused_adam", "mcore_distributed_optim"))
        items["optimizer"] = ("model.optim.name", "sgd" if name == "sgd" else "adam")
    if flat.get("model.fp8") is True:
        fmt = "hybrid" if flat.get("model.fp8_hybrid") else "e4m3" if flat.get("model.fp8_e4m3") else "hybrid"
        put("model.fp8", "fp8_format", fmt)
        for k in ("model.fp8_hybrid", "model.fp8_e4m3"):
            items.pop(k[6:], None)
    dev, nodes = flat.get("trainer.devices"), flat.get("trainer.num_nodes", 1)
    if isinstance(dev, int) and isinstance(nodes, int) and not isinstance(dev, bool):
        items.pop("trainer.devices", None)
        items.pop("trainer.num_nodes", None)
        items["world_size"] = ("trainer.devices x trainer.num_nodes", dev * nodes)
