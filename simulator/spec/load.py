"""Load a ModelSpec from a preset name, a preset/inline TOML file, a Hugging Face config.json (or a folder
holding one), or a Hugging Face Hub id (`org/name[@revision]`, spec/hub.py)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .hf import load_hf_config, model_from_hf
from .hub import is_hub_id, load_hub_model
from .model import ModelSpec
from .presets import preset_names, read_toml, resolve


def load_model(name_or_path: str) -> ModelSpec:
    """ModelSpec from a preset name (`llama3-70b`), a `config.json` path (or a folder holding one, such as a
    downloaded model), a TOML file of HF keys, or a Hugging Face Hub id (`Qwen/Qwen2.5-7B`, `org/name@rev`:
    a name with one "/" that is no existing path; spec/hub.py). A preset or an existing path wins."""
    name = str(name_or_path)
    if is_hub_id(name):
        return load_hub_model(name)
    config = _config_in_folder(name)
    if config is not None:
        return load_hf_config(config)
    path = resolve("models", name)
    if path.suffix == ".json":
        return load_hf_config(path)
    table = read_toml(path)
    return model_from_hf(table, name=str(table.get("name", Path(path).stem)), strict=True, where=str(path))


def _config_in_folder(name: str) -> Path | None:
    """`name`/config.json when `name` is a folder holding one (a downloaded model), else None."""
    try:
        config = Path(name) / "config.json"
        return config if Path(name).is_dir() and config.is_file() else None
    except (OSError, ValueError):  # a name too long, a NUL: resolve() words it
        return None


def list_models() -> pd.DataFrame:
    """One row per model preset: name, parameters (total, active), layers, hidden, heads, source."""
    rows = []
    for name in preset_names("models"):
        m = load_model(name)
        rows.append({"name": name, "params": m.total_params(), "active_params": m.active_params(),
                     "layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_heads,
                     "kv_heads": m.num_kv_heads, "experts": m.num_experts, "source": m.source})
    return pd.DataFrame(rows)
