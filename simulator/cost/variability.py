"""The slowest of n GPUs: what a spread of per-GPU speeds costs a synchronous step.

GPUs of one model and SKU do not run at one speed: manufacturing variation and power management make
some slower than others (Sinha et al., "Not All GPUs Are Created Equal", SC22, arXiv 2208.11035: 8 %
average performance variation on V100- and MI60-based clusters, outliers up to 1.5x slower than the
median; the lent H100s measured in one state ran the same bf16 GEMMs within 0.3-1.7 % of each other,
docs/weak-scaling.md). A training step synchronises every GPU (data-parallel reductions, tensor-parallel
collectives, the pipeline's flush), so it runs at the pace of its slowest GPU. With per-GPU speed a
normal draw of relative standard deviation σ around the GPU a profile was calibrated on (taken as the
median one), the expected compute time of a step on n GPUs is

    t_n = t_1 · (1 + σ · E[max of n standard normals])

the expected largest order statistic, E[max_n] = ∫ x · n · φ(x) · Φ(x)^(n−1) dx (David & Nagaraja,
"Order Statistics", 3rd ed., 2003, §3; 0.564 for n = 2, 1.42 for 8, 2.59 for 128, 3.04 for 512). σ is
the profile's `[gpu] speed_cv` (default 0: no cluster-wide spread of these GPUs is published that parasim
could cite; measure your own with validation/gpu_spread.py) or `--gpu-speed-cv` (estimate, sweep, plan).
Communication is not slowed: only the compute waits for the slowest GPU (the training step's F, B, W,
FSDP2's compute-stream copies and the optimizer: kernel.py, kernel_comm.py; the inference estimate does not
apply it).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=None)
def _expected_max(n: int) -> float:
    if n <= 1:
        return 0.0
    x = np.linspace(-9.0, 9.0, 9001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * np.array([math.erfc(-v / math.sqrt(2.0)) for v in x])
    f = x * n * phi * cdf ** (n - 1)
    return float(np.sum(0.5 * (f[1:] + f[:-1]) * np.diff(x)))  # the trapezoid rule on [−9, 9]


def expected_max_standard_normal(n) -> np.ndarray:
    """E[max of n independent standard normal draws] for each n of an array (0 for n ≤ 1)."""
    n = np.asarray(n)
    values, inv = np.unique(n.astype(np.int64).ravel(), return_inverse=True)
    return np.array([_expected_max(int(v)) for v in values])[inv].reshape(n.shape)


def slowest_gpu_factor(speed_cv: float, num_gpus) -> np.ndarray:
    """1 + σ · E[max of n standard normals]: how much longer a step's compute takes on n synchronised GPUs
    whose speeds spread with relative standard deviation σ = `speed_cv` (the module docstring)."""
    n = np.asarray(num_gpus)
    if speed_cv == 0.0:
        return np.ones(n.shape)
    return 1.0 + float(speed_cv) * expected_max_standard_normal(n)
