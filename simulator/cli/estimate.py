"""`parasim estimate`: memory + step time + throughput of one layout."""
import json

import click

from ..spec.layout import recompute_label
from .common import GPU_SPEED_CV_HELP, scenario_from_options, scenario_options, split_text
from .flagnames import flag_names
from .run_options import run_lines, run_options, run_spec
from .inference import inference_columns, inference_dict, inference_options, inference_setup, inference_table
from .step_outputs import check_step_outputs, check_traceable, write_step_outputs


def _table(d: dict) -> str:
    """The text form of an estimate's (tidied) `to_dict()`."""
    from ..units import GiB

    t, th, lay = d["time"], d["throughput"], d["layout"]
    step = t["step_s"]
    pct = lambda x: f"{100 * x / step:5.1f} %"  # noqa: E731
    rc = (lay["recompute"], lay["recompute_layers"], d["stack"]["recompute_modules"], lay["recompute_group"])
    lines = [
        f"{d['model']['name']} ({d['model']['params'] / 1e9:.2f} B params"
        + (f" + {d['model']['mtp_params'] / 1e9:.2f} B MTP" if d['model'].get('mtp_params') else "")
        + f") on {lay['num_gpus']} x {d['hardware']}: "
        f"{lay['label']}, zero={lay['zero']}, "
        f"recompute={recompute_label(*rc)}, "
        f"schedule={lay['schedule']}, "
        f"micro-batch={lay['micro_batch_size']} x {lay['num_microbatches']} microbatches"
        + split_text(lay),
        f"step time           {step:10.4f} s",
        f"  compute           {t['compute_s']:10.4f} s  {pct(t['compute_s'])}  (optimizer {t['optimizer_s']:.4f} s, "
        f"slowed by overlapped comm {t['contention_s']:.4f} s at {100 * t['comm_slowdown']:.1f} %)",
        f"  exposed comm      {t['exposed_comm_s']:10.4f} s  {pct(t['exposed_comm_s'])}",
    ]
    if t.get("host_bound_s"):  # (part of the compute line: layer passes at the host's pace, not the GPU's)
        lines.insert(-1, f"    host-bound      {t['host_bound_s']:10.4f} s  {pct(t['host_bound_s'])}  (the host issues "
                         f"kernels slower than the GPU runs them, at {d['stack']['host_us_per_kernel']:.1f} us per op"
                         + (f", {d['stack']['moe_host_us_per_kernel']:.1f} us per MoE-layer op"
                            if d["stack"].get("moe_host_us_per_kernel") else "")
                         + ": a property of your host and torch, docs/stacks.md)")
    if t.get("gpu_speed_cv"):  # (the compute line's own time, at the slowest GPU's pace)
        lines.insert(-1, f"    at the slowest of {lay['num_gpus']} GPUs: x{t['slowest_gpu_factor']:.4f} "
                         f"(per-GPU speed spread {100 * t['gpu_speed_cv']:.1f} %, cost/variability.py)")
    hidden = t.get("hidden_comm_by_group_s", {})
    for k, v in t["exposed_comm_by_group_s"].items():
        h = hidden.get(k, 0.0)
        if v > 0 or h > 0:
            lines.append(f"    {k:<15} {v:10.4f} s  {pct(v)}" + (f"  (overlap hid {h:.4f} s more)" if h > 0 else ""))
    lines += [
        f"  pipeline bubble   {t['bubble_s']:10.4f} s  {pct(t['bubble_s'])}  "
        f"(busiest rank waiting on other stages; {t['pipeline']})",
        f"  idle fraction     {t['bubble_fraction']:10.3f}    1 - busy / (ranks x makespan): every pipeline rank, "
        "p2p waits included",
        f"throughput          {th['tokens_per_s']:,.0f} tokens/s",
        f"TFLOP/s per GPU     {th['model_tflops_per_gpu']:.1f} model, {th['hardware_tflops_per_gpu']:.1f} hardware",
        f"MFU / HFU           {100 * th['mfu']:.1f} % / {100 * th['hfu']:.1f} %  ({th['mfu_formula']})",
        f"peak memory         {d['memory']['peak_bytes'] / GiB:.2f} GiB per GPU "
        f"({'fits' if d['feasible'] else 'does NOT fit: ' + d['reason']})",
        _stack_line(d["stack"]),
    ]
    for role, src in d["efficiency_sources"].items():
        lines.append(f"  {role:<17} [efficiency.{src['table']}]: {_short(src['source'])}")
    head, *groups = d["validated_error"]["text"]
    lines += [f"validated error     {head}"] + [f"  {g}" for g in groups]
    lines += [f"not modelled        {c}" for c in d.get("not_modelled", ())]
    if "run" in d:
        lines += run_lines(d["run"])
    return "\n".join(lines)


def _stack_line(st: dict) -> str:
    kf, kb = st["kernels_per_layer"]
    return (f"stack               {st['name']} ({'compiled' if st['compiled'] else 'eager'}, "
            f"{st['elementwise']} elementwise ops; attention "
            f"{st['attention_kernel']}" + (" (unpadded rows: bert_padding)" if st.get("attention_padding") == "unpad"
                                           else "") + f", optimizer {st['optimizer_impl']}, gradients {st['grad_buffer']}, accumulated "
            f"{'by autograd' if st['grad_accumulation'] == 'autograd' else 'in the weight-gradient GEMM'}, "
            f"loss {st['cross_entropy']}, "
            + (f"{st['train_metric_losses']} training-metric losses per micro-batch, "
               if st.get("train_metric_losses") else "")
            + (f"overlaps {', '.join(st['overlaps'])}, " if st.get("overlaps") else "")
            + ("MoE tokens dispatched by node (flex), " if st.get("moe_dispatcher") == "flex" else "")
            + (f"CUDA graphs {'+'.join(st['cuda_graphs'])}, " if st.get("cuda_graphs") else "")
            + f"{kf}/{kb} kernels per layer"
            + (f", {'/'.join(map(str, st['moe_layer_kernels']))} per MoE layer" if st.get("moe_layer_kernels") else "")
            + f" at {st['host_us_per_kernel']:.1f} us"
            + (f", the MoE layer's own at {st['moe_host_us_per_kernel']:.1f} us" if st.get("moe_host_us_per_kernel")
               else "") + "); efficiencies from:")


def _short(source: str, width: int = 110) -> str:
    """A source text cut at a word boundary (the JSON output has it whole)."""
    return source if len(source) <= width else source[:width].rsplit(" ", 1)[0] + " ..."


@click.command("estimate")
@scenario_options
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--pipeline", type=click.Choice(["replay", "analytic"]), default="replay", show_default=True,
              help="replay the schedule on the engine, or use the closed-form bubble (faster, approximate "
                   "for uneven stages)")
@click.option("--tp-overlap", type=float, default=None,
              help="fraction of TP communication hidden under GEMMs, overriding the stack's rule (default: "
                   "--tp-comm-overlap's chunked pipeline when on, else none)")
@click.option("--comm-slowdown", type=float, default=None,
              help="overlapped communication slows the compute it hides under by this fraction (SM contention; "
                   "default: the hardware profile's, 0.189 measured by Lee et al. 2025 unless it has its own)")
@click.option("--gpu-speed-cv", type=float, default=None, help=GPU_SPEED_CV_HELP)
@click.option("--grad-overlap/--no-grad-overlap", default=True, show_default=True,
              help="overlap the DP gradient reduction with the last microbatch's backward")
@click.option("--param-gather-overlap/--no-param-gather-overlap", default=False, show_default=True,
              help="overlap the ZeRO-1/2 parameter all-gather with the next step's forward")
@click.option("--trace", type=click.Path(dir_okay=False), default=None,
              help="write the estimated step as a Chrome/Perfetto trace (.json): per pipeline rank its F/B/W ops "
                   "and beside them the communication by group and collective, exposed and hidden")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="write the estimated step as a Gantt chart (.png, .svg or .pdf)")
@inference_options
@run_options
def estimate(fmt, pipeline, tp_overlap, comm_slowdown, gpu_speed_cv, grad_overlap, param_gather_overlap, trace, plot,
             inference, prompt_tokens, output_tokens, batch, eager_decode, **kwargs):
    """Step time, throughput, MFU/HFU and memory of one layout, with a breakdown that adds up:
    step = compute + exposed communication (by group) + pipeline bubble.

    \b
    The pipeline part replays the schedule's op order (--pipeline analytic: closed forms).
    Data-parallel modes (--dp-mode): ddp = DistributedDataParallel, gradients all-reduced in buckets,
    overlapped with the last backward; dataparallel = single-process torch DataParallel, parameters
    broadcast, inputs scattered and gradients reduced through one master GPU, nothing overlapped;
    async = asynchronous data parallel, the step never waits for the gradient sync.

    \b
    Examples:
      parasim estimate scenarios/llama3-70b-512xh100.toml
      parasim estimate --model llama3-8b --hardware dgx-h100 --gpus 8 --seq 8192 --global-batch 64 --zero 3
      parasim estimate scenarios/mixtral-8x7b-64xh100.toml --format json
      parasim estimate --model llama3-8b --hardware dgx-h100 --gpus 8 --tp 8 --seq 4096 --inference --batch 64
      parasim estimate scenarios/llama3-70b-512xh100.toml --tokens 15e12 --usd-per-gpu-hour 2.5
      parasim estimate scenarios/llama3-70b-512xh100.toml --trace step.json --plot step.png

    \b
    --tokens N: a training run on N tokens with this layout (docs/planning.md): steps, wall-clock days with
    checkpoint writes and failures, GPU-hours, cost and energy, each assumption with its source (JSON "run").

    \b
    --inference: prefill and decode of one model replica (docs/inference.md): time to first token, time
    per output token, output tokens/s per GPU and the largest batch the KV cache allows. --batch is the
    sequences one replica serves (default: --global-batch / dp; without --global-batch the training batch is
    --batch x dp), --micro-batch the sequences per prefill pass; the prompt defaults to --seq. JSON: the
    training estimate as without it plus an "inference" object; the table shows the inference breakdown only.
    """
    from ..estimate import EstimateOptions, estimate_scenario
    from ..run_plan import plan_for_estimate
    from ..spec.run import RUN_KEYS
    from ..report.tables import tidy_dict, tidy_frame

    run_flags = {k: kwargs.pop(k) for k in RUN_KEYS}
    check_step_outputs(trace, plot)
    sc = scenario_from_options(kwargs, batch_per_replica=batch if inference else None)
    if trace or plot:
        check_traceable(sc, pipeline, inference)
    spec = run_spec(sc.run, run_flags)
    with flag_names({"tp_overlap": "--tp-overlap", "comm_slowdown": "--comm-slowdown",
                     "gpu_speed_cv": "--gpu-speed-cv"}):  # checked with --inference too
        opts = EstimateOptions(pipeline=pipeline, tp_overlap=tp_overlap, comm_slowdown=comm_slowdown,
                               gpu_speed_cv=gpu_speed_cv, grad_reduce_overlap=grad_overlap,
                               param_gather_overlap=param_gather_overlap)
    setup = inference_setup(sc, inference, prompt_tokens=prompt_tokens, output_tokens=output_tokens, batch=batch,
                            eager_decode=eager_decode)
    if setup is not None and fmt == "table":  # the table shows the inference breakdown only
        click.echo(inference_table(sc, setup))
        return
    e = estimate_scenario(sc, options=opts, keep_stage_times=bool(trace or plot))
    plan = plan_for_estimate(e, spec).to_dict() if spec else None
    # as printed: integer bytes, rounding residues (a bubble of 7.8e-16 s with pp = 1) as 0
    if fmt == "csv":
        import pandas as pd

        row = dict(e.row, **(inference_columns(sc, setup) if setup is not None else {}))
        row.update({f"run_{k}": plan[k] for k in ("steps", "days", "gpu_hours", "usd", "energy_mwh")} if plan else {})
        click.echo(tidy_frame(pd.DataFrame([row])).to_csv(index=False), nl=False)
        return write_step_outputs(e, trace=trace, plot=plot, to_stderr=True)
    d = e.to_dict()
    d = tidy_dict(d, scale=d["time"]["step_s"])
    if plan:
        d["run"] = plan
    if setup is not None:
        d["inference"] = inference_dict(sc, setup)
    click.echo(json.dumps(d, indent=2, default=float) if fmt == "json" else _table(d))
    write_step_outputs(e, trace=trace, plot=plot, to_stderr=fmt == "json")


COMMANDS = [estimate]
