"""Imports point one way (docs/architecture.md): a module imports only modules of its own layer or of
lower ones, function-local imports included. A new import that points up fails here, naming it."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "simulator"
# lowest first; a top-level module or package of simulator/ belongs to exactly one layer
LAYERS = (
    ("errors", "units"),
    ("native",),
    ("dedup", "frames"),
    ("schedules",),
    ("spec",),
    ("pipeline",),
    ("cost", "memory"),
    ("structure",),
    ("batch", "kernel_comm", "kernel_layer_comm", "kernel_pipeline", "kernel_throughput", "options"),
    ("kernel",),
    ("estimate", "inference", "run_plan", "plan", "sweep", "calibrate"),
    ("torchmodel",),  # any torch model (torch imported inside its functions only)
    ("validate",),
    ("frameworks",),  # configs in and out: Megatron-LM / NeMo, torchtitan, DeepSpeed <-> scenarios
    ("report",),
    ("cli",),
)
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _part(module: str) -> str:
    """The top-level part of simulator.<part>...; '' for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path):
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    package = [p for p in package if p != "__init__"]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith("simulator.") and _part(name):
                yield node.lineno, name


def _modules():
    return sorted(ROOT.rglob("*.py"))


def test_every_part_has_a_layer():
    parts = {p.relative_to(ROOT).parts[0].removesuffix(".py") for p in _modules()} - {"__init__", "__main__"}
    assert parts <= set(LAYER), f"give these a layer in LAYERS: {sorted(parts - set(LAYER))}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
    own = path.relative_to(ROOT).parts[0].removesuffix(".py")
    if own in ("__init__", "__main__"):
        return
    up = [f"line {n}: {name}" for n, name in _imports(path) if LAYER.get(_part(name), -1) > LAYER[own]]
    assert not up, f"{path.relative_to(ROOT.parent)} ({own}) imports a higher layer: {up}"
