"""The kept gradients' own kernels in the lent H100's profiled training steps against cost/gradients.py:
zeroing them (`grad_zeroing_s`) and adding each backward's new weight gradients into them (`grad_accumulation_s`).

    python validation/grad_kernels.py     # the markdown tables of docs/compute.md

The profiled steps of `validation/h100/kernel_breakdown.csv` (fused AdamW, persistent gradients:
`optimizer.zero_grad(set_to_none=False)` before each step, one micro-batch) list each run's 25 longest kernels
with their CUPTI time per step.

- Zeroing: torch's multi-tensor zero kernel (`multi_tensor_apply_kernel<TensorListMetadata<1>, ...ZeroFunctor`,
  the name cut after "Z"), predicted for the run's gradient bytes with the shipped `dgx-h100` preset, whose memory
  table was fitted to add, copy, RMSNorm and SiLU kernels (validation/h100_memory_table.py), none of them this one.
- Accumulation: autograd adds into a kept gradient with the same bf16 add kernel
  (`vectorized_elementwise_kernel<8, CUDAFunctor_add<c10::BFloat16>>`) as the layers' residual and gradient adds,
  so the kernel's time is compared as a rate: the bytes the stack's op list gives those adds
  (cost/memory_ops.py, names containing "add", the recompute forward's again) plus the accumulation's 3 bytes
  moved per gradient byte, over the measured time, against the rate the same add kernel reached queued on the
  same GPU (`validation/h100_owed/memory_queued.csv`, from 64 MiB inputs) and HBM's 3.35 TB/s. Without the
  accumulation the kernel would have moved its bytes at a fraction of that rate.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))
DATA = ROOT / "validation" / "h100"
ZERO_KERNEL = ("TensorListMetadata<1>", "::Z")  # the multi-tensor ZeroFunctor kernel (its name is cut after "Z")
ADD_KERNEL = "CUDAFunctor_add<c10::BFloat16>"


def _kernels():
    import pandas as pd

    k = pd.read_csv(DATA / "kernel_breakdown.csv")
    k["kernel"] = k["kernel"].fillna("")
    runs = pd.read_csv(DATA / "fused_persistent_gpu.csv").set_index("run_id", drop=False)
    return k, runs


def zeroing_rows(hardware: str = "dgx-h100"):
    """DataFrame, one row per profiled run whose zero kernel is among its 25 longest: run_id, gradient bytes,
    measured and predicted seconds, error (predicted / measured - 1)."""
    import pandas as pd

    from compare_train_steps import specs_for_row
    from simulator.cost.gradients import grad_zeroing_s
    from simulator.spec.hardware import load_hardware

    k, runs = _kernels()
    zero = k[(k["category"] == "kernel:optimizer") & k["kernel"].str.contains(ZERO_KERNEL[0], regex=False)
             & k["kernel"].str.endswith(ZERO_KERNEL[1])]
    hw = load_hardware(hardware)
    out = []
    for r in zero.itertuples():
        row = runs.loc[r.run_id]
        _, training, _ = specs_for_row(row)
        g = float(row["params"]) * training.grad_bytes
        p = float(grad_zeroing_s(training, hw, grad_bytes=g))
        out.append(dict(run_id=r.run_id, grad_bytes=g, measured_s=float(r.time_s), predicted_s=p,
                        error=p / float(r.time_s) - 1.0))
    return pd.DataFrame(out)


def queued_add_rate_bytes_per_s() -> tuple[float, float]:
    """(lowest, highest) rate of the bf16 add kernel queued on the lent H100 from 64 MiB inputs (memory_queued.csv)."""
    import pandas as pd

    q = pd.read_csv(ROOT / "validation" / "h100_owed" / "memory_queued.csv")
    q = q[(q["kernel"] == "add") & (q["dtype"] == "bfloat16") & (q["size_bytes"] >= 64 * 2**20)]
    rate = q["bytes_moved"] / q["queued_s"]
    return float(rate.min()), float(rate.max())


def accumulation_rows():
    """DataFrame, one row per profiled run: the bf16 add kernel's measured seconds per step, the bytes the op list's
    adds move, the accumulation's bytes (3 per kept gradient byte: autograd adds into the persistent gradients of
    the run's one micro-batch), and the rates with and without the accumulation."""
    import numpy as np
    import pandas as pd

    from compare_train_steps import specs_for_row
    from simulator.cost.memory_ops import memory_ops

    k, runs = _kernels()
    adds = k[k["kernel"].str.contains(ADD_KERNEL, regex=False)].groupby("run_id")["time_s"].sum()
    out = []
    for rid, t in adds.items():
        model, tr, lay = specs_for_row(runs.loc[rid])
        fwd = 2 if lay.recompute == "full" else 1  # the recomputed forward runs its adds again
        ops = memory_ops(model, tr, moe=False, tp=1, cp=1, ep=1, micro_batch_size=lay.micro_batch_size,
                         sequence_parallel=False)
        op_bytes = model.num_layers * sum(fwd * float(np.sum(o.forward_bytes)) + float(np.sum(o.backward_bytes))
                                          + float(np.sum(o.weight_bytes)) for o in ops if "add" in o.name)
        acc = 3.0 * float(runs.loc[rid, "params"]) * tr.grad_bytes
        out.append(dict(run_id=rid, measured_s=float(t), op_list_bytes=op_bytes, accumulation_bytes=acc,
                        rate=(op_bytes + acc) / float(t), rate_without=op_bytes / float(t)))
    return pd.DataFrame(out)


def tables(hardware: str = "dgx-h100") -> str:
    d = zeroing_rows(hardware)
    lines = ["| run | gradient bytes | measured zero kernel ms | parasim ms | error |", "|---|---|---|---|---|"]
    for r in d.itertuples():
        lines.append(f"| {r.run_id} | {r.grad_bytes / 1e9:.2f} GB | {1e3 * r.measured_s:.2f} | "
                     f"{1e3 * r.predicted_s:.2f} | {100 * r.error:+.1f} % |")
    lo, hi = queued_add_rate_bytes_per_s()
    lines += ["", "Accumulation (the bf16 add kernel queued on the same GPU: "
              f"{lo / 1e12:.2f}-{hi / 1e12:.2f} TB/s from 64 MiB; HBM 3.35 TB/s):", "",
              "| run | measured add kernels ms | op-list adds GB | accumulation GB | rate with it TB/s | "
              "rate without it TB/s |", "|---|---|---|---|---|---|"]
    for r in accumulation_rows().itertuples():
        lines.append(f"| {r.run_id} | {1e3 * r.measured_s:.2f} | {r.op_list_bytes / 1e9:.2f} | "
                     f"{r.accumulation_bytes / 1e9:.2f} | {r.rate / 1e12:.2f} | {r.rate_without / 1e12:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(tables())
