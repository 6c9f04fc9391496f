"""Comma-separated flag values ("8,16,64", "1f1b,gpipe"): the one parser of every list flag, so that an empty item,
a stray comma or a count out of range is one error line naming the flag and what was given."""
from __future__ import annotations

from ..errors import InputError
from ..spec.rules import BOUNDS

MAX_GPUS = BOUNDS["num_gpus"][0]  # the largest GPU count any command takes


def comma_ints(flag: str, text, *, least: int = 1, most: int | None = None, example: str = "8,16,64") -> list[int]:
    """'8,16,64' -> [8, 16, 64]: whole numbers in [least, most], no empty item; InputError naming `flag` otherwise."""
    items = [x.strip() for x in str(text).split(",")]
    try:
        out = [int(x) for x in items]  # (an empty item is no number: int('') fails)
    except ValueError:
        out = []
    hi = f" and <= {most}" if most is not None else ""
    if not out or any(n < least or (most is not None and n > most) for n in out):
        raise InputError(f"{flag} must be comma-separated whole numbers >= {least}{hi} like {example}, got {text!r}")
    return out


def comma_names(flag: str, text, *, example: str) -> list[str]:
    """'a,b' -> ['a', 'b'], stripped, no empty item; InputError naming `flag` otherwise."""
    out = [x.strip() for x in str(text).split(",")]
    if not all(out):
        raise InputError(f"{flag} must be comma-separated names like {example}, got {text!r}")
    return out
