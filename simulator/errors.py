"""The one exception type for bad input.

Three kinds of failure stay apart (STYLE.md): bad input raises `InputError` with a one-line message
naming the offending value; a valid layout that does not fit is a result row (`feasible=False`,
`reason`); an internal impossibility is an `assert`.
"""


class InputError(ValueError):
    """Bad user input: the message is one line and names the offending value.

    The CLI prints it to stderr as `error: <message>` and exits with code 2.
    """


def check_positive(name: str, value, *, integer: bool = False, allow_zero: bool = False):
    """Return `value` if it is a finite positive number (an int if `integer`), else raise InputError."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{name} must be finite, got {value!r}")
    if integer and isinstance(value, float) and not value.is_integer():  # an int of any size is whole
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return int(value) if integer else value
