"""Activation memory of the first and last pipeline stages beyond their layers, per micro-batch (bytes): the
embedding's token ids and dropout mask, the final norm, the LM head's input, the logits kept for the loss and
the loss's backward working set (Korthikanti et al. 2022 §4.3). Notation as memory/activations.py."""
from __future__ import annotations

import numpy as np

from ..spec.model import ModelSpec
from ..spec.training import Training
from .activations import _f, _setup, dropout_mask_bytes, norm_bytes


# ---- embedding and head -------------------------------------------------------------------------
def embedding_activation_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size,
                               sequence_parallel: bool) -> np.ndarray:
    """First stage, per micro-batch: int64 token ids 8·T and, with dropout, the 1-byte embedding-dropout
    mask T·h/t_s (Korthikanti §4.3 "sbhp/t" for p in-flight micro-batches; Megatron
    theoretical_memory_usage.py adds 8·s·b·p for the ids); with an embedding norm (BLOOM: HF
    `word_embeddings_layernorm`, Megatron-DeepSpeed --embed-layernorm) the norm's saved input and
    statistics, `norm_bytes` (the first layer keeps its own input, the norm's output, apart)."""
    t, t_s, T, e = _setup(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                          sequence_parallel=sequence_parallel)
    out = 8.0 * T + dropout_mask_bytes(tokens=T, hidden=model.hidden_size, t_s=t_s, dropout=training.dropout)
    if model.embedding_norm:
        out = out + norm_bytes(tokens=T, hidden=model.hidden_size, e=e, t_s=t_s, layernorm=model.norm == "layernorm")
    return out


def logits_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size) -> np.ndarray:
    """Logits kept for the loss's backward: 4·T·V/t in fp32 (Korthikanti §4.3), t the ranks the loss's
    logits are split over (Stack.loss_shards: 1 where every TP rank gathers the whole logits).

    vocab-parallel: Megatron-LM keeps the fp32 softmax (computed in place on an fp32 copy of the logits);
    torch-fp32: `F.cross_entropy(logits.float())` keeps log_softmax's fp32 output (torch autograd:
    derivatives.yaml, `_log_softmax_backward_data(grad, result, ...)` reads the saved result); both
    4·T·V/t. fused: 0, a fused/chunked cross-entropy never materialises them. xentropy: the e-byte
    logits themselves, e·T·V/t (flash_attn/losses/cross_entropy.py: `ctx.save_for_backward(logits, lse,
    labels)`; the per-row lse is negligible). torch (`F.cross_entropy(logits)` on e-byte logits): log_softmax's e-byte
    output, e·T·V/t (derivatives.yaml, as torch-fp32 in the logits' dtype). te: the same e·T·V/t: Transformer
    Engine's parallel_cross_entropy (transformer_engine/pytorch/cross_entropy.py before v2.18, commit 01bbe3e)
    writes the logit gradient in place into the logits in its forward and keeps them
    (`ctx.save_for_backward(inp.detach())`); from v2.18 it writes and keeps an fp32 gradient, 4·T·V/t, as
    vocab-parallel."""
    zeros = np.zeros_like(_f(tp) * _f(cp) * _f(micro_batch_size))
    if training.cross_entropy == "fused":
        return zeros
    T = _f(micro_batch_size) * training.seq_length / _f(cp)
    per = float(training.activation_bytes) if training.cross_entropy in ("xentropy", "te", "torch") else 4.0
    return zeros + per * model.vocab_size * T / _f(training.stack.loss_shards(tp))


def loss_backward_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size) -> np.ndarray:
    """Working set of the loss's backward on top of the kept logits, for one micro-batch on the last stage.

    torch-fp32: 8·T·V/t (12·T·V/t with t > 1). `nll_loss_backward` writes a dense fp32 gradient of the
    log-probabilities (4·T·V/t) and `_log_softmax_backward_data` writes the fp32 logit gradient (4·T·V/t)
    while that gradient and the saved log_softmax output (logits_bytes) are still alive (torch autograd,
    derivatives.yaml). Measured on an H100 (validation/h100, docs/validation-h100.md): peak less states
    and saved tensors 8.1-8.4 bytes per logit element. With TP (t > 1) the logits are vocabulary-sharded
    DTensors and the loss runs under torch's `loss_parallel` (torchtitan's default with TP): its
    `_log_softmax` and `_nll_loss_and_log_softmax_backward` (torch/distributed/tensor/parallel/loss.py)
    keep the same fp32 output but write 12·T·V/t in backward (measured on CPU,
    tests/test_activations_torch.py: peak 16 bytes per local logit element above the bf16 logits, against 12
    for F.cross_entropy).
    torch: 2e·T·V/t, torch-fp32's two gradients in the logits' dtype (the dense nll_loss gradient, the logit gradient).
    xentropy: e·T·V/t, the logit gradient its backward writes (not in place) beside the kept logits.
    vocab-parallel (Megatron-LM computes the gradient in place in the saved softmax), te (the gradient is already
    in the kept logits; its backward scales it in place) and fused: 0.
    """
    zeros = np.zeros_like(_f(tp) * _f(cp) * _f(micro_batch_size))
    e = float(training.activation_bytes)
    per = {"torch-fp32": 8.0, "torch": 2 * e, "xentropy": e}.get(training.cross_entropy, 0.0)
    if per == 0.0:
        return zeros
    t_loss = _f(training.stack.loss_shards(tp))
    if training.cross_entropy == "torch-fp32":
        per = np.where(t_loss > 1, 12.0, 8.0)  # loss_parallel under TP
    T = _f(micro_batch_size) * training.seq_length / _f(cp)
    return zeros + per * model.vocab_size * T / t_loss


def train_metric_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size) -> np.ndarray:
    """Bytes alive while the training metrics evaluate their loss on one micro-batch's logits after its backward
    (`Stack.train_metric_losses` > 0; Composer, cost/memory_ops.py `_train_metric_ops`), on the last stage:
    the kept logits, the log-probabilities log_softmax writes in their dtype and the fp32 copy autocast makes
    for nll_loss (none for fp32 logits), (2e + 4)·T·V/t for e < 4, else 2e·T·V/t. Only the states are alive
    besides them (the micro-batch's activations are freed by its backward; Composer runs no pipeline), so this
    is a phase of its own, counted as the optimizer step's buffers are (memory/worst.py `peak_terms`); the
    metrics run one after another, so one evaluation's bytes count."""
    zeros = np.zeros_like(_f(tp) * _f(cp) * _f(micro_batch_size))
    if not training.stack.train_metric_losses:
        return zeros
    e = float(training.activation_bytes)
    T = _f(micro_batch_size) * training.seq_length / _f(cp)
    return zeros + (2.0 * e + (4.0 if e < 4.0 else 0.0)) * model.vocab_size * T / _f(training.stack.loss_shards(tp))


def head_activation_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size,
                          sequence_parallel: bool) -> np.ndarray:
    """Last stage, per micro-batch: final-norm input and LM-head input (2·e·T·h/t_s + stats) plus the
    fp32 logits: 4·s·b·h/t·(1 + V/h) with SP (Korthikanti §4.3; formulas.md pitfall 13). Each of the D
    multi-token-prediction modules (ModelSpec.mtp_layers) keeps the same again for its own head, plus its two
    norms' inputs and its projection's 2h-wide input (its transformer layer is counted as a layer: breakdown.py)."""
    t, t_s, T, e = _setup(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                          sequence_parallel=sequence_parallel)
    h = model.hidden_size
    norm = norm_bytes(tokens=T, hidden=h, e=e, t_s=t_s, layernorm=model.norm == "layernorm")
    out = norm + e * h * T / t_s + logits_bytes(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size)
    return out * (1 + model.mtp_layers) + model.mtp_layers * (2 * norm + 2 * e * h * T / t_s)


def head_weight_grad_bytes(model: ModelSpec, training: Training, *, tp, cp, micro_batch_size,
                           sequence_parallel: bool) -> np.ndarray:
    """M_W of the LM head GEMM: input e·T·h/t_s + logits gradient e·T·V/t (see layer_weight_grad_bytes)."""
    t, t_s, T, e = _setup(model, training, tp=tp, cp=cp, micro_batch_size=micro_batch_size,
                          sequence_parallel=sequence_parallel)
    return e * T * (model.hidden_size / t_s + model.vocab_size / t)
