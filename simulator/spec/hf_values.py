"""Values of a Hugging Face config that parasim does not count but transformers reads, checked as transformers
would take them (used by spec/hf.py): a config transformers cannot build a model from is no model to estimate.

- the activation (`hidden_act`; Gemma's `hidden_activation`, GPT-2's `activation_function`): a name (text). Which
  names exist is transformers' (ACT2FN) and grows with its releases; parasim does not read the activation, so a
  name it does not know is not refused (a number or a list is no name);
- `rope_theta` (top level or in `rope_parameters`): a finite number > 0 (the inverse frequencies are
  1 / theta**(2i/d): text raises TypeError, 0 or less gives inf or nan);
- the RoPE scaling `factor` of `rope_scaling` / `rope_parameters`: a finite number > 0 (text raises TypeError;
  transformers warns below 1, and 0 or less, or inf, divides the positions into nothing).
Each is one function; `check_hf_values` runs them all.
"""
from __future__ import annotations

from ..errors import InputError
from .rules import check_number

ACTIVATION_KEYS = ("hidden_act", "hidden_activation", "activation_function")
ROPE_TABLES = ("rope_scaling", "rope_parameters")


def check_activation(cfg: dict, where: str) -> None:
    """InputError naming the key, the file and the value unless each activation key given is a name (text)."""
    for key in ACTIVATION_KEYS:
        v = cfg.get(key)
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise InputError(f"{key} in {where} must be an activation's name, got {v!r}")


def check_rope(cfg: dict, where: str) -> None:
    """InputError naming the key, the file and the value unless rope_theta and each RoPE table's rope_theta and
    factor are finite numbers > 0 (a table: a JSON object, or one per layer type as transformers 5 writes them)."""
    if cfg.get("rope_theta") is not None:
        check_number(cfg["rope_theta"], f"rope_theta in {where}")
    for key in ROPE_TABLES:
        table = cfg.get(key)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise InputError(f"{key} in {where} must be a JSON object or null, got {table!r}")
        parts = table.values() if table and all(isinstance(v, dict) for v in table.values()) else [table]
        for part in parts:
            for name in ("rope_theta", "factor"):
                if part.get(name) is not None:
                    check_number(part[name], f"{key} {name} in {where}")


def check_hf_values(cfg: dict, where: str) -> None:
    """Every check of the module on the config `cfg` (read from `where`)."""
    check_activation(cfg, where)
    check_rope(cfg, where)
