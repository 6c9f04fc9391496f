"""`parasim torch-model`: step time, throughput, scaling efficiency and memory of any torch model (not only
transformers) under data parallelism (DDP, FSDP) or a 1F1B pipeline, over GPU counts."""
from __future__ import annotations

import json

import click

from ..errors import InputError
from ..spec.training import OPTIMIZERS
from .lists import MAX_GPUS, comma_ints, comma_names

MODES = ("ddp", "fsdp", "pipeline")


def _model_dict(trace, trace_note: str) -> dict:
    per = trace.batch
    return {"name": trace.model_name, "params": trace.params, "input_shape": list(trace.input_shape),
            "forward_flops_per_sample": trace.forward_flops / per, "backward_flops_per_sample": trace.backward_flops / per,
            "traced_on": trace_note,
            "layers": [{"name": l.name, "params": l.params, "forward_flops_per_sample": l.forward_flops / per,
                        "backward_flops_per_sample": l.backward_flops / per} for l in trace.layers]}


def _pipeline_rows(tracer, hw, tt, gpus, pp, microbatches, batch):
    from ..torchmodel import pipeline_step

    if pp is None or microbatches is None:
        raise InputError("--mode pipeline needs --pp and --microbatches (--batch is the micro-batch size)")
    if pp < 1:
        raise InputError(f"--pp must be >= 1, got {pp}")
    rows = []
    for g in gpus:
        if g % pp:
            raise InputError(f"--gpus {g} is not divisible by --pp {pp}")
        r = pipeline_step(tracer(batch), hw, tt, pp=pp, dp=g // pp, microbatches=microbatches)
        rows.append({"gpus": g, "pp": pp, "dp": r.dp, "micro_batch": r.micro_batch, "microbatches": microbatches,
                     "global_batch": r.global_batch, "stages": [list(s) for s in r.stages], "step_s": r.step_s,
                     "makespan_s": r.makespan_s, "bubble_fraction": r.bubble_fraction, "dp_exposed_s": r.dp_exposed_s,
                     "optimizer_s": r.optimizer_s, "samples_per_s": r.samples_per_s,
                     "memory": {"peak_bytes": r.memory.peak_bytes, "stage": r.memory_stage,
                                "feasible": r.memory.feasible, "reason": r.memory.reason}})
    return rows


def _table(out: dict) -> str:
    m = out["model"]
    lines = [f"{m['name']}: {m['params'] / 1e6:.2f} M parameters, {m['forward_flops_per_sample'] / 1e9:.3f} GFLOP "
             f"forward per sample (input {'x'.join(map(str, m['input_shape']))}); {out['hardware']}, "
             f"{out['mode']}, {out['training']['compute_dtype']} compute"]
    if out["mode"] == "pipeline":
        lines.append(f"{'gpus':>5} {'dp':>4} {'global':>7} {'step_ms':>9} {'bubble':>7} {'samples/s':>11} {'peak_GiB':>9}")
        for r in out["rows"]:
            lines.append(f"{r['gpus']:>5} {r['dp']:>4} {r['global_batch']:>7} {r['step_s'] * 1e3:>9.2f} "
                         f"{r['bubble_fraction']:>7.3f} {r['samples_per_s']:>11.0f} {r['memory']['peak_bytes'] / 2**30:>9.1f}")
        lines.append("stages: " + " | ".join(",".join(s) for s in out["rows"][0]["stages"]))
        return "\n".join(lines)
    lines.append(f"{'gpus':>5} {'batch':>6} {'global':>7} {'step_ms':>9} {'fwd_ms':>8} {'bwd_ms':>8} {'comm_ms':>8} "
                 f"{'exposed_ms':>10} {'samples/s':>11} {'scaling':>8} {'peak_GiB':>9} fits")
    for r in out["rows"]:
        lines.append(f"{r['gpus']:>5} {r['batch_per_gpu']:>6} {r['global_batch']:>7} {r['step_s'] * 1e3:>9.2f} "
                     f"{r['forward_s'] * 1e3:>8.2f} {r['backward_s'] * 1e3:>8.2f} {r['comm_s'] * 1e3:>8.2f} "
                     f"{(r['exposed_comm_s'] + r['contention_s'] + r['buffer_sync_s']) * 1e3:>10.3f} "
                     f"{r['samples_per_s']:>11.0f} {r['scaling_efficiency']:>8.3f} "
                     f"{r['memory']['peak_bytes'] / 2**30:>9.1f} {'yes' if r['memory']['feasible'] else 'no'}")
    lines.append("exposed_ms = exposed communication + SM contention under the hidden part + DDP buffer broadcast")
    return "\n".join(lines)


@click.command("torch-model")
@click.argument("model")
@click.option("--input", "input_shape", required=True, help="one sample's shape, without the batch, e.g. 3,224,224")
@click.option("--batch", type=int, default=None, help="batch per GPU (weak scaling; the micro-batch with --mode pipeline)")
@click.option("--global-batch", type=int, default=None, help="global batch split over the GPUs (strong scaling)")
@click.option("--hardware", required=True, help="hardware preset name or profile TOML path")
@click.option("--gpus", default="1", show_default=True, help="GPU counts, comma-separated, e.g. 1,2,4,8,16,32,64")
@click.option("--mode", type=click.Choice(MODES), default="ddp", show_default=True)
@click.option("--pp", type=int, default=None, help="pipeline stages (--mode pipeline)")
@click.option("--microbatches", type=int, default=None, help="micro-batches per step (--mode pipeline)")
@click.option("--layers", default=None, help="submodule names to treat as the layers, comma-separated "
                                             "(default: the model's children)")
@click.option("--device", type=click.Choice(["meta", "cpu", "auto"]), default="auto", show_default=True,
              help="where to trace: meta (shapes only, fast), cpu (runs the model), auto (meta, else cpu)")
@click.option("--input-dtype", type=click.Choice(["float32", "int64"]), default="float32", show_default=True,
              help="int64 for token ids")
@click.option("--compute-dtype", type=click.Choice(["bf16", "fp16", "tf32", "fp32"]), default="bf16",
              show_default=True, help="autocast dtype of the GEMMs and activations")
@click.option("--param-dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option("--optimizer", type=click.Choice(list(OPTIMIZERS)), default="sgd-momentum", show_default=True)
@click.option("--bucket-mb", type=float, default=25.0, show_default=True, help="DDP bucket_cap_mb (MiB)")
@click.option("--fsdp-prefetch", type=int, default=1, show_default=True, help="FSDP units gathered ahead")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def torch_model_cmd(model, input_shape, batch, global_batch, hardware, gpus, mode, pp, microbatches, layers, device,
                    input_dtype, compute_dtype, param_dtype, optimizer, bucket_mb, fsdp_prefetch, fmt):
    """Trace a torch model (MODEL = MODULE:FACTORY, a .py file or module and a callable returning an
    nn.Module) and predict its training step on GPUs of a hardware profile.

    \b
    Examples:
      parasim torch-model simulator.torchmodel.examples:resnet50 --input 3,224,224 --batch 256 \\
          --hardware dgx-a100-80g --gpus 1,2,4,8,16,32,64
      parasim torch-model mymodel.py:build --input 128 --global-batch 4096 --hardware dgx-h100 \\
          --gpus 8,16 --mode fsdp --format json
    """
    from ..spec.hardware import load_hardware
    from ..torchmodel import Tracer, TorchTraining, build_module, require_torch, scaling_rows

    require_torch()
    shape = comma_ints("--input", input_shape, example="3,224,224")
    counts = comma_ints("--gpus", gpus, most=MAX_GPUS, example="1,2,4,8")
    if (batch is None) == (global_batch is None):
        raise InputError("give one of --batch (per GPU) or --global-batch")
    for flag, v in (("--batch", batch), ("--global-batch", global_batch)):
        if v is not None and v < 1:
            raise InputError(f"{flag} must be >= 1, got {v}")
    hw = load_hardware(hardware)
    tt = TorchTraining(compute_dtype=compute_dtype, param_dtype=param_dtype, optimizer=optimizer, bucket_mb=bucket_mb,
                       fsdp_prefetch=fsdp_prefetch)
    names = comma_names("--layers", layers, example="layer1,layer2") if layers else None
    tracer = Tracer(build_module(model), shape, layers=names, device=device, input_dtype=input_dtype,
                    name=model.rpartition(":")[2])
    if mode == "pipeline":
        if global_batch is not None:
            raise InputError("--mode pipeline takes --batch (the micro-batch size), not --global-batch")
        rows = _pipeline_rows(tracer, hw, tt, counts, pp, microbatches, batch)
        first = tracer(batch)
    else:
        rows = [r.as_dict() for r in scaling_rows(tracer, hw, tt, counts, batch_per_gpu=batch,
                                                  global_batch=global_batch, mode=mode)]
        first = tracer(batch if batch is not None else global_batch)
    out = {"model": _model_dict(first, first.device), "hardware": hw.name, "mode": mode,
           "training": {"compute_dtype": compute_dtype, "param_dtype": param_dtype, "optimizer": optimizer,
                        "bucket_mb": bucket_mb}, "rows": rows}
    click.echo(json.dumps(out, indent=2) if fmt == "json" else _table(out))


COMMANDS = (torch_model_cmd,)
