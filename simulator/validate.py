"""Predicted vs measured: map published (or harness-recorded) runs to specs, predict, and score.

This is the one mapping of `published_runs.csv` rows to parasim inputs: `parasim validate`,
`validation/make_accuracy.py` (docs/accuracy.md) and `validation/memory_published.py`
(docs/memory.md) all call `map_run` and `simulator.estimate.estimate`, so they report the same
predictions. Rows that cannot be mapped are returned as skipped **with the reason**, never dropped.

Input: a CSV with the columns of the shared `published_runs.csv` (README of that data set). The cells
a row gives (shape, batch, layout, recompute, precision, schedule) are used as given. What a row
leaves out is filled **by source** (`source_id`, table `SOURCE_RULES`) from what the source's
framework did at the time, never from the errors; every such choice is recorded per row in
`MappedRun.assumptions` (the "assumptions" column of the results). Rows of an unknown source get the
generic family rules at the end of this docstring, also recorded.

Per-source assumptions (`SOURCE_RULES`; the text of each is what the row records):

NARAYANAN21 — Narayanan et al. 2021 (SC'21) Table 1, Megatron-LM on Selene (DGX A100 80 GB):
- GPT architecture: LayerNorm, GeLU MLP (f = 4h), biases on QKV/output/MLP, learned position table of
  seq_len rows, input embedding tied to the output layer (Megatron `GPTModel` shares the word
  embeddings; the paper's parameter formula P = 12lh²(1 + 13/12h + (V + s)/12lh) counts V·h once).
- vocabulary as given (51200 = GPT-2's 50257 padded by Megatron to a multiple of 128·tp).
- no FlashAttention (published 2022; Megatron 2021 materialises the s×s scores with its fused
  scale-mask-softmax); dropout on (Megatron defaults hidden_dropout = attention_dropout = 0.1).
- fp16 rows keep fp16 gradients (Megatron `--accumulate-allreduce-grads-in-fp32` is off by default and
  forced on only for bf16); no sequence parallelism (2022).
- micro-batch not given -> 1; schedule '1F1B (interleaving not stated)' -> plain 1f1b.
- the step time compared is *derived* from the reported TFLOP/s with Megatron's FLOP formula (it
  counts the recompute forward and full, non-causal attention) and is labelled so.

ZB24 — Qi et al. 2024, Zero Bubble Pipeline Parallelism, Megatron-LM fork, A100 80 GB, pure PP:
- GPT-like model as NARAYANAN21 (LayerNorm, GeLU, biases, learned positions of seq_len rows) with the
  embedding tied to the output layer and a 32000-token vocabulary (padded to a multiple of 128·tp):
  the repository's sample dataset ships a SentencePiece tokenizer (`--tokenizer-type
  GPTSentencePieceTokenizer`, examples/pretrain_zero_bubble.sh), and the paper's Table 3 sizes
  (1.5, 6.2, 14.6, 28.3 B) are what this gives (1.48, 6.18, 14.63, 28.28 B); GPT-2's 50304 gives
  6.25, 14.74, 28.41 B and an untied head 6.30, 14.80, 28.48 B (tests/test_validate.py). The
  repository's later example scripts untie the embeddings; the paper-era sizes say tied.
- no FlashAttention and dropout on: the paper's own activation model M_B = (34h + 5as)·sb is
  Korthikanti's count with materialised attention scores and dropout masks.
- precision 'mixed (not stated)' -> fp16 with fp16 gradients (the repository's example scripts pass
  `--fp16` unless FP32 is set; Megatron keeps fp16 gradients unless
  `--accumulate-allreduce-grads-in-fp32`; A100 fp16 and bf16 peaks are equal);
  'none stated' recompute -> none (M_B has no recompute).
- first and last stages hold one layer fewer (row notes); schedules: '1F1B' -> 1f1b, 'activation
  limit p*M_B' (ZB-1p) -> zb-h1, '2p*M_B' (ZB-2p) -> zb-h2, ZB-V -> zb-v, 'interleaved 1F1B, 1 layer
  per chunk' -> interleaved with vpp = ceil(total chunks / pp) per rank.

BLOOM_PREQUEL — bigscience BLOOM-176B topology runs (Megatron-DeepSpeed, Jean Zay A100 80 GB, 2022):
- BLOOM architecture: LayerNorm, GeLU, biases, tied embeddings, ALiBi (no position table) (BLOOM
  paper §3.2; tr11 `--position-embedding-type alibi`); the embedding LayerNorm (2h) is not modelled.
- vocabulary: the BLOOM tokenizer's 250680 (rows with only '~250k' included) padded to a multiple
  of 128·tp (`--make-vocab-size-divisible-by 128`; tp = 4 gives BLOOM's released 250880).
- no FlashAttention (not available in Megatron-DeepSpeed then); no dropout (tr11 hidden_dropout =
  attention_dropout = 0); full recompute and ZeRO-1 as the rows say.
- fp16 rows keep fp16 gradients (DeepSpeed fp16 ZeRO-1 reduces fp16 gradients); bf16 rows fp32
  gradient accumulation (BF16_Optimizer, row text).
- layer split: before 02-28 (`--pp-partition-method type:transformer`) transformer layers balanced
  with any extra layer on the first stages; rows whose notes say the embedding has its own PP slot
  (`type:transformer|embedding`, 02-28) give the first and last stage one transformer layer fewer.
- memory compared with the larger of the first and last stage (mem_basis: nvidia-smi on the GPUs
  holding the embedding); measured values are nvidia-smi readings (CUDA context and the caching
  allocator's reserve included).

LLMFOUNDRY — mosaicml/llm-foundry MPT benchmarks (Composer, FSDP, A100 40/80 GB):
- MPT benchmark configuration (MPTConfig defaults: learned_pos_emb = True, no_bias = False,
  low_precision_layernorm, expansion_ratio 4; row notes 'learned positional embeddings, biases on'):
  LayerNorm with bias, GeLU MLP f = 4h, biases on, learned position table of seq_len rows, logits
  computed with the input embedding (tied). These give exactly the README's NumParams (tests).
- FlashAttention on (row notes: attn_impl=flash); no dropout (MPTConfig pdrop defaults 0).
- FSDP FULL_SHARD over all GPUs -> ZeRO-3; 'MP mode DEFAULT' reduces gradients in fp32, 'PURE' in
  bf16 (Composer `get_mixed_precision`) -> grad_dtype fp32 / bf16.
- step time from the measured Throughput (T/s).

TORCHTITAN_A100 — pytorch/torchtitan performance doc (older), Llama 2/3 on 64 A100 80 GB, FSDP2:
- Llama shapes: SwiGLU, RMSNorm, no biases, RoPE (no position table), untied output layer, GQA
  from the row.
- FlashAttention on (torchtitan calls `scaled_dot_product_attention`, whose flash backend runs bf16 on
  A100); no dropout.
- FSDP2 fully sharded -> ZeRO-3; bf16 parameters with fp32 gradient reduction (torchtitan's
  mixed_precision_param = bfloat16, mixed_precision_reduce = float32 defaults).
- recompute 'selective (per op)' (op-level SAC: matmul and SDPA outputs kept, every second matmul
  recomputed) -> parasim 'selective' [approximation]; 'selective (per layer)' (every 2nd layer fully
  recomputed) has no parasim equivalent -> skipped.
- step time from measured tokens/s (WPS per GPU × GPUs).

Generic rules (every source; a source's table entry overrides the family defaults):
- gpu_type -> hardware preset: A100 80GB -> dgx-a100-80g, A100 40GB -> dgx-a100-40g, H100 -> dgx-h100,
  H800 -> dgx-h800, H200 -> dgx-h200, B200 -> dgx-b200, GB200 -> gb200-nvl72, MI300X -> mi300x
  (`hardware=` overrides it for every row).
- model family from the name: Llama/Mistral/Qwen -> SwiGLU, RMSNorm, no biases, RoPE, untied; MPT,
  GPT, BLOOM -> GeLU, LayerNorm, biases, tied (GPT and MPT with learned positions).
- vocab: the number, or the first integer of a text cell; blank -> 51200 [assumption].
- micro_batch blank -> 1 [assumption]; zero_fsdp: none -> 0, ZeRO-k -> k, FSDP/FSDP2 full shard -> 3.
- recompute: none / 'none stated' -> none (the latter flagged); full* -> full; 'selective (per op)'
  -> selective; 'selective (per layer)' -> skipped.
- precision: text containing bf16 / fp16 / fp8 / fp32 -> that; 'mixed (not stated)' -> bf16.
- pipeline_schedule: 1F1B variants -> 1f1b; 'interleaved 1F1B' -> interleaved (vpp column read as
  total chunks when > pp); ZB-V -> zb-v; Zero Bubble p*M_B -> zb-h1, 2p*M_B -> zb-h2; blank -> 1f1b.
- uneven pipelines: notes saying the first and last stages hold one layer fewer (or that the
  embedding has its own PP slot) -> (L+2)/pp − 1, (L+2)/pp, ..., (L+2)/pp − 1; other non-divisible
  splits without chunks -> balanced, the first L mod pp stages one layer more.
- sequence_parallel blank -> off.

Measured quantities (`*_basis` columns say which was used):
- step time: `step_time_s` if given ("measured step time"), else global_batch·seq / `tokens_per_s`
  ("from measured tokens/s"), else `derived_step_time_s` labelled "derived (not measured): ..."
  — it was computed from reported TFLOP/s with a FLOP formula, so its error includes that formula.
- memory: `mem_gb_per_gpu` read as GiB (torch and nvidia-smi print binary units), compared with the
  predicted peak of the stages `mem_basis` names (first/last stage, else the worst stage).
- runs whose notes say they went out of memory are flagged (`measured_oom`) to compare with the
  predicted feasibility.

Statistics: signed error = predicted / measured − 1; median and max of |error|, mean signed error;
Spearman rank correlation = Pearson correlation of the average ranks (pandas `rank`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from .errors import InputError

__all__ = [
    "GPU_PRESETS",
    "DEFAULT_VOCAB",
    "DEFAULT_MICRO_BATCH",
    "SourceRules",
    "SOURCE_RULES",
    "MappedRun",
    "map_run",
    "read_runs",
    "measured_step",
    "measured_oom",
    "memory_stages",
    "predicted_memory",
    "predict_runs",
    "error_summary",
    "spearman",
    "signed_error",
    "pad_vocab",
    "hardware_for_gpu",
]

GPU_PRESETS = (  # (regex on gpu_type, preset), first match wins
    (r"a100.*40", "dgx-a100-40g"),
    (r"a100", "dgx-a100-80g"),
    (r"h800", "dgx-h800"),
    (r"h200", "dgx-h200"),
    (r"h100", "dgx-h100"),
    (r"gb200", "gb200-nvl72"),
    (r"b200", "dgx-b200"),
    (r"mi300", "mi300x"),
)
DEFAULT_VOCAB = 51200
DEFAULT_MICRO_BATCH = 1
GIB = 2**30

REQUIRED_COLUMNS = ("run_id", "model", "layers", "hidden", "heads", "ffn_hidden", "seq_len", "global_batch_seqs",
                    "n_gpus", "gpu_type", "tp", "pp", "dp")

_BIASED = dict(qkv_bias=True, out_bias=True, mlp_bias=True)
FAMILIES = {  # architecture kwargs of ModelSpec per family (positions and tying come from SourceRules)
    "gpt": dict(mlp="gelu", norm="layernorm", **_BIASED),
    "bloom": dict(mlp="gelu", norm="layernorm", **_BIASED),
    "mpt": dict(mlp="gelu", norm="layernorm", **_BIASED),
    "llama": dict(mlp="swiglu", norm="rmsnorm"),
}


@dataclass(frozen=True, kw_only=True)
class SourceRules:
    """What the rows of one source leave out, filled from the source's framework (module docstring).

    `grad_dtype` is a tuple of (regex on the precision cell, gradient dtype), first match wins.
    `statements` are the assumption lines each row of the source records (with their sources).
    """

    source_id: str
    family: str
    tie_word_embeddings: bool
    learned_positions: bool  # a position table of seq_len rows
    vocab_base: int | None = None  # when the vocab cell is blank or gives no exact number
    vocab_pad_per_tp: int = 0  # pad the vocabulary to a multiple of vocab_pad_per_tp·tp (0: as given)
    flash_attention: bool = True
    dropout: bool = False
    grad_dtype: tuple[tuple[str, str], ...] = ((r".", "fp32"),)
    precision_unstated: str | None = None  # precision when the cell names none ('mixed (not stated)')
    statements: tuple[str, ...] = ()

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise InputError(f"source rules {self.source_id}: unknown family {self.family!r}")


SOURCE_RULES: dict[str, SourceRules] = {r.source_id: r for r in (
    SourceRules(
        source_id="NARAYANAN21", family="gpt", tie_word_embeddings=True, learned_positions=True,
        vocab_pad_per_tp=128, flash_attention=False, dropout=True,
        grad_dtype=((r"fp16", "fp16"), (r".", "fp32")),
        statements=(
            "GPT (Megatron GPTModel): LayerNorm, GeLU, biases, learned positions, tied embeddings",
            "no FlashAttention (2021: materialised scores)",
            "dropout 0.1 (Megatron default)",
            "fp16 gradients (Megatron 2021: --accumulate-allreduce-grads-in-fp32 off unless bf16)",
            "vocab padded to 128·tp (Megatron --make-vocab-size-divisible-by 128)",
        )),
    SourceRules(
        source_id="ZB24", family="gpt", tie_word_embeddings=True, learned_positions=True,
        vocab_base=32000, vocab_pad_per_tp=128, flash_attention=False, dropout=True,
        grad_dtype=((r"fp16", "fp16"), (r".", "fp32")), precision_unstated="fp16",
        statements=(
            "GPT-like (Megatron fork): LayerNorm, GeLU, biases, learned positions, tied embeddings "
            "(Table 3 sizes count V·h once)",
            "vocab: 32000 SentencePiece tokenizer of the repo's sample dataset, padded to 128·tp",
            "no FlashAttention and dropout on (paper's M_B = (34h + 5as)·sb, Korthikanti)",
            "fp16 with fp16 gradients (repo example scripts pass --fp16, Megatron default gradients)",
        )),
    SourceRules(
        source_id="BLOOM_PREQUEL", family="bloom", tie_word_embeddings=True, learned_positions=False,
        vocab_base=250680, vocab_pad_per_tp=128, flash_attention=False, dropout=False,
        grad_dtype=((r"fp16", "fp16"), (r".", "fp32")),
        statements=(
            "BLOOM: LayerNorm, GeLU, biases, ALiBi (no position table), tied embeddings",
            "vocab: BLOOM tokenizer 250680 padded to 128·tp (Megatron-DeepSpeed)",
            "no FlashAttention (Megatron-DeepSpeed 2022)",
            "no dropout (tr11 config)",
            "fp16 rows fp16 gradients (DeepSpeed fp16 ZeRO-1), bf16 rows fp32 (BF16_Optimizer)",
        )),
    SourceRules(
        source_id="LLMFOUNDRY", family="mpt", tie_word_embeddings=True, learned_positions=True,
        flash_attention=True, dropout=False,
        grad_dtype=((r"pure", "bf16"), (r".", "fp32")),
        statements=(
            "MPT benchmark config (MPTConfig defaults): LayerNorm with bias, GeLU f=4h, biases, "
            "learned positions, tied embeddings",
            "FlashAttention (attn_impl=flash)",
            "no dropout (MPTConfig pdrop 0)",
            "FSDP mixed precision: DEFAULT reduces fp32 gradients, PURE bf16 (Composer)",
        )),
    SourceRules(
        source_id="TORCHTITAN_A100", family="llama", tie_word_embeddings=False, learned_positions=False,
        flash_attention=True, dropout=False, grad_dtype=((r".", "fp32"),),
        statements=(
            "Llama: SwiGLU, RMSNorm, no biases, RoPE, untied output layer",
            "FlashAttention (torchtitan SDPA flash backend)",
            "no dropout",
            "FSDP2 bf16 parameters, fp32 gradient reduction (torchtitan defaults)",
        )),
)}


@dataclass(frozen=True, kw_only=True)
class MappedRun:
    """One CSV row mapped to parasim inputs (or the reason it could not be)."""

    run_id: str
    model: object | None = None
    training: object | None = None
    layout: object | None = None
    hardware_name: str | None = None
    assumptions: tuple[str, ...] = ()
    skip_reason: str = ""


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _int(v, what: str) -> int:
    if _blank(v):
        raise InputError(f"{what} is blank")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{what} is not a number: {v!r}") from None
    if not f.is_integer():
        raise InputError(f"{what} is not an integer: {v!r}")
    return int(f)


def _text(v) -> str:
    return "" if _blank(v) else str(v).strip()


def hardware_for_gpu(gpu_type: str) -> str:
    """Hardware preset for a gpu_type cell (GPU_PRESETS); InputError when none matches."""
    g = _text(gpu_type).lower()
    for pat, preset in GPU_PRESETS:
        if re.search(pat, g):
            return preset
    raise InputError(f"no hardware preset for gpu_type {gpu_type!r}")


def pad_vocab(vocab: int, multiple: int) -> int:
    """Megatron's padded vocabulary: the smallest multiple of `multiple` >= vocab
    (`_vocab_size_with_padding`: make_vocab_size_divisible_by × tp)."""
    if multiple <= 0:
        raise InputError(f"vocab padding multiple must be > 0, got {multiple!r}")
    return -(-int(vocab) // multiple) * multiple


def _vocab(v, rules: SourceRules | None, tp: int, notes: list[str]) -> int:
    """The vocabulary a row's model used: the cell's number, else the source's base; padded per source."""
    exact = None
    if not _blank(v):
        try:
            exact = _int(v, "vocab")
        except InputError:
            exact = None
    if exact is None:
        if rules is not None and rules.vocab_base:
            base = rules.vocab_base
            notes.append(f"vocab {_text(v) or 'not stated'!s}: {base} ({rules.source_id})")
        elif _blank(v):
            base = DEFAULT_VOCAB
            notes.append(f"vocab not stated: {DEFAULT_VOCAB}")
        else:
            ints = [int(x) for x in re.findall(r"\d{4,}", str(v))]
            ints += [int(x) * 1000 for x in re.findall(r"(\d+)k\b", str(v))]
            if not ints:
                raise InputError(f"vocab {v!r} has no number")
            base = ints[0]
            notes.append(f"vocab read as {base} from {v!r}")
    else:
        base = exact
    if rules is not None and rules.vocab_pad_per_tp:
        padded = pad_vocab(base, rules.vocab_pad_per_tp * tp)
        if padded != base:
            notes.append(f"vocab {base} padded to {padded} ({rules.vocab_pad_per_tp}·tp)")
        return padded
    return base


def _family(model: str) -> str:
    m = model.lower()
    if "llama" in m or "mistral" in m or "qwen" in m:
        return "llama"
    for fam in ("mpt", "bloom", "gpt"):
        if fam in m:
            return fam
    raise InputError(f"unknown model family {model!r} (expected Llama, MPT, GPT or BLOOM)")


def _generic_rules(family: str) -> SourceRules:
    """Family defaults for a source without an entry in SOURCE_RULES (generic rules, docstring)."""
    return SourceRules(source_id="generic", family=family, tie_word_embeddings=family != "llama",
                       learned_positions=family in ("gpt", "mpt"))


def _zero(v) -> int:
    t = _text(v).lower()
    if t in ("", "none") or t.startswith("none"):
        return 0
    if "fsdp" in t or "full_shard" in t or "zero-3" in t:
        return 3
    m = re.search(r"zero-?(\d)", t)
    if m:
        return int(m.group(1))
    raise InputError(f"unknown zero_fsdp {v!r}")


def _recompute(v, notes) -> str:
    t = _text(v).lower()
    if t in ("", "none"):
        return "none"
    if t == "none stated":
        notes.append("recompute not stated: none")
        return "none"
    if t.startswith("full"):
        return "full"
    if "selective" in t and "per layer" in t:
        raise InputError(f"recompute {v!r}: every k-th layer fully recomputed has no parasim equivalent")
    if t.startswith("selective"):
        if "per op" in t:
            notes.append("op-level selective recompute mapped to parasim 'selective' [approximation]")
        return "selective"
    raise InputError(f"unknown recompute {v!r}")


def _precision(v, notes, unstated: str | None = None) -> str:
    t = _text(v).lower()
    for p in ("bf16", "fp16", "fp8", "fp32"):
        if p in t:
            return p
    if "mixed" in t and unstated:
        notes.append(f"precision {v!r}: {unstated} (source rule)")
        return unstated
    if "mixed" in t:
        notes.append(f"precision {v!r}: bf16")
        return "bf16"
    raise InputError(f"unknown precision {v!r}")


def _grad_dtype(rules: SourceRules, precision_cell, precision: str, notes) -> str:
    t = f"{_text(precision_cell)} {precision}".lower()
    for pat, dtype in rules.grad_dtype:
        if re.search(pat, t):
            if rules.source_id != "generic":
                notes.append(f"gradients {dtype}")
            return dtype
    return "fp32"


def _schedule(v, pp: int, vpp_cell, notes) -> tuple[str, int]:
    t = _text(v).lower()
    if pp == 1:
        return "1f1b", 1
    if t in ("", "none"):
        notes.append("pipeline schedule not stated: 1f1b")
        return "1f1b", 1
    if "zb-v" in t:
        return "zb-v", 1
    if "zero bubble" in t:
        if "2p" in t:
            return "zb-h2", 1
        if "p*m" in t:
            return "zb-h1", 1
        raise InputError(f"unknown zero-bubble variant {v!r}")
    if "interleav" in t and "not stated" not in t:
        vpp = _int(vpp_cell, "vpp")
        if vpp > pp:
            # Megatron's vpp counts chunks per rank; rows such as the Zero Bubble paper's "1 layer per
            # chunk" give the total number of chunks instead (vpp = layers > pp): ceil(total / pp) per rank
            per_rank = -(-vpp // pp)
            notes.append(f"vpp={vpp} read as total chunks: {per_rank} per rank")
            vpp = per_rank
        return "interleaved", vpp
    if "1f1b" in t:
        if "not stated" in t:
            notes.append("interleaving not stated: plain 1f1b")
        return "1f1b", 1
    raise InputError(f"unknown pipeline_schedule {v!r}")


def _sp(v) -> bool:
    t = _text(v).lower()
    if t in ("", "no", "false", "off"):
        return False
    if t in ("yes", "true", "on"):
        return True
    raise InputError(f"unknown sequence_parallel {v!r}")


_FIRST_LAST_FEWER = ("one fewer", "own pp slot")  # ZB24 notes; BLOOM 'embedding given its own PP slot'


def _layers_per_stage(L: int, pp: int, chunks: int, notes_cell: str, notes: list[str]):
    low = notes_cell.lower()
    if pp > 1 and any(k in low for k in _FIRST_LAST_FEWER) and (L + 2) % pp == 0:
        per = (L + 2) // pp
        why = "embedding has its own PP slot" if "own pp slot" in low else "row notes"
        notes.append(f"first and last stages hold {per - 1} layer{'s' if per - 1 != 1 else ''} ({why})")
        return tuple([per - 1] + [per] * (pp - 2) + [per - 1])
    if L % (pp * chunks) == 0:
        return None
    if chunks == 1 and L >= pp:
        base, extra = divmod(L, pp)
        notes.append(f"{L} layers over pp={pp}: balanced uneven split (first {extra} stages +1 layer)")
        return tuple(base + (1 if i < extra else 0) for i in range(pp))
    return None


def map_run(row: Mapping, *, hardware: str | None = None) -> MappedRun:
    """Map one CSV row (dict-like) to ModelSpec, Training, Layout and a hardware preset name.

    Per-source rules (SOURCE_RULES) fill what the row leaves out; every rule applied is recorded in
    `assumptions`. Unmappable rows come back with `skip_reason` (one line) instead of an exception.
    """
    from .spec.layout import Layout
    from .spec.model import ModelSpec
    from .spec.training import Training
    from .spec.validate import validate

    run_id = _text(row.get("run_id")) or "?"
    source_id = _text(row.get("source_id"))
    notes: list[str] = []
    try:
        seq = _int(row.get("seq_len"), "seq_len")
        name = _text(row.get("model"))
        rules = SOURCE_RULES.get(source_id)
        if rules is None:
            rules = _generic_rules(_family(name))
            notes.append(f"source {source_id or '?'!s} has no rules: generic {rules.family} family defaults")
        else:
            notes.extend(f"{rules.source_id}: {s}" for s in rules.statements)
        if not _blank(row.get("moe_experts")):
            raise InputError("MoE rows are not mapped yet (no MoE run in the data set)")
        tp = _int(row.get("tp"), "tp")
        kv = None if _blank(row.get("kv_heads")) else _int(row.get("kv_heads"), "kv_heads")
        model = ModelSpec(name=name, hidden_size=_int(row.get("hidden"), "hidden"),
                          num_layers=_int(row.get("layers"), "layers"), num_heads=_int(row.get("heads"), "heads"),
                          num_kv_heads=kv, ffn_hidden_size=_int(row.get("ffn_hidden"), "ffn_hidden"),
                          vocab_size=_vocab(row.get("vocab"), rules if rules.source_id != "generic" else None, tp,
                                            notes),
                          tie_word_embeddings=rules.tie_word_embeddings,
                          learned_position_embeddings=seq if rules.learned_positions else 0,
                          **FAMILIES[rules.family])
        prec = _precision(row.get("precision"), notes, rules.precision_unstated)
        training = Training(seq_length=seq, global_batch_size=_int(row.get("global_batch_seqs"), "global_batch_seqs"),
                            precision=prec, grad_dtype=_grad_dtype(rules, row.get("precision"), prec, notes),
                            flash_attention=rules.flash_attention, dropout=rules.dropout)
        pp = _int(row.get("pp"), "pp")
        sched, vpp = _schedule(row.get("pipeline_schedule"), pp, row.get("vpp"), notes)
        if _blank(row.get("micro_batch")):
            notes.append(f"micro_batch not stated: {DEFAULT_MICRO_BATCH}")
            mbs = DEFAULT_MICRO_BATCH
        else:
            mbs = _int(row.get("micro_batch"), "micro_batch")
        chunks = 2 if sched in ("zb-v", "dualpipev") else vpp
        lps = _layers_per_stage(model.num_layers, pp, chunks, _text(row.get("notes")), notes)
        layout = Layout(num_gpus=_int(row.get("n_gpus"), "n_gpus"), tp=tp, pp=pp,
                        dp=_int(row.get("dp"), "dp"),
                        cp=1 if _blank(row.get("cp")) else _int(row.get("cp"), "cp"),
                        ep=1 if _blank(row.get("ep")) else _int(row.get("ep"), "ep"), vpp=vpp,
                        micro_batch_size=mbs, zero=_zero(row.get("zero_fsdp")),
                        recompute=_recompute(row.get("recompute"), notes),
                        sequence_parallel=_sp(row.get("sequence_parallel")), schedule=sched,
                        layers_per_stage=lps)
        validate(model, training, layout)
        hw = hardware or hardware_for_gpu(_text(row.get("gpu_type")))
    except InputError as exc:
        return MappedRun(run_id=run_id, assumptions=tuple(notes), skip_reason=str(exc).splitlines()[0])
    return MappedRun(run_id=run_id, model=model, training=training, layout=layout, hardware_name=hw,
                     assumptions=tuple(notes))


def read_runs(path):
    """Read a runs CSV; InputError naming the first missing required column."""
    import pandas as pd

    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise InputError(f"file not found: {path}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"{path}: missing column {missing[0]!r} (expected the published_runs.csv columns)")
    return df


def measured_step(row: Mapping) -> tuple[float, str]:
    """(measured step seconds, basis) by the module's rule; (nan, 'none') if the row has nothing."""
    if not _blank(row.get("step_time_s")):
        return float(row["step_time_s"]), "measured step time"
    if not _blank(row.get("tokens_per_s")):
        tokens = float(row["global_batch_seqs"]) * float(row["seq_len"])
        return tokens / float(row["tokens_per_s"]), "from measured tokens/s"
    if not _blank(row.get("derived_step_time_s")):
        how = _text(row.get("derived_how"))
        return float(row["derived_step_time_s"]), f"derived (not measured): {how}" if how else "derived (not measured)"
    return float("nan"), "none"


def measured_oom(row: Mapping) -> bool:
    """True when the row's notes say the run went out of memory (a measured outcome)."""
    t = _text(row.get("notes")).lower()
    return "went oom" in t or "out of memory" in t


def memory_stages(mem_basis: str, pp: int) -> tuple[int, ...] | None:
    """Pipeline stages a measured memory figure covers: (0, pp−1) when `mem_basis` names the
    first/last stages (or nodes), None (every stage: the worst) otherwise."""
    t = _text(mem_basis).lower()
    if "first/last" in t or "first and last" in t:
        return tuple(sorted({0, pp - 1}))
    return None


def predicted_memory(memory, mem_basis: str, pp: int) -> tuple[float, int]:
    """(peak bytes, stage) of a MemoryResult over the stages `mem_basis` covers (memory_stages).

    An object with only `peak_bytes` (no per-stage list) gives (peak_bytes, -1).
    """
    per_stage = getattr(memory, "per_stage", None)
    if not per_stage:
        return float(memory.peak_bytes), -1
    stages = memory_stages(mem_basis, pp)
    cand = [s for s in per_stage if stages is None or s.stage in stages]
    best = max(cand, key=lambda s: (s.peak_bytes, -s.stage))
    return float(best.peak_bytes), int(best.stage)


def signed_error(predicted, measured):
    """predicted / measured − 1 (positive: the simulator over-predicts)."""
    p = np.asarray(predicted, dtype=float)
    m = np.asarray(measured, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return p / m - 1.0


def spearman(a, b) -> float:
    """Spearman rank correlation: Pearson correlation of average ranks (ties share their mean rank)."""
    import pandas as pd

    s = pd.DataFrame({"a": np.asarray(a, float), "b": np.asarray(b, float)}).dropna()
    if len(s) < 2:
        return float("nan")
    return float(s["a"].rank().corr(s["b"].rank()))


RESULT_COLUMNS = ["run_id", "source_id", "model", "label", "hardware", "assumptions", "feasible", "reason",
                  "measured_oom", "measured_step_s", "step_basis", "predicted_step_s", "step_error",
                  "measured_tokens_per_s", "predicted_tokens_per_s", "tokens_per_s_error", "measured_mem_bytes",
                  "mem_basis", "predicted_mem_bytes", "predicted_mem_stage", "mem_error"]


def predict_runs(df, *, hardware: str | None = None, estimate_fn: Callable | None = None,
                 load_hardware_fn: Callable | None = None, keep_estimates: bool = False):
    """Predict every row; returns (results DataFrame, skipped DataFrame).

    results: one row per mapped run with the columns of RESULT_COLUMNS (errors are fractions;
    `predicted_mem_stage` is the stage whose peak was compared, -1 if unknown). skipped: run_id,
    source_id, reason. `estimate_fn(model, training, layout, hardware)` defaults to
    `simulator.estimate.estimate`; `load_hardware_fn` to `spec.hardware.load_hardware`.
    keep_estimates=True adds an `estimate` column holding each estimate object.
    """
    import pandas as pd

    if estimate_fn is None:
        try:
            from .estimate import estimate as estimate_fn
        except ModuleNotFoundError as exc:
            raise InputError(f"validate needs simulator.estimate, which is not available ({exc.name})") from None
    if load_hardware_fn is None:
        from .spec.hardware import load_hardware as load_hardware_fn
    hw_cache: dict[str, object] = {}
    out, skipped = [], []
    for _, row in df.iterrows():
        r = row.to_dict()
        mr = map_run(r, hardware=hardware)
        src = _text(r.get("source_id"))
        if mr.skip_reason:
            skipped.append({"run_id": mr.run_id, "source_id": src, "reason": mr.skip_reason})
            continue
        try:
            if mr.hardware_name not in hw_cache:
                hw_cache[mr.hardware_name] = load_hardware_fn(mr.hardware_name)
            est = estimate_fn(mr.model, mr.training, mr.layout, hw_cache[mr.hardware_name])
        except InputError as exc:
            skipped.append({"run_id": mr.run_id, "source_id": src, "reason": str(exc).splitlines()[0]})
            continue
        m_step, basis = measured_step(r)
        tokens = mr.training.tokens_per_step
        p_step = float(est.step_s)
        m_tps = tokens / m_step if math.isfinite(m_step) else float("nan")
        p_tps = float(est.tokens_per_s)
        m_mem = float(r["mem_gb_per_gpu"]) * GIB if not _blank(r.get("mem_gb_per_gpu")) else float("nan")
        p_mem, p_stage = predicted_memory(est.memory, _text(r.get("mem_basis")), mr.layout.pp)
        rec = {
            "run_id": mr.run_id, "source_id": src, "model": mr.model.name, "label": mr.layout.label,
            "hardware": mr.hardware_name, "assumptions": "; ".join(a.replace(";", ",") for a in mr.assumptions),
            "feasible": bool(est.feasible), "reason": str(getattr(est, "reason", "") or ""),
            "measured_oom": measured_oom(r),
            "measured_step_s": m_step, "step_basis": basis, "predicted_step_s": p_step,
            "step_error": float(signed_error(p_step, m_step)),
            "measured_tokens_per_s": m_tps, "predicted_tokens_per_s": p_tps,
            "tokens_per_s_error": float(signed_error(p_tps, m_tps)),
            "measured_mem_bytes": m_mem, "mem_basis": _text(r.get("mem_basis")), "predicted_mem_bytes": p_mem,
            "predicted_mem_stage": p_stage, "mem_error": float(signed_error(p_mem, m_mem)),
        }
        if keep_estimates:
            rec["estimate"] = est
        out.append(rec)
    cols = RESULT_COLUMNS + (["estimate"] if keep_estimates else [])
    return pd.DataFrame(out, columns=cols), pd.DataFrame(skipped, columns=["run_id", "source_id", "reason"])


def error_summary(results, *, by: str | None = None):
    """Per group (or overall): runs; for step time and memory the rows compared, median and max
    |error|, mean signed error and the Spearman rank correlation of predicted vs measured.
    Errors are fractions."""
    import pandas as pd

    def stats(err, pred, meas, prefix):
        e = err.to_numpy(float)
        ok = np.isfinite(e)
        a = np.abs(e[ok])
        return {
            f"{prefix}_runs": int(ok.sum()),
            f"median_abs_{prefix}_error": float(np.median(a)) if ok.any() else float("nan"),
            f"max_abs_{prefix}_error": float(np.max(a)) if ok.any() else float("nan"),
            f"mean_{prefix}_error": float(np.mean(e[ok])) if ok.any() else float("nan"),
            f"{prefix}_spearman": spearman(pred[ok], meas[ok]) if ok.sum() > 1 else float("nan"),
        }

    def one(d):
        return {"runs": int(len(d)),
                **stats(d["step_error"], d["predicted_step_s"].to_numpy(float), d["measured_step_s"].to_numpy(float),
                        "step"),
                **stats(d["mem_error"], d["predicted_mem_bytes"].to_numpy(float),
                        d["measured_mem_bytes"].to_numpy(float), "mem")}

    if by is None:
        return pd.DataFrame([{"group": "all", **one(results)}])
    rows = [{"group": k, **one(g)} for k, g in results.groupby(by, sort=True)]
    return pd.DataFrame(rows)
