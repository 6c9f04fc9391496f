"""The user's model: `MODULE:FACTORY`, a Python file path or an importable module and a callable in it that
returns a `torch.nn.Module` (called with no arguments). Every failure is one InputError line."""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from ..errors import InputError

__all__ = ["require_torch", "load_factory", "build_module", "INSTALL_HINT"]

INSTALL_HINT = "torch is not installed: pip install 'parasim[torch]'"


def require_torch():
    """The torch module, or InputError with the install hint."""
    try:
        import torch
    except ImportError:
        raise InputError(INSTALL_HINT) from None
    return torch


def _one_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _import(where: str):
    is_file = where.endswith(".py") or "/" in where or "\\" in where
    if is_file:
        path = Path(where)
        if not path.is_file():
            raise InputError(f"model file {where!r} does not exist")
        spec = importlib.util.spec_from_file_location(f"_parasim_model_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise InputError(f"cannot load {where!r} as a Python file")
        module = importlib.util.module_from_spec(spec)
        import sys

        sys.path.insert(0, str(path.resolve().parent))  # the file's own imports of its neighbours
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's file: one line, no traceback
            raise InputError(f"importing {where!r} failed: {_one_line(exc)}") from None
        finally:
            sys.path.remove(str(path.resolve().parent))
        return module
    try:
        return importlib.import_module(where)
    except ImportError as exc:
        raise InputError(f"cannot import module {where!r}: {_one_line(exc)}") from None
    except Exception as exc:
        raise InputError(f"importing {where!r} failed: {_one_line(exc)}") from None


def load_factory(spec: str):
    """The callable named by `spec` = MODULE:FACTORY (MODULE a .py path or a dotted module name)."""
    where, _, name = spec.rpartition(":") if isinstance(spec, str) else ("", "", "")
    if not where or not name or not name.isidentifier():
        raise InputError(f"model must be MODULE:FACTORY (e.g. simulator.torchmodel.examples:resnet50), got {spec!r}")
    module = _import(where)
    try:
        factory = getattr(module, name)
    except AttributeError:
        raise InputError(f"{where!r} has no {name!r}") from None
    if not callable(factory):
        raise InputError(f"{where}:{name} is not callable (a function or class returning an nn.Module)")
    return factory


def build_module(spec: str):
    """Call the factory of `spec` and check that it returned an nn.Module."""
    torch = require_torch()
    factory = load_factory(spec)
    try:
        module = factory()
    except Exception as exc:
        raise InputError(f"{spec}() failed: {_one_line(exc)}") from None
    if not isinstance(module, torch.nn.Module):
        raise InputError(f"{spec}() returned {type(module).__name__}, not a torch.nn.Module")
    return module
