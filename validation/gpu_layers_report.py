"""The launch floor, eager against compiled layers, and the power limit, measured on the lent H100 (2026-11-27),
against what parasim predicts (docs/gpu-measurements.md, written by gpu_measurements_report.py).

    python validation/gpu_layers_report.py

Data (`validation/h100_owed/` and, from the second lease, `validation/h100_owed2/`; READMEs there for the
protocol): `launch.csv` (host issue, queued, CUDA-graph and kernel time per call of three bare eager ops),
`layers.csv` (the harness decoder, 4 layers, forward + backward, eager and torch.compile'd: queued time per step,
kernel time per step, kernels per layer: the second lease's, its kernels read from the profiler's trace; the first
lease's `prof.events()` sum missed whole kernel families, h100_owed2's README), `power_step.csv` (GEMMs and harness
steps back to back at the board's power limit; the second lease's also profiled, with the clock sampled).
parasim's side: the harness's stack (validation/compare_train_steps.py: torchtitan's with the harness's own
elementwise op list, "packed") on the shipped dgx-h100,
eager and with `compiled = true`: forward + backward time (the step's compute less the optimizer step), which
holds the stack's launch bound (cost/launch.py: a layer pass is no shorter than its kernels x the host time per
kernel).
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "h100_owed"
DATA2 = ROOT / "h100_owed2"  # the second lease (kernel times from the profiler's trace)
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))


def _read(name: str, data: Path = DATA) -> list[dict]:
    with open(data / name) as f:
        return list(csv.DictReader(f))


def _row_for(run_id: str, vocab: int = 1024) -> dict:
    """A train_steps.csv-like row of a harness run id (L4-h2048-a16-kv8-f5632-s2048-b1-none-bf16-sdpa); the
    layers stage's vocabulary is 1024."""
    p = run_id.split("-")
    return {"run_id": run_id, "layers": int(p[0][1:]), "hidden": int(p[1][1:]), "heads": int(p[2][1:]),
            "kv_heads": int(p[3][2:]), "ffn_hidden": int(p[4][1:]), "seq_len": int(p[5][1:]),
            "micro_batch": int(p[6][1:]), "recompute": p[7], "dtype": p[8], "attention": p[9], "vocab": vocab,
            "optimizer_impl": "fused", "grad_buffer": "persistent"}


def predicted_fwd_bwd_s(run_id: str, *, compiled: bool, elementwise: str | None = None) -> tuple[float, float]:
    """(parasim's forward + backward seconds, its launch bound alone: layers x kernels x host time) of the run
    (`elementwise`: an op list other than the harness's own)."""
    from compare_train_steps import specs_for_row

    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware

    model, training, layout = specs_for_row(_row_for(run_id), stack={"compiled": compiled}, elementwise=elementwise)
    e = estimate(model, training, layout, load_hardware("dgx-h100"))
    kf, kb = training.stack.layer_kernels
    return (float(e.row["compute_s"]) - float(e.row["optimizer_s"]),
            model.num_layers * (kf + kb) * training.stack.host_s_per_kernel)


HOST_BOUND_RUN = "L4-h2048-a16-kv8-f5632-s2048-b1-none-bf16-sdpa"  # queued 2.1x its kernels: the host sets its pace


def host_bound_ops() -> int:
    """CPU-counted ops of one forward + backward of the host-bound run (layers_cpu_ops.csv)."""
    return int(next(r["cpu_ops_fwd_bwd"] for r in _read("layers_cpu_ops.csv") if r["run_id"] == HOST_BOUND_RUN))


def lease_host_s_per_op(data: Path = DATA) -> float:
    """Host seconds per dispatched op on one lease's host (`data`: its folder): the host-bound eager run's queued
    time (the GPU waits for the host, so the time is the host's) over its CPU-counted ops."""
    r = next(r for r in _read("layers.csv", data) if r["run_id"] == HOST_BOUND_RUN and r["mode"] == "eager")
    return float(r["step_queued_s"]) / host_bound_ops()


def host_s_per_op() -> float:
    """What the stacks carry as `host_us_per_kernel` (per op counted on a CPU, as their `kernels_per_layer` are):
    the faster of the two leases' hosts, 20.3 and 14.8 µs per op for the same run, model code and torch. The rule
    the GEMM tables combine two leases by (validation/h100/README.md): a slow timing comes from interference
    (here a shared host's CPU), not from the work; the second lease's run was still host-bound (queued 1.23x its
    kernels from the trace), so its figure is an upper bound of that host's time."""
    return min(lease_host_s_per_op(DATA), lease_host_s_per_op(DATA2))


def launch_lines() -> list[str]:
    from simulator.spec.stack import load_stack

    h = {n: load_stack(n).host_s_per_kernel * 1e6 for n in ("torchtitan",)}
    out = ["| op | host issue µs | queued µs | CUDA graph µs | kernel µs |", "|---|---|---|---|---|"]
    for r in _read("launch.csv"):
        out.append(f"| {r['op']} | {float(r['host_us']):.1f} | {float(r['queued_us']):.1f} "
                   f"| {float(r['graph_us']):.2f} "
                   f"| {float(r['kernel_us']):.2f} |")
    host = [float(r["host_us"]) for r in _read("launch.csv")]
    out += ["", f"The stacks charge {h['torchtitan']:.1f} µs of host time per dispatched op (every stack alike: the "
            "eager harness's host-bound time on this GPU's host per op, next section). The lent H100's "
            f"host issues a bare eager CUDA op in {min(host):.1f}-{max(host):.1f} µs, the kernels themselves take "
            "1.2-3.4 µs, and replayed from a CUDA graph the host's part disappears (the graph column is the "
            "kernel's time plus at most 0.4 µs).", ""]
    return out


def layers_lines() -> list[str]:
    first = {(r["run_id"], r["mode"]): r for r in _read("layers.csv")}
    out = ["| run (4 layers, vocab 1024) | mode | measured queued ms | measured kernels ms (trace) | kernels per "
           "layer (trace; embedding/head/loss included) | first lease: queued ms / kernels ms (`prof.events()`) | "
           "parasim fwd+bwd ms | error vs queued | parasim launch bound ms |", "|---|---|---|---|---|---|---|---|---|"]
    for r in _read("layers.csv", DATA2):
        q, k = float(r["step_queued_s"]), float(r["kernel_s"])
        p, lb = predicted_fwd_bwd_s(r["run_id"], compiled=r["mode"] == "compiled")
        f = first[(r["run_id"], r["mode"])]
        out.append(f"| {r['run_id']} | {r['mode']} | {1e3 * q:.1f} | {1e3 * k:.1f} "
                   f"| {float(r['kernels_per_layer']):.1f} "
                   f"| {1e3 * float(f['step_queued_s']):.1f} / {1e3 * float(f['kernel_s']):.1f} "
                   f"| {1e3 * p:.1f} | {100 * (p / q - 1):+.1f} % | {1e3 * lb:.1f} |")
    return out + [""]


def power_lines() -> list[str]:
    out = ["| lease | what | run | protocol (cold), ms | back to back at the power limit, ms (range over seconds) "
           "| profiled back to back: wall ms / kernels ms (trace of 5 profiled steps, kernel_sum.csv) "
           "| protocol again (hot), ms | power W (back to back) "
           "| SM clock MHz (back to back) |", "|---|---|---|---|---|---|---|---|---|"]
    for lease, data in (("first", DATA), ("second", DATA2)):
        rows = _read("power_step.csv", data)
        for what, rid in dict.fromkeys((r["what"], r["run_id"]) for r in rows):
            g = [r for r in rows if (r["what"], r["run_id"]) == (what, rid)]
            cold = [float(r["time_s"]) for r in g if r["phase"] == "cold"][0]
            hot = [float(r["time_s"]) for r in g if r["phase"] == "hot"][0]
            s = [r for r in g if r["phase"] == "sustained"]
            t, pw, clk = ([float(r[k]) for r in s] for k in ("time_s", "power_w", "sm_clock_mhz"))
            prof = [r for r in g if r["phase"] == "profiled"]
            pcol = (f"{1e3 * float(prof[0]['time_s']):.2f} / {1e3 * _trace_kernel_s(rid):.2f}"
                    if prof and _trace_kernel_s(rid) else "")
            out.append(f"| {lease} | {what} | {rid} | {1e3 * cold:.2f} | {1e3 * min(t):.2f}-{1e3 * max(t):.2f} "
                       f"| {pcol} | {1e3 * hot:.2f} | {min(pw):.0f}-{max(pw):.0f} | {min(clk):.0f}-{max(clk):.0f} |")
    return out + [""]


def _trace_kernel_s(run_id: str) -> float:
    """Kernel seconds per step of `run_id` in the second lease's trace (kernel_sum.csv, CUDA activity only, as
    the power step profiles), 0 if not measured."""
    return next((float(r["trace_kernel_s"]) + float(r["trace_memset_s"]) for r in _read("kernel_sum.csv", DATA2)
                 if r["run_id"] == run_id and r["activities"] == "cuda"), 0.0)


def section() -> list[str]:
    return (["## Launch floor, eager against compiled layers, and the power limit", "",
             "Measured on the lent H100s on 2026-11-27 (`validation/h100_owed/`: `launch.csv`; the second lease, "
             "`validation/h100_owed2/`: `layers.csv`, `power_step.csv`, `kernel_sum*.csv`; READMEs there; "
             "`validation/gpu_layers_report.py`). parasim: the harness's stack (torchtitan's with the harness's own "
             "op list, packed) on the shipped `dgx-h100`, eager and `compiled = true`; its forward + backward "
             "includes the "
             "stack's launch bound.", "", "### The launch floor", ""] + launch_lines()
            + ["### Eager against torch.compile'd layers", ""] + layers_lines() + _layers_findings()
            + ["### FSDP's host work on one rank", ""] + fsdp_lines()
            + ["### The power limit", ""] + power_lines() + _power_findings())


def fsdp_lines() -> list[str]:
    """idle_gaps.py's totals for the same harness step plain, under FSDP1 and FSDP2 (one rank, 3 steps)."""
    out = ["| run | wrap | GPU span ms / step | busy ms / step | idle | of which the host issued late | "
           "launch gaps |", "|---|---|---|---|---|---|---|"]
    for name in ("idle_fsdp.csv", "idle_fsdp_small.csv"):
        tot: dict[str, dict[str, float]] = {}
        for r in _read(name):
            if r["kind"] == "total":
                tot.setdefault(r["run_id"], {})[r["name"]] = float(r["value"])
        for rid, t in tot.items():
            base, _, wrap = rid.partition("+")
            span = t["span_s"]
            out.append(f"| {base} | {wrap or 'none'} | {1e3 * span / 3:.1f} | {1e3 * t['busy_s'] / 3:.1f} | "
                       f"{100 * t['idle_s'] / span:.1f} % | {100 * t['host_late_s'] / span:.1f} % | "
                       f"{100 * t['launch_latency_s'] / span:.1f} % |")
    busy = {}
    for name in ("idle_fsdp.csv",):
        for r in _read(name):
            if r["kind"] == "total" and r["name"] == "busy_s":
                busy[r["run_id"]] = float(r["value"]) / 3
    rid = "L8-h4096-a32-kv8-f14336-s2048-b1-none-bf16-sdpa"
    extra = busy[rid + "+fsdp2"] - busy[rid]
    copy, dopt = _fsdp2_copy_s(rid), _foreach_extra_s(rid)
    return out + ["", "- **FSDP's wrappers idle the GPU on the host's account.** On one rank (no communication) "
                  "FSDP1 and FSDP2 add the host work of their hooks, views and copies; where the step is short the "
                  "GPU waits for it (the host-late share). parasim counts FSDP2's copies as GPU work "
                  "(`fsdp_copies`) but no FSDP host time: the eager stacks' launch bound counts the layer's own "
                  "kernels only.",
                  f"- **FSDP2's extra GPU work.** On {rid} FSDP2 keeps the GPU busy {1e3 * extra:.1f} ms longer "
                  "per step than the plain model. The two runs differ in more than the wrapper: idle_gaps.py steps "
                  "the wrapped model with foreach AdamW and the plain one with fused AdamW. parasim puts "
                  f"{1e3 * copy:.1f} ms on FSDP2's copies (split_with_sizes_copy and chunk_cat, bf16 parameters, fp32 "
                  f"reduce) and {1e3 * dopt:.1f} ms on foreach over fused AdamW: {1e3 * (copy + dopt):.1f} ms of the "
                  f"{1e3 * extra:.1f}. The rest (the one-rank collectives' own copies, the reduce dtype's casts) is "
                  "not split here.", ""]


def _foreach_extra_s(run_id: str) -> float:
    """parasim's foreach AdamW step less its fused one for the harness run (the stack's optimizer_impl)."""
    import train_step
    from compare_train_steps import specs_for_row

    from simulator.estimate import estimate
    from simulator.spec.hardware import load_hardware

    cfg = {c.run_id: c for c in train_step.GPU_GRID + train_step.HOLDOUT_GRID}[run_id]
    t = {}
    for impl in ("foreach", "fused"):
        m, tr, lay = specs_for_row(_row_for(run_id, vocab=cfg.vocab), stack={"optimizer_impl": impl})
        t[impl] = float(estimate(m, tr, lay, load_hardware("dgx-h100")).row["optimizer_s"])
    return t["foreach"] - t["fused"]


def _fsdp2_copy_s(run_id: str) -> float:
    """parasim's FSDP2 compute-stream copies for one step of the harness run (every parameter once each way)."""
    import train_step
    from compare_train_steps import specs_for_row

    from simulator.cost.fsdp import fsdp_copy_s
    from simulator.spec.hardware import load_hardware

    cfg = {c.run_id: c for c in train_step.GPU_GRID + train_step.HOLDOUT_GRID}[run_id]
    model = specs_for_row(_row_for(run_id, vocab=cfg.vocab))[0]
    out, in_ = fsdp_copy_s(load_hardware("dgx-h100"), model.total_params(), param_bytes=2.0, reduce_bytes=4.0)
    return float(out + in_)


def _layers_findings() -> list[str]:
    first = {(r["run_id"], r["mode"]): r for r in _read("layers.csv")}
    rows = {(r["run_id"], r["mode"]): r for r in _read("layers.csv", DATA2)}
    small = HOST_BOUND_RUN
    e, c = rows[(small, "eager")], rows[(small, "compiled")]
    ke, kc = float(e["kernels_per_layer"]), float(c["kernels_per_layer"])
    per_kernel_e = float(e["step_queued_s"]) / (4 * ke) * 1e6
    per_kernel_c = float(c["step_queued_s"]) / (4 * kc) * 1e6
    ops = host_bound_ops()
    return [f"- **The small run is host-bound in both modes.** {small}: eager {1e3 * float(e['step_queued_s']):.1f} ms "
            f"queued for {1e3 * float(e['kernel_s']):.1f} ms of kernels; compiled "
            f"{1e3 * float(c['step_queued_s']):.1f} ms for {1e3 * float(c['kernel_s']):.1f} ms (second lease). Per "
            f"GPU kernel the host spends {per_kernel_e:.0f} µs eager (autograd and the modules' Python included) and "
            f"{per_kernel_c:.0f} µs compiled. On the first lease's host the eager run queued "
            f"{1e3 * float(first[(small, 'eager')]['step_queued_s']):.1f} ms: over the {ops} ops the same model "
            "dispatches when counted on a CPU (the stacks' counting, validation/count_layer_kernels.py --model-ops) "
            f"that is {1e6 * lease_host_s_per_op(DATA):.1f} µs per op on the first lease's host and "
            f"{1e6 * lease_host_s_per_op(DATA2):.1f} µs on the second's. Hosts of one kind of machine differ by that "
            f"much. The stacks' `host_us_per_kernel` is the faster, {1e6 * host_s_per_op():.1f} µs: two leases are "
            "combined as the GEMM tables combine them, since a slow timing comes from interference, not from the "
            "work. It was the first lease's 20.3 µs until the second lease was read (13.4 µs before either: the same "
            "dispatch timed on a CPU, without the CUDA driver). The larger runs are GPU-bound.",
            f"- **torch.compile launched {ke - kc:.1f} fewer kernels per layer here ({ke:.1f} -> {kc:.1f}, the "
            "embedding, head and loss included)**: Inductor fuses RoPE's and SwiGLU's elementwise ops and the "
            "strided copies around them; the stacks' `compiled_kernels_per_layer` (12 forward, 21 backward) is an "
            "estimate this trace does not split by layer."] + _gap_finding() + [""]


def _gap_finding() -> list[str]:
    """Eager time beyond the kernels on the GPU-bound runs, against parasim's kernel model and compiled credit."""
    first = {(r["run_id"], r["mode"]): r for r in _read("layers.csv")}
    rows = {(r["run_id"], r["mode"]): r for r in _read("layers.csv", DATA2)}
    big = [rid for rid, m in rows if m == "eager" and rid.startswith("L4-h4096")]

    def ms(vals):
        return ", ".join(f"{1e3 * v:.1f}" for v in vals)

    def pct(vals):
        return ", ".join(f"{100 * v:+.1f} %" for v in vals)

    kern = [predicted_fwd_bwd_s(rid, compiled=False)[0] / float(rows[(rid, "eager")]["kernel_s"]) - 1 for rid in big]
    gap_e = [float(rows[(r, "eager")]["step_queued_s"]) - float(rows[(r, "eager")]["kernel_s"]) for r in big]
    gap_old = [float(first[(r, "eager")]["step_queued_s"]) - float(first[(r, "eager")]["kernel_s"]) for r in big]
    both = [r for r in big if (r, "compiled") in rows]  # the second lease's stage ran out before the last one
    comp = [predicted_fwd_bwd_s(r, compiled=True)[0] / predicted_fwd_bwd_s(r, compiled=False)[0] - 1 for r in both]
    meas = [float(rows[(r, "compiled")]["kernel_s"]) / float(rows[(r, "eager")]["kernel_s"]) - 1 for r in both]
    sums = [r for r in _read("kernel_sum.csv", DATA2) if r["activities"] == "cuda"]
    missed = [1 - float(r["events_sum_s"]) / (float(r["trace_kernel_s"]) + float(r["trace_memset_s"])) for r in sums]
    busy = [float(r["trace_busy_s"]) / float(r["wall_s"]) for r in sums]
    titan = [predicted_fwd_bwd_s(rid, compiled=False, elementwise="eager")[0]
             / float(rows[(rid, "eager")]["kernel_s"]) - 1 for rid in big]
    return [f"- **There is no eager gap: the profiler's sum missed kernels.** The first lease's eager layers queued "
            f"{ms(gap_old)} ms more than their kernels, which the first version of this page could not place. "
            "torch 2.11's `prof.events()`, which summed them, gives no device time to whole kernel families that "
            "the same run's Chrome trace holds (the non-vectorised elementwise kernels of RoPE's and SwiGLU's "
            "products, sums and negation on strided views, silu and its backward on the gate half of the gate/up "
            f"output, strided copies): {', '.join(f'{100 * v:.1f} %' for v in missed)} of the kernel time of "
            "three full harness steps "
            f"(kernel_sum.csv), whose GPU was busy {', '.join(f'{100 * v:.1f} %' for v in busy)} of their wall time. "
            f"Read from the trace, the eager layers queue {ms(gap_e)} ms beyond their kernels.",
            f"- **parasim's eager forward + backward against these kernels: {pct(kern)}** with the harness's own op "
            f"list (packed: one gate/up GEMM whose halves silu and the product read as strided views, rotate_half "
            f"RoPE on views of one QKV GEMM) and the strided-operand and row-reduction tables ({pct(titan)} with "
            f"torchtitan's op list; "
            "docs/compute.md, docs/validation-h100.md finding 10). parasim "
            f"credits compilation with {pct(comp)} of forward + backward time (fused elementwise kernels); the "
            f"measured kernel time changed by {pct(meas)} ({', '.join(r.split('-')[5] for r in both)}: the "
            "compiled s8192 row was not measured with the trace)."]


def _power_findings() -> list[str]:
    def drift(data, what):
        rows, out = _read("power_step.csv", data), []
        for rid in dict.fromkeys(r["run_id"] for r in rows if r["what"] == what):
            g = [r for r in rows if r["run_id"] == rid]
            cold = next(float(r["time_s"]) for r in g if r["phase"] == "cold")
            out += [float(r["time_s"]) / cold - 1 for r in g if r["phase"] in ("sustained", "profiled")]
        return out

    gemm = drift(DATA, "gemm") + drift(DATA2, "gemm")
    step = drift(DATA, "step") + drift(DATA2, "step")
    return [f"- **Training steps are steady-state measurements.** Back-to-back 8192³ GEMMs hold the board at its "
            f"700 W limit and run {100 * min(gemm):.0f}-{100 * max(gemm):.0f} % slower than the calibration's "
            "one-call timing of the same GEMM (two leases); the harness's training steps also run at the power "
            "limit (at higher clocks: they are not all GEMMs), but their time stays within "
            f"{100 * max(map(abs, step)):.1f} % of the harness protocol's 10-step median, back to back for 7-20 s "
            "and under the profiler alike. The step-time comparisons of docs/validation-h100.md therefore hold for "
            "long jobs on this GPU; the GEMM table's top end, timed one call at a time, is a burst rate that a job "
            "made only of large GEMMs would not hold.",
            "- **The profiler does not slow the steps.** Profiled steps take their unprofiled time, and the GPU is "
            "busy for all but 1-2 % of it (second lease, `kernel_sum.csv`): the power-limit explanation this page "
            "gave for a gap between unprofiled steps and profiled kernels is withdrawn with the gap (previous "
            "section).", ""]


if __name__ == "__main__":
    print("\n".join(section()))
