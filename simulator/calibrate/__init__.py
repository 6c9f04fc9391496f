"""Calibration: torch microbenchmarks and nccl-tests logs -> fitted efficiency tables -> a measured
hardware profile (`hardware_profiles/measured/<name>.toml`) with provenance and fit residuals.

Modules: microbench (timing protocol, shapes, GEMM/attention/memory benchmarks), collectives
(torch.distributed collective benchmarks), nccl_tests (parser + efficiency points), fit
(piecewise-linear efficiency curves, residuals), profile_writer (TOML), run (orchestration).
torch is imported lazily: everything except the benchmarks works without it.
"""
