"""How fast is each GPU of a machine, the same kernel on every one at once? The per-GPU speed spread that a
synchronous job pays for: every step of data, tensor or pipeline parallelism waits for its slowest GPU, so a
job on n GPUs runs at about the slowest of n draws from the spread, not at the speed of the one GPU a profile
was calibrated on.

    python validation/gpu_spread.py --out spread.csv [--seconds 15]
    python validation/gpu_spread.py --out spread.csv --device cpu --tiny      # dry run (the tests run it)

Why it is measured: parasim's tables come from one lent GPU at a time, and three leases of an H100 timed the
same 8192^3 bf16 GEMM 6 % apart (docs/gpu-measurements.md), as large as the whole error budget of a one-GPU
prediction; the llm-foundry weak-scaling series grow 2-5 % more from 16 to 128 GPUs than parasim predicts
(docs/weak-scaling.md), which a slowest-of-n effect would produce. No cluster-level spread of A100 or H100
bf16 GEMM speed is published that parasim could cite, so the profiles' `[gpu] speed_cv` (cost/variability.py)
is 0 by default: this script measures it.

Protocol, per visible GPU (the GPU's UUID identifies it across leases, so rows from many leases pool into one
distribution of GPU speeds):
- one_call_tflops: the calibration's protocol (`parasim calibrate`): 5 warm-up calls, then 20 calls each timed
  alone between CUDA events, the median, on a GPU that was idle before.
- then every GPU runs back-to-back GEMMs at the same time, one host thread per GPU, for --seconds: per second
  the GEMMs completed, TFLOP/s, and the SM clock, power and temperature nvidia-smi reports for that GPU. All
  GPUs loaded at once is how a training job loads a node (shared power and cooling).
Each row is printed as it is measured; the CSV is written row by row, so a cut-short run keeps its rows.
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpu_owed import Bench  # noqa: E402
from gpu_power_step import one_call_s  # noqa: E402  (the calibration's one-call protocol, one place)

FIELDS = ["device", "uuid", "name", "phase", "second", "gemms", "tflops", "sm_clock_mhz", "power_w", "temperature_c"]


def smi(index: int | None) -> dict:
    """SM clock, power and temperature of GPU `index` from nvidia-smi; empty strings where it cannot answer
    (and for index None: the CPU)."""
    q = "clocks.sm,power.draw,temperature.gpu"
    if index is None:
        return {"sm_clock_mhz": "", "power_w": "", "temperature_c": ""}
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-i", str(index)],
                           capture_output=True, text=True, timeout=5)
        sm, pw, tc = (v.strip() for v in r.stdout.splitlines()[0].split(","))
        return {"sm_clock_mhz": sm, "power_w": pw, "temperature_c": tc}
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        return {"sm_clock_mhz": "", "power_w": "", "temperature_c": ""}


def _identity(torch, device: str) -> tuple[str, str]:
    """(UUID, name) of a CUDA device; ('cpu', processor) on the CPU."""
    if not device.startswith("cuda"):
        import platform
        return "cpu", platform.processor() or platform.machine()
    p = torch.cuda.get_device_properties(torch.device(device))
    return str(getattr(p, "uuid", "")), p.name


class Rows:
    """A CSV written and printed row by row from several threads."""

    def __init__(self, path: Path):
        self.f = open(path, "w", newline="")
        self.w = csv.DictWriter(self.f, FIELDS)
        self.w.writeheader()
        self.lock = threading.Lock()

    def add(self, **r):
        with self.lock:
            self.w.writerow(r)
            self.f.flush()
            print(r, flush=True)

    def close(self):
        self.f.close()


def measure(torch, devices: list[str], out: Path, *, n: int, seconds: float) -> int:
    """Run the protocol of the module docstring on `devices`; returns the number of rows written."""
    rows = Rows(out)
    flops = 2.0 * n ** 3
    state = []
    for index, dev in enumerate(devices):
        cuda = dev.startswith("cuda")
        dt = torch.bfloat16 if cuda else torch.float32
        a = torch.randn(n, n, device=dev, dtype=dt)
        c = torch.empty(n, n, device=dev, dtype=dt)
        sync = (lambda d=dev: torch.cuda.synchronize(torch.device(d))) if cuda else (lambda: None)
        uuid, name = _identity(torch, dev)
        state.append((index, dev, cuda, a, c, sync, uuid, name))
    for index, dev, cuda, a, c, sync, uuid, name in state:  # one at a time: the calibration's protocol
        if cuda:
            torch.cuda.set_device(torch.device(dev))
        t = one_call_s(Bench(torch, dev), lambda a=a, c=c: torch.matmul(a, a, out=c), 5, 20)
        rows.add(device=dev, uuid=uuid, name=name, phase="one_call", second="", gemms=20, tflops=flops / t / 1e12,
                 **smi(index if cuda else None))
    count = [0]

    def loaded(index, dev, cuda, a, c, sync, uuid, name):
        if cuda:
            torch.cuda.set_device(torch.device(dev))
        t_end = time.perf_counter() + seconds
        sec = 0
        while time.perf_counter() < t_end:
            k, w0 = 0, time.perf_counter()
            while time.perf_counter() - w0 < 1.0:
                for _ in range(8):
                    torch.matmul(a, a, out=c)
                sync()
                k += 8
            dt_s = time.perf_counter() - w0
            rows.add(device=dev, uuid=uuid, name=name, phase="all_loaded", second=sec, gemms=k,
                     tflops=flops * k / dt_s / 1e12, **smi(index if cuda else None))
            count[0] += 1
            sec += 1

    threads = [threading.Thread(target=loaded, args=s) for s in state]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rows.close()
    return len(state) + count[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="CSV file to write")
    ap.add_argument("--device", default="auto", help="auto (every visible GPU, else the CPU) or cpu")
    ap.add_argument("--seconds", type=float, default=15.0, help="length of the all-GPUs-loaded phase")
    ap.add_argument("--tiny", action="store_true", help="a 256^3 GEMM for a dry run")
    a = ap.parse_args(argv)
    if a.device not in ("auto", "cpu"):
        raise SystemExit(f"gpu_spread.py: --device {a.device!r}: choose auto or cpu")
    if not a.seconds >= 0.0:
        raise SystemExit(f"gpu_spread.py: --seconds {a.seconds!r} must be a number >= 0")
    import torch

    cuda = a.device == "auto" and torch.cuda.is_available()
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if cuda else ["cpu"]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    n = 256 if a.tiny else 8192
    print(f"{len(devices)} device(s): {', '.join(devices)}; {n}^3 GEMM", flush=True)
    return 0 if measure(torch, devices, Path(a.out), n=n, seconds=a.seconds) else 1


if __name__ == "__main__":
    raise SystemExit(main())
