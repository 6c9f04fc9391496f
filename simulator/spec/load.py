"""Load a ModelSpec from a preset name, a preset/inline TOML file, or a Hugging Face config.json."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .hf import load_hf_config, model_from_hf
from .model import ModelSpec
from .presets import preset_names, read_toml, resolve


def load_model(name_or_path: str) -> ModelSpec:
    """ModelSpec from a preset name (`llama3-70b`), a `config.json` path, or a TOML file of HF keys."""
    path = resolve("models", str(name_or_path))
    if path.suffix == ".json":
        return load_hf_config(path)
    table = read_toml(path)
    return model_from_hf(table, name=str(table.get("name", Path(path).stem)), strict=True, where=str(path))


def list_models() -> pd.DataFrame:
    """One row per model preset: name, parameters (total, active), layers, hidden, heads, source."""
    rows = []
    for name in preset_names("models"):
        m = load_model(name)
        rows.append({"name": name, "params": m.total_params(), "active_params": m.active_params(),
                     "layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_heads,
                     "kv_heads": m.num_kv_heads, "experts": m.num_experts, "source": m.source})
    return pd.DataFrame(rows)
