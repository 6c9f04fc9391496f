"""Predict every row recorded by `train_step.py` with parasim and print the error table.

Each row maps to parasim inputs exactly as the harness trained it:
ModelSpec(SwiGLU, RMSNorm, no biases, untied embeddings) with the row's shape fields;
Training(seq_length=seq, global_batch_size=micro_batch, precision=dtype, grad_dtype=dtype,
master_weights=False, optimizer='adamw', optimizer_dtype=dtype, flash_attention=(attention == 'sdpa'),
cross_entropy='torch-fp32' (the harness's loss is F.cross_entropy(logits.float())), stack = torchtitan's
(plain torch: its kernel counts were taken from this harness's layer) with the harness's own elementwise op
list, "packed" (one QKV GEMM viewed as heads, rotate_half RoPE, one gate/up GEMM chunked: cost/elementwise.py,
checked against the layer's recorded ops in tests/test_elementwise_ops.py), the row's AdamW
implementation, its gradient buffer (kept, or set to None by zero_grad) and its attention (SDPA: cuDNN's kernels on the H100, as profiled; eager: unfused);
Layout(num_gpus=1, micro_batch_size=micro_batch, recompute). The hardware is the calibrated profile
(`--hardware hardware_profiles/measured/NAME.toml`); calibrate on the same device first.

Memory is compared on the allocator's basis: `torch.cuda.max_memory_allocated()` counts tensor bytes
only, so the prediction compared is parasim's peak minus its runtime overheads (CUDA context, NCCL
buffers, allocator reserve: memory/overheads.py), which the allocator never hands out as tensors.
The full predicted device peak is kept in the `predicted_device_bytes` column.

    python validation/compare_train_steps.py validation/train_steps_h100.csv --hardware hardware_profiles/measured/h100.toml
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}


HARNESS_ELEMENTWISE = "packed"  # validation/train_step.py's layer code (cost/elementwise.py SETTINGS)


def specs_for_row(row, *, cross_entropy: str = "torch-fp32", elementwise: str | None = None, stack: dict | None = None):
    """(ModelSpec, Training, Layout) of one harness row (module docstring). `cross_entropy` other than the
    harness's own torch-fp32, an `elementwise` op list other than the harness's ("packed"; None), or other
    `stack` fields than the row's shows what another model would predict (docs/validation-h100.md)."""
    from simulator.spec.layout import Layout
    from simulator.spec.model import ModelSpec
    from simulator.spec.stack import load_stack
    from simulator.spec.training import Training

    dt = PRECISION[str(row["dtype"])]
    model = ModelSpec(name=str(row["run_id"]), hidden_size=int(row["hidden"]), num_layers=int(row["layers"]),
                      num_heads=int(row["heads"]), num_kv_heads=int(row["kv_heads"]), ffn_hidden_size=int(row["ffn_hidden"]),
                      vocab_size=int(row["vocab"]), mlp="swiglu", norm="rmsnorm", tie_word_embeddings=False)
    fields = dict(attention_kernel="cudnn" if str(row["attention"]) == "sdpa" else "unfused",
                  optimizer_impl=str(row.get("optimizer_impl", "foreach")),
                  grad_buffer=str(row.get("grad_buffer", "persistent")), elementwise=elementwise or HARNESS_ELEMENTWISE)
    stack = load_stack("torchtitan", **{**fields, **(stack or {})})
    training = Training(seq_length=int(row["seq_len"]), global_batch_size=int(row["micro_batch"]), precision=dt,
                        grad_dtype=dt, master_weights=False, optimizer="adamw", optimizer_dtype=dt,
                        flash_attention=str(row["attention"]) == "sdpa", cross_entropy=cross_entropy, stack=stack)
    layout = Layout(num_gpus=1, micro_batch_size=int(row["micro_batch"]), recompute=str(row["recompute"]))
    return model, training, layout


def compare(df, hardware, *, estimate_fn=None, cross_entropy: str = "torch-fp32", elementwise: str | None = None,
            stack: dict | None = None):
    """DataFrame: run_id, measured/predicted step and memory and their signed errors (fractions)."""
    import pandas as pd

    from simulator.validate import signed_error

    if estimate_fn is None:
        from simulator.estimate import estimate as estimate_fn
    rows = []
    for _, r in df[df["status"] == "ok"].iterrows():
        m, t, lay = specs_for_row(r, cross_entropy=cross_entropy, elementwise=elementwise, stack=stack)
        e = estimate_fn(m, t, lay, hardware)
        w = e.memory.worst
        tensors = float(w.peak_bytes - w.overhead_bytes)  # what torch's allocator counts (module docstring)
        unt = _untimed_s(t, hardware, w) if hardware is not None else 0.0  # (None: a stand-in estimate_fn's test)
        step = float(e.step_s) - unt
        rows.append({"run_id": r["run_id"], "params_match": int(r["params"]) == m.total_params(),
                     "measured_step_s": float(r["step_time_s"]), "predicted_step_s": step,
                     "step_error": float(signed_error(step, r["step_time_s"])),
                     "measured_mem_bytes": float(r["peak_mem_bytes"]), "predicted_mem_bytes": tensors,
                     "predicted_device_bytes": float(w.peak_bytes), "predicted_untimed_s": unt,
                     "mem_error": float(signed_error(tensors, r["peak_mem_bytes"])),
                     "mem_basis": r["mem_basis"], **_phases(r, e, w, unt),
                     "predicted_loss_work_bytes": _loss_work(m, t, lay)})
    return pd.DataFrame(rows)


def _untimed_s(training, hardware, worst) -> float:
    """The part of parasim's step that train_step.py's window leaves out: it calls `zero_grad` before its first
    CUDA event, so the zeroing of kept gradients (cost/gradients.py `grad_zeroing_s`, over the gradient bytes the
    memory model counts) runs before the timed step starts; a training loop's own step includes it."""
    from simulator.cost.gradients import grad_zeroing_s

    return float(grad_zeroing_s(training, hardware, grad_bytes=float(worst.grads_bytes)))


def _loss_work(model, training, layout) -> float:
    """The loss's backward working set the prediction holds in its activations (memory/activations.py)."""
    from simulator.memory.head_activations import loss_backward_bytes

    return float(loss_backward_bytes(model, training, tp=layout.tp, cp=layout.cp,
                                     micro_batch_size=layout.micro_batch_size))


def _phases(r, e, w, untimed_s: float = 0.0) -> dict:
    """Per-phase columns where the harness recorded them (train_step.py's fwd/bwd/opt times, state
    bytes): forward + backward against parasim's compute less its optimizer step, the optimizer step
    against `optimizer_s` less the zeroing the harness does not time (`_untimed_s`), parameters + gradients
    + optimizer states against the memory model's."""
    if "fwd_time_s" not in r or not all(float(r[k]) == float(r[k]) for k in ("fwd_time_s", "bwd_time_s", "opt_time_s")):
        return {}
    opt = float(e.row["optimizer_s"]) - untimed_s
    return {"measured_fwd_bwd_s": float(r["fwd_time_s"]) + float(r["bwd_time_s"]),
            "predicted_fwd_bwd_s": float(e.row["compute_s"]) - opt - untimed_s,
            "measured_opt_s": float(r["opt_time_s"]), "predicted_opt_s": opt,
            "measured_state_bytes": float(r["state_bytes"]),
            "predicted_state_bytes": float(w.params_bytes + w.grads_bytes + w.optimizer_bytes),
            "measured_saved_bytes": float(r["saved_bytes"]), "predicted_activation_bytes": float(w.activations_bytes)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="parasim vs train_step.py measurements")
    ap.add_argument("runs", help="CSV written by train_step.py")
    ap.add_argument("--hardware", required=True, help="calibrated profile path (or a preset name)")
    ap.add_argument("--max-step-error", type=float, default=None, help="exit 1 if any |step error| exceeds this")
    a = ap.parse_args(argv)
    import numpy as np
    import pandas as pd

    from simulator.spec.hardware import load_hardware

    df = pd.read_csv(a.runs)
    res = compare(df, load_hardware(a.hardware))
    pct = lambda v: "" if not math.isfinite(v) else f"{100 * v:+.1f}%"  # noqa: E731
    print(pd.DataFrame({"run_id": res["run_id"], "meas step [s]": res["measured_step_s"].map("{:.4f}".format),
                        "pred step [s]": res["predicted_step_s"].map("{:.4f}".format), "step err": res["step_error"].map(pct),
                        "meas mem [GiB]": (res["measured_mem_bytes"] / 2**30).map("{:.2f}".format),
                        "pred mem [GiB]": (res["predicted_mem_bytes"] / 2**30).map("{:.2f}".format),
                        "mem err": res["mem_error"].map(pct)}).to_string(index=False))
    se, me = np.abs(res["step_error"]), np.abs(res["mem_error"])
    print(f"\n{len(res)} runs; step |error| median {pct(se.median())} max {pct(se.max())}; "
          f"memory |error| median {pct(me.median())} max {pct(me.max())}")
    skipped = df[df["status"] != "ok"]
    for _, r in skipped.iterrows():
        print(f"not compared {r['run_id']}: {r['status']}")
    if a.max_step_error is not None and se.max() > a.max_step_error:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
