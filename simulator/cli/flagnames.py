"""Error messages that name the flag the user typed (`--gpus must be > 0, got 0`), not the library's
keyword for the value (`num_gpus`): the library checks each value once, under its own name; a command
says which of its flags gave which keyword, and `flag_names` puts the flag in the message."""
from __future__ import annotations

import contextlib
import re

from ..errors import InputError


def given_flags(table, values: dict) -> dict[str, str]:
    """{destination keyword: flag} of the rows (flag, destination, ...) of `table` whose value in
    `values` was given (not None): the names `flag_names` may put in a message."""
    return {row[1]: row[0] for row in table if values.get(row[1]) is not None}


@contextlib.contextmanager
def flag_names(flags: dict[str, str], *, relations: dict[str, str] | None = None):
    """Inside: an InputError about one value, its message beginning with the library's keyword for it
    (`num_gpus must be > 0, got 0`; the sweep space's `sweep tp value 0 is out of range`; a stack field's
    `stack 'megatron': fsdp_prefetch must be ...`), is raised
    again naming the flag the user typed instead (`--gpus must be > 0, got 0`), when that keyword is in
    `flags` ({keyword: flag}, the flags given). A relation between values (`num_gpus(64) is not
    divisible by tp(3)`) is left alone, except between the keywords of `relations` ({keyword: flag},
    settings only flags can change here): `sweep min_micro_batch_size(4) > max_micro_batch_size(2)`
    becomes `--min-micro-batch 4 > --max-micro-batch 2`."""
    try:
        yield
    except InputError as exc:
        msg = str(exc)
        for key, flag in (relations or {}).items():
            msg = re.sub(rf"(?:\bsweep )?\b{re.escape(key)}\(([^()]*)\)", rf"{flag} \1", msg)
        found = [(m.end(), flag) for key, flag in flags.items()  # a space or a stack field; the longest names it
                 if (m := re.match(rf"(?:sweep |stack '[^']*': )?{re.escape(key)}(?= )", msg))]
        if found:
            end, flag = max(found)
            msg = flag + msg[end:]
        if msg == str(exc):
            raise
        raise InputError(msg) from None
