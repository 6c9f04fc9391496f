"""ResNet-50 under data parallelism: does throughput grow linearly with the GPU count, and where does it stop?

    python validation/resnet50_scaling.py            # rewrite docs/torch-models.md
    python validation/resnet50_scaling.py --check    # exit 1 if the doc is not what it would write

ResNet-50 (simulator/torchmodel/examples.py, He et al. 2016 Table 1) is traced on the meta device
(simulator/torchmodel/trace.py) and run with torch DDP (simulator/torchmodel/parallel.py) on the
dgx-a100-80g and dgx-h100 profiles: weak scaling from 1 to 64 GPUs at 256 images per GPU (the per-GPU
batch of NVIDIA's DGX A100 recipe) and at 32 (Goyal et al. 2017: 8192 images on 256 GPUs), the exposed
communication against the per-GPU batch at 64 GPUs, and against the scale-out bandwidth. Needs torch
(CPU is enough). Every number in the doc comes from this script; the prose around them is fixed text.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "torch-models.md"
HARDWARE = ("dgx-a100-80g", "dgx-h100")
GPUS = (1, 2, 4, 8, 16, 32, 64)
BATCHES = (8, 16, 32, 64, 128, 256)
NIC_GBIT = (400, 200, 100, 50, 25)
FRACTIONS = (0.02, 0.05, 0.10)
# NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md (commit 291f0d02,
# pytorch-21.03 NGC container), "Training performance: NVIDIA DGX A100 (8x A100 80GB)": img/s
NVIDIA_DGXA100 = {("AMP", 1): 2470, ("AMP", 8): 16621, ("TF32", 1): 938, ("TF32", 8): 7248}


def _tracers():
    from simulator.torchmodel import Tracer
    from simulator.torchmodel.examples import resnet50

    return (Tracer(resnet50(), (3, 224, 224), name="resnet50"),
            Tracer(resnet50(stride_in_1x1=False), (3, 224, 224), name="resnet50-v1.5"))


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f} %"


def _model_section(v1, v15) -> list[str]:
    a, b = v1(1), v15(1)
    return [
        "## The model: ResNet-50 as the paper describes it",
        "",
        "`simulator/torchmodel/examples.py` writes ResNet-50 in plain torch from He et al. 2016, Table 1 "
        "(bottleneck blocks [3, 4, 6, 3], widths 64-512, outputs 256-2048). Traced for one 224x224 image:",
        "",
        "| variant | parameters | published | multiply-adds per image | published |",
        "|---|---|---|---|---|",
        f"| paper (stride 2 in the first 1x1 conv) | {a.params:,} | 25,557,032 (torchvision) | "
        f"{a.forward_flops / 2:.4g} | 3.8e9 (Table 1) |",
        f"| v1.5 (stride 2 in the 3x3 conv) | {b.params:,} | 25,557,032 (torchvision) | "
        f"{b.forward_flops / 2:.4g} | 4.09e9 (torchvision model card) |",
        "",
        f"The backward runs {a.backward_flops / a.forward_flops:.3f}x the forward FLOPs (counted under "
        "`FlopCounterMode`, not assumed: the first convolution computes no input gradient). Gradients in "
        f"fp32: {a.params * 4 / 1e6:.1f} MB to all-reduce per step.",
        "",
    ]


def _scaling_table(tracer, hw, tt, batch) -> list[str]:
    from simulator.torchmodel import scaling_rows

    rows = scaling_rows(tracer, hw, tt, GPUS, batch_per_gpu=batch)
    out = ["| GPUs | nodes | step s | images/s | scaling efficiency | all-reduce ms | exposed comm ms | "
           "exposed share of step |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        r = row.result
        exposed = r.exposed_comm_s + r.contention_s + r.buffer_sync_s
        nodes = -(-r.gpus // hw.gpus_per_node)
        out.append(f"| {r.gpus} | {nodes} | {r.step_s:.4f} | {r.samples_per_s:,.0f} | {_pct(row.scaling_efficiency)} | "
                   f"{r.comm_s * 1e3:.2f} | {exposed * 1e3:.3f} | {_pct(r.exposed_fraction)} |")
    return out


def _weak_section(v1, hws, tt) -> list[str]:
    lines = ["## Weak scaling with DDP, 1 to 64 GPUs", "",
             "Fixed batch per GPU, global batch = GPUs x batch. Exposed comm = the all-reduce time the step "
             "waits for after the backward + the compute's slowdown under the hidden all-reduces (SM contention, "
             "the profile's `compute_slowdown_under_comm`) + DDP's broadcast of the BatchNorm buffers before "
             "each forward. Scaling efficiency = images/s on n GPUs / (n x images/s on one).", ""]
    for batch in (256, 32):
        for hw in hws:
            lines += [f"### {hw.name}, {batch} images per GPU", ""]
            lines += _scaling_table(v1, hw, tt, batch)
            lines.append("")
    return lines


def _batch_section(v1, hws, tt) -> list[str]:
    from simulator.torchmodel import batch_sweep, largest_batch_over, step

    lines = ["## Where it stops being linear: the batch per GPU", "",
             "At 64 GPUs (8 nodes) the all-reduce is the same ~102 MB whatever the batch; the backward that "
             "hides it shrinks with the batch per GPU. Step and exposed share (exposed comm / step) at 64 GPUs, "
             "scaling efficiency against one GPU at the same batch:", "",
             "| batch/GPU | " + " | ".join(f"{h.name} step ms | exposed share | scaling efficiency" for h in hws) + " |",
             "|---|" + "---|---|---|" * len(hws)]
    sweeps = [batch_sweep(v1, hw, tt, 64, BATCHES) for hw in hws]
    ones = [[step(v1(b), hw, tt, 1) for b in BATCHES] for hw in hws]
    for i, b in enumerate(BATCHES):
        cells = []
        for res, one in zip(sweeps, ones):
            r = res[i]
            cells.append(f"{r.step_s * 1e3:.2f} | {_pct(r.exposed_fraction)} | "
                         f"{_pct(r.samples_per_s / (64 * one[i].samples_per_s))}")
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    lines.append("")
    for hw, res in zip(hws, sweeps):
        for f in FRACTIONS:
            b = largest_batch_over(res, f)
            lines.append(f"- {hw.name}: the exposed communication is more than {_pct(f)} of the step at "
                         + (f"{b} images per GPU and below" if b else "none of these batches"))
    lines.append("")
    return lines


def _network_section(v1, hws, tt) -> list[str]:
    from simulator.torchmodel import step

    lines = ["## Where it stops being linear: the scale-out bandwidth", "",
             "64 GPUs, the profile with its NICs replaced by slower ones (Gb/s per NIC, one NIC per GPU as in "
             "both profiles); scaling efficiency against one GPU:", "",
             "| hardware | batch/GPU | " + " | ".join(f"{g} Gb/s" for g in NIC_GBIT) + " |",
             "|---|---|" + "---|" * len(NIC_GBIT)]
    for hw in hws:
        for batch in (256, 32):
            one = step(v1(batch), hw, tt, 1)
            cells = []
            for gbit in NIC_GBIT:
                slow = replace(hw, nic_bytes_per_s=gbit * 1e9 / 8)
                r = step(v1(batch), slow, tt, 64)
                cells.append(_pct(r.samples_per_s / (64 * one.samples_per_s)))
            lines.append(f"| {hw.name} | {batch} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _measured_section(v15, hws, tt) -> list[str]:
    from simulator.torchmodel import scaling_rows

    a100 = next(h for h in hws if h.name == "dgx-a100-80g")
    lines = ["## Against a measurement", "",
             "NVIDIA DeepLearningExamples, ResNet-50 v1.5 for PyTorch (README.md at commit 291f0d02, "
             "pytorch-21.03 container, DGX A100 80GB; configs.yml: 256 images per GPU, AMP fp16 with "
             "channels-last, or TF32), against parasim's v1.5 on dgx-a100-80g:", "",
             "| precision | GPUs | measured images/s | predicted images/s | predicted / measured | measured scaling | "
             "predicted scaling |", "|---|---|---|---|---|---|---|"]
    for label, dtype in (("AMP", "fp16"), ("TF32", "tf32")):
        rows = scaling_rows(v15, a100, replace(tt, compute_dtype=dtype), (1, 8), batch_per_gpu=256)
        for row in rows:
            g = row.result.gpus
            m = NVIDIA_DGXA100[(label, g)]
            lines.append(f"| {label} | {g} | {m:,} | {row.result.samples_per_s:,.0f} | "
                         f"{row.result.samples_per_s / m:.2f} | {_pct(m / (g * NVIDIA_DGXA100[(label, 1)]))} | "
                         f"{_pct(row.scaling_efficiency)} |")
    lines.append("")
    return lines


def _intro(tt) -> list[str]:
    return [
        "# Any torch model: ResNet-50 under data parallelism",
        "",
        "Generated by `python validation/resnet50_scaling.py` (its docstring: what and why); "
        "`tests/test_torchmodel.py` checks that it regenerates identically. Predictions, not measurements, "
        "except the last table.",
        "",
        "parasim's transformer path describes decoder transformers only. `simulator/torchmodel/` takes any "
        "`torch.nn.Module`: it traces one forward and backward on the meta device (shapes only, no arithmetic) "
        "and records, per top-level layer, the parameters, the FLOPs of every op (torch's `FlopCounterMode`, "
        "backward included), the bytes every op moves, the activations autograd saves "
        "(`saved_tensors_hooks`, storages counted once) and the layer's output (a pipeline stage boundary). "
        "Ops with FLOPs run at the profile's GEMM efficiency for their FLOPs, the others as memory-bound "
        "kernels (the transformer path's functions, `simulator/cost/compute.py`); DDP reduces the gradients in "
        "torch's buckets (1 MiB, then 25 MiB) as the backward fills them; FSDP and a 1F1B pipeline split of "
        "the layer list are there too. From the command line:",
        "",
        "```bash",
        "parasim torch-model simulator.torchmodel.examples:resnet50 --input 3,224,224 --batch 256 \\",
        "    --hardware dgx-a100-80g --gpus 1,2,4,8,16,32,64 [--mode ddp|fsdp|pipeline] [--format json]",
        "```",
        "",
        "Training setup of every table: torch autocast (bf16 GEMMs and activations, fp32 parameters, "
        "gradients and momentum), SGD with momentum, DDP defaults (`bucket_cap_mb` 25, "
        f"`broadcast_buffers=True`), eager PyTorch ({tt.host_s() * 1e6:.1f} us of host time per kernel: the `fsdp` "
        "stack preset).",
        "",
    ]


def _weak_findings(v1, hws, tt) -> list[str]:
    from simulator.torchmodel import step

    out = ["Reading these tables:", ""]
    worst = 1.0
    for hw in hws:
        r, s = step(v1(256), hw, tt, 64), step(v1(32), hw, tt, 64)
        worst = min(worst, r.samples_per_s / (64 * step(v1(256), hw, tt, 1).samples_per_s))
        shown = (s.exposed_comm_s + s.contention_s + s.buffer_sync_s) * 1e3
        out.append(f"- {hw.name}, 64 GPUs: the {r.comm_s * 1e3:.2f} ms of all-reduces in {r.buckets} buckets hide "
                   f"under a {r.backward_s * 1e3:.1f} ms backward at 256 images per GPU; what shows is the last "
                   f"bucket ({r.last_bucket_s * 1e3:.3f} ms: the first layers' gradients are ready only when the "
                   f"backward ends), the SM contention under the rest ({r.contention_s * 1e3:.3f} ms) and the "
                   f"buffer broadcast ({r.buffer_sync_s * 1e3:.3f} ms), {_pct(r.exposed_fraction)} of the step. At "
                   f"32 images per GPU the same {shown:.2f} ms is {_pct(s.exposed_fraction)} of a "
                   f"{s.step_s * 1e3:.1f} ms step.")
    out += ["- Inside a node the all-reduce runs over NVLink; at 16 GPUs (2 nodes) the hierarchical all-reduce "
            "costs no more than the 8-GPU NVLink ring, at 32 and 64 GPUs it crosses more nodes and grows, "
            "and the efficiency steps down.",
            f"- The linear-scaling claim holds in the model: with 256 images per GPU throughput stays at "
            f"{_pct(worst)} of linear or better up to 64 GPUs on both systems. Goyal et al. 2017 (arXiv 1706.02677, "
            "abstract: \"~90% scaling efficiency when moving from 8 to 256 GPUs\", \"minibatch size of 8192 on "
            "256 GPUs\") ran 32 images per GPU on P100s (Caffe2, Big Basin servers): a different system, so "
            "the 32-images tables are the comparable regime, not the same measurement.", ""]
    return out


def _batch_findings(v1, tt) -> list[str]:
    trace = v1(8)
    kernels = sum(o.kernels for o in trace.ops)
    return [f"The step shrinks more slowly than the batch below 32 images per GPU: the host issues {kernels} "
            f"kernels per step at {tt.host_s() * 1e6:.1f} us each ({kernels * tt.host_s() * 1e3:.1f} ms), a floor "
            "the GPU time approaches, so the exposed share grows more slowly there too. The H100 profile's "
            "GEMM efficiency table is measured and rolls off at small GEMMs much earlier than the A100's "
            "datasheet-derived one, which is why the H100 is predicted no faster than the A100 at small "
            "batches.", ""]


def _network_findings(v1, hws, tt) -> list[str]:
    from simulator.torchmodel import step

    worst256, worst32 = 1.0, 1.0
    for hw in hws:
        slow = replace(hw, nic_bytes_per_s=min(NIC_GBIT) * 1e9 / 8)
        for batch in (256, 32):
            eff = step(v1(batch), slow, tt, 64).samples_per_s / (64 * step(v1(batch), hw, tt, 1).samples_per_s)
            if batch == 256:
                worst256 = min(worst256, eff)
            else:
                worst32 = min(worst32, eff)
    return [f"The all-reduce's inter-node part scales with 1 / NIC bandwidth while the compute hiding it does "
            f"not: at 256 images per GPU {min(NIC_GBIT)} Gb/s per GPU still keeps 64 GPUs at {_pct(worst256)} "
            f"or better, at 32 images per GPU the same network leaves {_pct(worst32)}. Linear scaling needs the "
            "compute per GPU per step (batch x FLOPs per image / GPU speed) to be large against the gradient "
            "bytes / network bandwidth; a faster GPU needs a proportionally faster network for the same "
            "efficiency.", ""]


def _measured_findings(v15, hws, tt) -> list[str]:
    from simulator.torchmodel import step

    a100 = next(h for h in hws if h.name == "dgx-a100-80g")
    amp, tf32 = replace(tt, compute_dtype="fp16"), replace(tt, compute_dtype="tf32")
    r_amp = step(v15(256), a100, amp, 1).samples_per_s / NVIDIA_DGXA100[("AMP", 1)]
    r_tf32 = step(v15(256), a100, tf32, 1).samples_per_s / NVIDIA_DGXA100[("TF32", 1)]
    loss_s = 8 * 256 / NVIDIA_DGXA100[("AMP", 8)] - 256 / NVIDIA_DGXA100[("AMP", 1)]
    comm8 = step(v15(256), a100, amp, 8).comm_s
    tf32_scaling = NVIDIA_DGXA100[("TF32", 8)] / (8 * NVIDIA_DGXA100[("TF32", 1)])
    return [f"parasim is optimistic on one GPU ({r_amp:.2f}x with AMP, {r_tf32:.2f}x in TF32): convolutions are "
            "timed with the GEMM efficiency table, indexed by FLOPs per call only, so a 64-channel 3x3 "
            "convolution counts as efficient as a square GEMM of the same FLOPs; no convolution (cuDNN) table "
            "is measured yet. Compute predicted too fast overstates, if anything, the exposed share in the "
            f"tables above. The measured loss from 1 to 8 GPUs with AMP ({loss_s * 1e3:.1f} ms per step more on "
            f"8 GPUs) is {loss_s / comm8:.0f} times the whole all-reduce time parasim predicts inside a node "
            f"({comm8 * 1e3:.2f} ms), so communication does not explain it; the run read JPEGs through the "
            "PyTorch DataLoader (configs.yml at commit 097c7ff9: `data_backend: pytorch`, 16 workers per GPU), "
            "an input pipeline parasim does not model: a candidate cause, not an established one. In TF32 "
            f"(slower compute, the same communication) the measured scaling is {_pct(tf32_scaling)}.", "",
            "## What is not modelled", "",
            "- the input pipeline (JPEG decoding, augmentation, host-to-device copies);",
            "- convolution efficiency by shape (cuDNN algorithms, channels-last conversions): the GEMM table "
            "by FLOPs stands in for it;",
            "- the loss, AMP's gradient scaler and autocast's weight casts as kernels (their memory is counted: "
            "the cast weight copies saved for the backward);",
            "- allocator fragmentation, cuDNN workspaces and the CUDA context in the memory peak (a lower bound);",
            "- SM contention delaying the gradients' ready times (it is added to the step, not fed back into "
            "the bucket timeline).", ""]


def generate() -> str:
    """The whole of docs/torch-models.md."""
    from simulator.spec.hardware import load_hardware
    from simulator.torchmodel import TorchTraining

    v1, v15 = _tracers()
    hws = [load_hardware(h) for h in HARDWARE]
    tt = TorchTraining()
    parts = [*_intro(tt), *_model_section(v1, v15), *_weak_section(v1, hws, tt), *_weak_findings(v1, hws, tt),
             *_batch_section(v1, hws, tt), *_batch_findings(v1, tt), *_network_section(v1, hws, tt),
             *_network_findings(v1, hws, tt),
             *_measured_section(v15, hws, tt), *_measured_findings(v15, hws, tt)]
    return "\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/torch-models.md is out of date")
    args = ap.parse_args(argv)
    text = generate()
    if args.check:
        same = DOC.exists() and DOC.read_text() == text
        print("docs/torch-models.md is " + ("up to date" if same else "out of date"))
        return 0 if same else 1
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
