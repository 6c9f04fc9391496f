"""Memory-bound ops per microbatch on one rank: their HBM byte counts and the time of moving bytes.

Split from compute.py (which times these ops next to the GEMMs and attention) so that the byte counts
of the memory-bound kernels are one concern in one place.

Time (formulas.md §6.3, §7.1; scaling-book `T = max(T_math, T_mem)`): bytes / (HBM bytes/s ·
η_memory(bytes per kernel)) — `_memory_time`, also the memory term of the GEMM and attention rooflines
(compute.py) and of the optimizer step (optimizer.py). η_memory is the hardware profile's
`[efficiency.memory]` curve; this module holds no efficiency numbers.

Byte counts (e = bytes per activation element, T = b·s/c tokens on a rank, T_sp = T/t with sequence
parallelism else T): each kernel reads its inputs and writes its outputs once. The layer's elementwise
ops (norms, SwiGLU/GeLU, residual adds, RoPE, dropout, softmax when not flash, MoE permutation;
`memory_ops`) are the op list of the training's stack (elementwise.py: Megatron/Transformer Engine's fused
kernels, torchtitan's or Hugging Face's eager ops, or torch.compile's regions): `memory_op_rows` derives
the layer's MemoryOps from that graph by elementwise.py's one rule (`region_bytes`), as linear combinations
of the layer's sizes, once per model and setting; `layer_memory_rows` evaluates them for a layout. The
embedding lookup and norm (`_embedding_memory_ops`, first stage), the final norm and the loss (`_head_memory_ops`,
last stage).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..spec.model import ModelSpec
from ..spec.stack_choices import fp8_scale_bytes_per_element
from ..spec.training import Training
from . import flops as F
from .elementwise import SETTINGS, block_kernels, cached_graph, compiled_regions, layer_sizes, region_bytes
from .elementwise_ops import Graph, Lin, norm_backward, norm_forward, softmax_forward

__all__ = ["MemoryOp", "memory_ops", "memory_op_rows", "layer_memory_rows", "norm_ops", "fp8_cast_op"]


# a kernel's class -> its table (memory_decode_attention: cost/inference.py decode_attention's KV-cache stream)
KERNEL_TABLES = ("memory", "memory_strided", "memory_reduction", "memory_indexed", "memory_decode_attention")


def kernel_table(unit) -> str:
    """The efficiency table of one kernel (an elementwise_ops Op, or a Block run as one kernel): a row reduction
    (norms, softmax, sums: `reduction`) `memory_reduction`; an indexed write (index_put_: `indexed`)
    `memory_indexed`; an elementwise op on a strided or broadcast operand (torch's generic loop, `strided`)
    `memory_strided`; else `memory`."""
    if getattr(unit, "reduction", False):
        return "memory_reduction"
    if getattr(unit, "indexed", False):
        return "memory_indexed"
    return "memory_strided" if getattr(unit, "strided", False) else "memory"


@lru_cache(maxsize=1)
def softmax_table() -> str:
    """The table of the softmax over the scores as one kernel (elementwise_ops.softmax_forward, fused): what
    cost/attention.py takes out of the measured unfused attention."""
    g = Graph(2.0)
    softmax_forward(g, "fused", g.t("S", Lin(S=1.0)), Lin())
    return kernel_table(g.blocks[-1])


def _memory_time(bytes_, kernels, hardware, table="memory"):
    """bytes / (HBM bytes/s · η(bytes per kernel)); 0 for 0 bytes. η is the profile's table of the kernels' class
    (`table`: one of KERNEL_TABLES, or an array of them broadcast against the bytes; `kernel_table`) where the
    profile has it, else its `memory` table (a class not measured there is timed as any memory-bound kernel)."""
    bytes_ = np.asarray(bytes_, dtype=float)
    per_kernel = np.maximum(bytes_ / kernels, 1.0)
    eff = hardware.interp_efficiency("memory", per_kernel)
    for name in KERNEL_TABLES[1:]:
        if np.any(np.asarray(table) == name) and hardware.has_efficiency(name):
            eff = np.where(np.asarray(table) == name, hardware.interp_efficiency(name, per_kernel), eff)
    return bytes_ / (hardware.hbm_bytes_per_s * eff)


@dataclass(frozen=True, kw_only=True)
class MemoryOp:
    """A memory-bound op of one layer (or of the embedding/head) for one microbatch on one rank.

    Bytes moved in the forward, in the backward input-gradient (B) and weight-gradient (W) kernels;
    `kernels` is how many kernels share the bytes (the x of η_memory is bytes per kernel), in the backward
    `backward_kernels` (None: `kernels`).
    """

    name: str
    forward_bytes: object
    backward_bytes: object
    weight_bytes: object = 0.0
    kernels: float = 1.0
    backward_kernels: float | None = None
    core_attention: bool = False
    ffn: bool = False  # part of the FFN (dense or MoE), not of the attention block
    table: str = "memory"  # the kernels' efficiency table (`kernel_table`: memory, memory_strided, memory_reduction)


def memory_ops(model: ModelSpec, training: Training, *, moe: bool = False, tp=1, cp=1, ep=1, micro_batch_size=1,
               sequence_parallel: bool = False, etp=None) -> tuple[MemoryOp, ...]:
    """Memory-bound ops of one layer per rank: the elementwise op list of the training's stack
    (`Stack.elementwise`, `Stack.compiled`; elementwise.py `layer_graph`), its bytes derived from the tensors
    each op reads and writes (elementwise.py `region_bytes`), one MemoryOp per group of blocks (eager and
    fused) or per torch.compile region.

    Groups and their fused counts (e = activation bytes, T = b·s/c tokens, T_sp = T/t with SP):
    - norms (norms_per_layer, over h): fwd read x + write y = 2·T_sp·h·e; bwd read x, dy, write dx = 3.
    - residual_adds (2): fwd read 2 + write 1 = 3·T_sp·h·e each; bwd the gradient accumulation, the same.
    - rope (models without a learned position table) on Q and K (T·(q + kv)/t elements): read + write each
      way. MLA: n_h·d_r per query, one shared d_r key (replicated across TP).
    - qk_norm (Qwen3): 2 and 3 passes over T·(q + kv)/t. latent_norms (MLA) over r_q and r_kv.
    - hidden_dropout (training.dropout, 2 sites): fwd read x, write y, write a 1-byte mask; bwd read dy,
      mask, write dx: (2e + 1)·T_sp·h each.
    - mlp_activation: SwiGLU/GeGLU fwd read gate, up + write = 3·T·f/t·e, bwd read gate, up, dy + write
      dgate, dup = 5·T·f/t·e; GeLU 2 and 3. MoE: routed tokens ρ·k·T·u/t with f_e/u (u = `etp`, None: t),
      shared experts T with f_sh/t.
    - moe_permute (dispatch and combine): (T + k·T·u/t)·h·e each way per kernel; router_softmax_topk over T'·E
      fp32 scores (read + write); moe_sort_chunks (the megatron stack's all-to-all dispatcher, more than one local
      expert): 2·k·T·u/t·h·e per kernel, two each way (elementwise_ops.sort_chunks).
    - softmax over the score matrix (no FlashAttention only; the full s/c × s): fwd read S + write P =
      2·e per element, bwd read P, dP + write dS = 3·e; attention dropout (2e + 1) per element each way.
    The eager settings add their own ops and groups (qkv_layout, input_grad_adds, repeat_kv): elementwise.py.
    """
    rows = layer_memory_rows(model, training, moe=moe, tp=tp, cp=cp, ep=ep, micro_batch_size=micro_batch_size,
                             sequence_parallel=sequence_parallel, etp=etp)
    return tuple(MemoryOp(**row) for row in rows)


# ---- the layer's elementwise op list as MemoryOps (elementwise.py builds the list) --------------------------
def _counted(g, unit) -> bool:
    """A kernel that moves activation-sized tensors (not only small ones): what η_memory's x counts."""
    return any(g.size[t][1] > 0 for t in (*unit.reads, *unit.writes))


def _compiled_rows(g: Graph) -> list[dict]:
    readers: dict = {}
    for b in g.blocks:
        for t in b.reads:
            readers.setdefault(t, set()).add(id(b))
    rows = []
    for i, r in enumerate(compiled_regions(g)):
        by, fwd = region_bytes(g, r, readers), r[0].phase == "forward"
        rows.append(dict(name=f"compiled {i} {r[0].phase}: " + "+".join(dict.fromkeys(b.group for b in r)),
                         forward_bytes=by if fwd else Lin(), backward_bytes=Lin() if fwd else by, kernels=1.0,
                         ffn=r[0].ffn, core_attention=r[0].core))
    return rows


def memory_op_rows(g: Graph, compiled: bool) -> list[dict]:
    """The graph's elementwise work as `MemoryOp` fields (bytes as `Lin`), by the one rule of elementwise.py
    (`region_bytes`): one row per group of blocks and kernel class (eager settings: each aten op a kernel; fused:
    each block a kernel; where a group's kernels are of several classes (`kernel_table`), the strided ones and the
    reductions in rows of their own, "<group> (strided)", "<group> (reduction)"), or one per torch.compile region
    (Inductor's kernels: timed with the `memory` table)."""
    if compiled:
        return _compiled_rows(g)
    rows: dict = {}
    for b in g.blocks:
        if b.boundary:
            continue
        fwd = b.phase == "forward"
        for u in block_kernels(b):
            table = kernel_table(u)
            row = rows.setdefault((b.group, table), dict(name=b.group, forward_bytes=Lin(), backward_bytes=Lin(),
                                                         kernels=0.0, backward_kernels=0.0, ffn=b.ffn,
                                                         core_attention=b.core, table=table))
            row["forward_bytes" if fwd else "backward_bytes"] += region_bytes(g, (u,))
            row["kernels" if fwd else "backward_kernels"] += float(_counted(g, u))
    classes = Counter(group for group, _ in rows)
    for (group, table), row in rows.items():
        row["kernels"] = max(row["kernels"], 1.0)
        row["backward_kernels"] = max(row["backward_kernels"], 1.0)
        if classes[group] > 1 and table != "memory":
            row["name"] = f"{group} ({table.removeprefix('memory_')})"
    return list(rows.values())


@lru_cache(maxsize=256)
def _rows(model, setting, e, dropout, flash, moe, sequence_parallel, compiled, padding, dispatcher) -> tuple:
    return tuple(memory_op_rows(cached_graph(model, setting, e, dropout, flash, moe, sequence_parallel, padding,
                                             dispatcher), compiled))


def layer_memory_rows(model, training, *, moe: bool = False, tp=1, cp=1, ep=1, micro_batch_size=1,
                      sequence_parallel: bool = False, etp=None) -> list[dict]:
    """`memory_op_rows` of the training's stack, its bytes evaluated for the layout (scalars or arrays)."""
    st = training.stack
    rows = _rows(model, st.elementwise, float(training.activation_bytes), bool(training.dropout),
                 bool(training.flash_attention), moe, bool(sequence_parallel), st.compiled, st.attention_padding,
                 st.moe_dispatcher)
    sizes = layer_sizes(model, training, moe=moe, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                        sequence_parallel=sequence_parallel, etp=etp, ep=ep)
    return [{**r, "forward_bytes": r["forward_bytes"].value(sizes), "backward_bytes": r["backward_bytes"].value(sizes)}
            for r in rows]


@lru_cache(maxsize=64)
def _norm_rows(impl: str, e: float) -> tuple:
    g = Graph(e)
    norm_forward(g, impl, "n", g.t("x", Lin(x=1.0)))
    norm_backward(g, impl, "n", g.t("dy", Lin(x=1.0)))
    return tuple(memory_op_rows(g, False))


def norm_ops(name: str, training, elems, norm: str = "rmsnorm") -> tuple:
    """One norm over `elems` elements under the training's stack as MemoryOps named `name` (the final and the
    embedding norm; the layers' norms are blocks of `layer_graph`): its ops' bytes and kernels by kernel class
    (`kernel_table`)."""
    impl = SETTINGS[training.stack.elementwise]["norm"]
    if training.stack.compiled:
        impl = "te"  # one region: reads x, writes y (backward: reads dy and x, writes dx)
    elif impl == "hf" and norm != "rmsnorm":
        impl = "torch"
    sizes = {"x": elems}
    return tuple(MemoryOp(name=name + r["name"].removeprefix("norms"), forward_bytes=r["forward_bytes"].value(sizes),
                          backward_bytes=r["backward_bytes"].value(sizes), kernels=r["kernels"],
                          backward_kernels=r["backward_kernels"],
                          table="memory" if training.stack.compiled else r["table"])  # (as compiled regions)
                 for r in _norm_rows(impl, float(training.activation_bytes)))


def _embedding_memory_ops(model, training, *, tp, cp, micro_batch_size, sequence_parallel) -> tuple[MemoryOp, ...]:
    """Input embedding lookup (first stage): fwd read T rows + write T×h (2·T·h·e, + the position table
    when learned); the table gradient (a scatter-add: read dy, read + write rows = 3·T·h·e) is W. With an
    embedding norm (BLOOM), the stack's norm over T×h (`norm_ops`, as the final norm)."""
    e = float(training.activation_bytes)
    T = F._f(micro_batch_size) * training.seq_length / F._f(cp)
    tables = 2.0 if model.learned_position_embeddings else 1.0
    h = model.hidden_size
    ops = (MemoryOp(name="embedding", forward_bytes=tables * 2 * T * h * e, backward_bytes=0.0 * T,
                    weight_bytes=tables * 3 * T * h * e, kernels=tables),)
    if model.embedding_norm:
        T_sp = T / F._f(tp) if sequence_parallel else T
        ops += norm_ops("embedding_norm", training, T_sp * h, model.norm)
    return ops


def _head_memory_ops(model, training, *, tp, cp, micro_batch_size, sequence_parallel) -> tuple[MemoryOp, ...]:
    """Final norm (the stack's norm, `norm_ops`) and the loss on the last stage.

    Loss over X = T·V/t logits per rank, t the loss's shards (Stack.loss_shards; training.cross_entropy):
    - vocab-parallel (Megatron vocab-parallel CE in PyTorch ops): fwd read logits (e) + write and read
      an fp32 copy (4 + 4) + write fp32 softmax (4) = (e + 12)·X; bwd read the fp32 softmax + write the
      logit gradient = (4 + e)·X.
    - torch-fp32 (`F.cross_entropy(logits.float())`): fwd as above, (e + 12)·X; bwd nll_loss_backward
      writes a dense fp32 gradient (4), log_softmax's backward reads it and the saved output and writes
      the fp32 logit gradient (4 + 4 + 4), the cast back reads it and writes e: (20 + e)·X.
    - torch (`F.cross_entropy(logits)` on the e-byte logits): log_softmax reads them and writes its e-byte output,
      2e·X; bwd nll_loss_backward writes a dense e-byte gradient (e), log_softmax's backward reads it and the saved
      output and writes the logit gradient (3e): 4e·X, no casts.
    - fused, xentropy (one CUDA kernel each way, fp32 math in registers): fwd one read e·X, bwd read
      logits + write gradient 2e·X.
    - te (Transformer Engine's parallel_cross_entropy before v2.18: transformer_engine/pytorch/triton/cross_entropy.py):
      fwd an online-softmax pass reading the logits (e·X, reduction) and a pass reading them again and writing the
      gradient in place (2e·X); bwd scales that gradient by the loss's gradient in place (2e·X).
    The softmax passes (the fused kernels; log_softmax's 8·X forward and, in torch-fp32, its 12·X backward) are row
    reductions, "loss (reduction)" (`kernel_table`); the casts and the fill stream, "loss".

    Training metrics (`Stack.train_metric_losses` = n): Composer updates each train metric on the micro-batch's
    logits after its backward (composer/trainer/trainer.py `_eval_train_metrics`, v0.13-v0.19), and
    LanguageCrossEntropy (LanguagePerplexity subclasses it) evaluates torch.nn.CrossEntropyLoss(reduction='sum')
    under autocast. cross_entropy_loss has no autocast kernel: it runs `log_softmax(logits, 1, logits.dtype)` then
    nll_loss (aten/src/ATen/native/LossNLL.cpp). Autocast keeps an explicit log_softmax dtype (policy
    fp32_set_opt_dtype) and casts nll_loss's input to fp32 (policy fp32; ATen autocast_mode.h). Per evaluation
    that is a log_softmax in the logits' dtype, 2e·X, "train metrics (reduction)"; for e < 4, a cast of the
    log-probabilities to fp32, (e + 4)·X, "train metrics"; and nll_loss's gather of T elements (not counted).
    Counted in the backward (B), on the head stage.
    """
    e = float(training.activation_bytes)
    tp, cp, b = F._f(tp), F._f(cp), F._f(micro_batch_size)
    T = b * training.seq_length / cp
    T_sp = T / tp if sequence_parallel else T
    X = T * model.vocab_size / F._f(training.stack.loss_shards(tp))
    if training.cross_entropy in ("fused", "xentropy"):
        loss = (MemoryOp(name="loss (reduction)", forward_bytes=e * X, backward_bytes=2 * e * X,
                         table="memory_reduction"),)
    elif training.cross_entropy == "torch":
        loss = (MemoryOp(name="loss", forward_bytes=0.0 * X, backward_bytes=e * X),
                MemoryOp(name="loss (reduction)", forward_bytes=2 * e * X, backward_bytes=3 * e * X,
                         table="memory_reduction"))
    elif training.cross_entropy == "te":
        loss = (MemoryOp(name="loss (reduction)", forward_bytes=e * X, backward_bytes=0.0 * X,
                         table="memory_reduction"),
                MemoryOp(name="loss", forward_bytes=2 * e * X, backward_bytes=2 * e * X))
    else:
        torch_fp32 = training.cross_entropy == "torch-fp32"
        stream_b = (8.0 if torch_fp32 else 4.0) + e  # the fill (torch-fp32) and the cast back
        loss = (MemoryOp(name="loss", forward_bytes=(e + 4.0) * X, backward_bytes=stream_b * X,
                         backward_kernels=2.0 if torch_fp32 else 1.0),
                MemoryOp(name="loss (reduction)", forward_bytes=8.0 * X,
                         backward_bytes=(12.0 if torch_fp32 else 0.0) * X, table="memory_reduction"))
    return (*norm_ops("final_norm", training, T_sp * model.hidden_size, model.norm), *loss,
            *_train_metric_ops(training, X, e))


def _train_metric_ops(training, X, e) -> tuple[MemoryOp, ...]:
    """The training metrics' loss evaluations over X logits of e bytes (`_head_memory_ops` docstring)."""
    n = float(training.stack.train_metric_losses)
    if not n:
        return ()
    cast = (MemoryOp(name="train metrics", forward_bytes=0.0 * X, backward_bytes=n * (e + 4.0) * X,
                     backward_kernels=n),) if e < 4.0 else ()
    return (MemoryOp(name="train metrics (reduction)", forward_bytes=0.0 * X, backward_bytes=n * 2.0 * e * X,
                     backward_kernels=n, table="memory_reduction"),) + cast


def fp8_cast_op(gemm, training: Training) -> MemoryOp:
    """The FP8 casts around one FP8 GEMM (`flops.LayerOp` with m tokens, k inputs, n outputs, `calls`):
    forward, its input activation (m·k elements); backward, its output gradient (m·n). Each cast is one
    Transformer Engine cast-transpose kernel (transformer_engine/common/transpose/cast_transpose.cu):
    read the e-byte tensor, write the FP8 tensor and its FP8 transpose (the wgrad GEMM's layout),
    e + 2 bytes per element, with the amax taken in the same pass. The stack's `fp8_recipe`:
    "delayed" (scale from the amax history) adds nothing; "current" (torchao tensorwise, TE
    Float8CurrentScaling) reads the tensor once more for its amax first (+ e); "mxfp8" writes one 1-byte
    scale per 32 elements for each of the two layouts (+ 2/32: `fp8_scale_bytes_per_element`). The weights'
    casts are made once per step and reused by every microbatch (TE `is_first_microbatch`), so they are not
    per-microbatch bytes."""
    e = float(training.activation_bytes)
    recipe = training.stack.fp8_recipe
    per = e + 2.0 + (e if recipe == "current" else 0.0) + 2.0 * fp8_scale_bytes_per_element(recipe)
    fwd = F._f(gemm.m) * F._f(gemm.k) * F._f(gemm.calls)
    bwd = F._f(gemm.m) * F._f(gemm.n) * F._f(gemm.calls)
    return MemoryOp(name=f"fp8_cast_{gemm.name}", forward_bytes=per * fwd, backward_bytes=per * bwd,
                    ffn=False)
