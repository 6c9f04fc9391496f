"""A framework's configuration as flat keys, read through typed getters that remember what was read.

Every importer (Megatron-LM / NeMo, torchtitan, DeepSpeed) flattens its input into `Fields`: a key
(Megatron's argparse `dest`, torchtitan's `section.key`, DeepSpeed's `zero_optimization.stage`) mapped
to the name the user wrote (`--tensor-model-parallel-size`, `[parallelism] tensor_parallel_degree`) and
the raw value. The translators read keys through `int`, `float`, `text`, `flag`; a value that does not
parse is an InputError naming the file and the key as written (one line, exit 2 in the CLI): a command line's
text as argparse's type=int / float reads it (`--num-layers 1e3` is no integer), a typed file's (TOML, JSON)
number or switch written as text is a slip, and a TOML integer is written without a decimal point (JSON's 5e8
passes: DeepSpeed's integer fields take it). A value a translator does not know for a key it reads is
reported as not understood (`Report.unknown_value`), as an unread key is. What was
never read is what the importer did not use: `Fields.unread` lists it, and `Report` sorts it into
"ignored" (known to change neither memory nor step time) and "not understood", so nothing is silently
dropped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import InputError

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


class Fields:
    """Flat keys of one configuration file: key -> (name as written, raw value)."""

    def __init__(self, items: dict[str, tuple[str, object]], where: str, *, typed: bool = False,
                 whole_floats: bool = True):
        self.items = dict(items)
        self.where = where
        self.read: set[str] = set()
        self.typed = typed  # a typed file (TOML, JSON): a number or switch written as text is a slip, not a value
        self.whole_floats = whole_floats  # an integer may be written as a whole float (JSON's 5e8; not TOML's 2.0)

    def has(self, key: str) -> bool:
        return key in self.items

    def name(self, key: str) -> str:
        return self.items[key][0] if key in self.items else key

    def raw(self, key: str, default=None):
        """The value as written (marked read); `default` when absent."""
        if key not in self.items:
            return default
        self.read.add(key)
        return self.items[key][1]

    def peek(self, key: str, default=None):
        """The value as written, without marking it read (the caller reads it where it matters)."""
        return self.items[key][1] if key in self.items else default

    def take(self, *keys: str) -> None:
        """Mark keys read without using them (their effect is reported by the caller)."""
        self.read.update(k for k in keys if k in self.items)

    def error(self, key: str, what: str) -> InputError:
        return InputError(f"{self.where}: {self.name(key)} {what}")

    def _scalar(self, key: str, default):
        v = self.raw(key, default)
        if isinstance(v, list) and not isinstance(default, list):
            if len(v) != 1:
                raise self.error(key, f"takes one value, got {' '.join(map(str, v)) or 'none'}")
            v = v[0]
        return v

    def int(self, key: str, default=None, *, least: int = 1):
        """A whole number >= `least`: an integer, a text of one as argparse's type=int reads it (not 1e3), or, where
        `whole_floats`, an integer-valued float such as JSON's 5e8."""
        v = self._scalar(key, default)
        if v is None:
            return None
        if self.typed and isinstance(v, str):
            raise self.error(key, f"must be a whole number, got {v!r}")
        if isinstance(v, float) and not self.whole_floats:
            raise self.error(key, f"must be an integer, written without a decimal point, got {v!r}")
        try:
            x = int(v.strip()) if isinstance(v, str) else v
            ok = not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x == int(x)
        except (ValueError, OverflowError):
            ok = False
        if not ok:
            raise self.error(key, f"must be a whole number, got {v!r}")
        if int(x) < least:
            raise self.error(key, f"must be >= {least}, got {v!r}")
        return int(x)

    def float(self, key: str, default=None, *, least: float = 0.0):
        v = self._scalar(key, default)
        if v is None:
            return None
        if self.typed and isinstance(v, str):
            raise self.error(key, f"must be a number >= {least:g}, got {v!r}")
        try:
            x = float(v) if not isinstance(v, bool) else None
        except (TypeError, ValueError):
            x = None
        if x is None or not math.isfinite(x) or x < least:
            raise self.error(key, f"must be a number >= {least:g}, got {v!r}")
        return x

    def text(self, key: str, default=None, *, choices=None):
        v = self._scalar(key, default)
        if v is None:
            return None
        if not isinstance(v, str):
            raise self.error(key, f"must be a string, got {v!r}")
        if choices is not None and v not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}, got {v!r}")
        return v

    def flag(self, key: str, default: bool = False) -> bool:
        """A switch: present without a value (a command-line store_true flag), true/false, or a bool."""
        v = self.raw(key, None)
        if v is None:
            return default
        if isinstance(v, bool):
            return v
        if isinstance(v, list) and not v:
            return True
        v = v[0] if isinstance(v, list) and len(v) == 1 else v
        if isinstance(v, str) and v.lower() in _TRUE + _FALSE and not self.typed:
            return v.lower() in _TRUE
        raise self.error(key, f"must be true or false, got {v!r}")

    def unread(self) -> list[str]:
        """Keys never read, in the order they were written."""
        return [k for k in self.items if k not in self.read]


@dataclass
class Report:
    """What an import understood and what it did not (printed by `parasim import`)."""

    assumptions: list[str] = field(default_factory=list)  # a value parasim chose where the file is silent
    not_modelled: list[str] = field(default_factory=list)  # understood, but parasim cannot express it
    ignored: list[str] = field(default_factory=list)  # known to change neither memory nor step time
    not_understood: list[str] = field(default_factory=list)

    def assume(self, text: str) -> None:
        self.assumptions.append(text)

    def cannot(self, text: str) -> None:
        self.not_modelled.append(text)

    def unknown_value(self, f: Fields, key: str, value, known) -> None:
        """A value parasim does not know for a key it reads (the framework's own choices are `known`): not
        understood, and said so, as an unread key is."""
        self.not_understood.append(f"{f.name(key)} {value!r}: not one of {', '.join(known)}")

    def leftovers(self, f: Fields, ignored) -> None:
        """Sort the keys `f` never read into ignored (`ignored(key)` true) and not understood."""
        for key in f.unread():
            (self.ignored if ignored(key) else self.not_understood).append(f.name(key))

    def lines(self) -> list[str]:
        out = []
        for title, items in (("assumptions", self.assumptions), ("not expressible in parasim", self.not_modelled),
                             ("not understood", self.not_understood)):
            if items:
                out.append(f"{title} ({len(items)}):")
                out += [f"  - {x}" for x in items]
        if self.ignored:
            out.append(f"ignored, no effect on memory or step time ({len(self.ignored)}): "
                       + ", ".join(self.ignored))
        return out


def prefixed(key: str, prefixes) -> bool:
    """True when `key` is one of `prefixes` or starts with one ending in '_' or '.'."""
    return any(key == p or (p[-1] in "_." and key.startswith(p)) for p in prefixes)
