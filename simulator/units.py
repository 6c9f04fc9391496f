"""Unit constants and conversions used only at the edges (loaders, CLI, reports).

Inside the simulator everything is SI: bytes, seconds, FLOPs, bytes per second.
Vendor bandwidths and capacities are decimal (1 GB = 1e9 B); torch reports GiB (2**30 B).
"""
KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TFLOPS = 1e12
US = 1e-6
MS = 1e-3

# Bytes per element of each dtype name used in specs.
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp64": 8}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of `dtype` ('fp32', 'bf16', 'fp16', 'fp8', ...)."""
    from .errors import InputError

    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise InputError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}") from None
