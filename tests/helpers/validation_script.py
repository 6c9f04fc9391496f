"""Import a script of validation/ by name (they are scripts, not a package)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    """The module validation/<name>.py, executed once per call."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "validation" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
