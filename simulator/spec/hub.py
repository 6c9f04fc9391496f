"""ModelSpec from a Hugging Face Hub id (`Qwen/Qwen2.5-7B`, `org/name@revision`) through `huggingface_hub`.

`huggingface_hub` is optional: it is imported only here, only when a Hub id is given. Resolution
(spec/load.py `load_model`, used by `--model` and `[model] preset`): a preset name or an existing path
wins; a name with one "/" (before an optional `@revision`: a branch, tag or commit hash) that is not a
file is a Hub id. The repo's config.json comes from the local Hugging Face cache first
(`hf_hub_download(..., local_files_only=True)`; HF_HOME / HF_HUB_CACHE say where it is), from the Hub
only when that misses and offline mode (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE) is off; it is read
like a config.json file (spec/hf.py `load_hf_config`, strict=False). The ModelSpec is named as the id
was given and its `source` is "hf-hub:org/name@<commit>", the snapshot's commit hash. Every failure
(huggingface_hub not installed, offline without a cached copy, no network, gated, missing repo,
revision or config.json) is one InputError line saying what to do.
"""
from __future__ import annotations

import importlib
import logging
import os
import re
from dataclasses import replace
from pathlib import Path

from ..errors import InputError
from .hf import load_hf_config
from .model import ModelSpec

# A repo id as huggingface_hub's validate_repo_id accepts it (letters, digits, "-", "_", "."; no "--" or
# ".."; neither end "-" or "."), then an optional @revision (a branch or tag may hold "/").
_PART = r"[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"(?P<repo>{_PART}/{_PART})(?:@(?P<rev>[\w.-]+(?:/[\w.-]+)*))?", re.ASCII)
FILE_SUFFIXES = (".json", ".toml")
PASS_PATH = "or pass the path of its config.json instead"


def is_hub_id(name: str) -> bool:
    """Whether `name` is read as a Hugging Face Hub id: `org/name[@revision]`, not an existing path and
    not a .json/.toml file name (those stay file paths, so a typo says "file not found")."""
    m = HUB_ID.fullmatch(name)
    if m is None or "--" in m["repo"] or ".." in m["repo"] or os.path.lexists(name):
        return False
    return Path(m["repo"]).suffix not in FILE_SUFFIXES


def split_hub_id(name: str) -> tuple[str, str | None]:
    """(repo id, revision or None) of `org/name[@revision]`."""
    m = HUB_ID.fullmatch(name)
    assert m is not None, name
    return m["repo"], m["rev"]


def load_hub_model(name: str) -> ModelSpec:
    """The ModelSpec of the Hub repo `name` (`org/name[@revision]`): its config.json from the cache, else
    the Hub (module docstring); named `name`, source "hf-hub:org/name@<commit>"."""
    repo_id, revision = split_hub_id(name)
    try:
        importlib.import_module("huggingface_hub")  # the optional dependency: imported only here
    except ImportError:
        raise InputError(f"{name!r} is read as a Hugging Face Hub id, but huggingface_hub is not installed: "
                         f"pip install huggingface_hub (or pip install \".[hub]\"), {PASS_PATH}") from None
    path = fetch_config(repo_id, revision, shown=name)
    commit = path.parent.name  # <cache>/models--org--name/snapshots/<commit>/config.json
    spec = load_hf_config(path, name=name)
    return replace(spec, source=f"hf-hub:{repo_id}@{commit}")


def offline() -> bool:
    """Whether Hugging Face offline mode is on: HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set now, or when
    huggingface_hub was imported (it reads them once)."""
    from huggingface_hub import constants

    on = {"1", "ON", "YES", "TRUE"}
    env = any(os.environ.get(k, "").strip().upper() in on for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return env or bool(getattr(constants, "HF_HUB_OFFLINE", False))


def fetch_config(repo_id: str, revision: str | None, *, shown: str) -> Path:
    """Path of the repo's config.json in the Hugging Face cache: the cached snapshot when there is one,
    else downloaded (unless offline); InputError (one line) otherwise."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import EntryNotFoundError, HFValidationError

    try:
        return Path(hf_hub_download(repo_id, "config.json", revision=revision, local_files_only=True))
    except HFValidationError as exc:
        raise InputError(f"{shown!r} is not a valid Hugging Face Hub id: {_first_line(exc)}") from None
    except (EntryNotFoundError, FileNotFoundError):  # not cached (LocalEntryNotFoundError)
        pass
    at = f" at revision {revision!r}" if revision else ""
    if offline():
        raise InputError(f"{shown}: no cached config.json of this Hugging Face Hub repo{at} and offline mode is "
                         f"on (HF_HUB_OFFLINE): download it once online (unset HF_HUB_OFFLINE), {PASS_PATH}")
    return _download(repo_id, revision, shown=shown, at=at)


def _download(repo_id: str, revision: str | None, *, shown: str, at: str) -> Path:
    """hf_hub_download of config.json from the Hub, each failure one InputError line."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import (EntryNotFoundError, GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                       OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError)

    log = logging.getLogger("huggingface_hub")  # its retry warnings would bury the one-line error
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return Path(hf_hub_download(repo_id, "config.json", revision=revision))
    except GatedRepoError:
        msg = ("is a gated Hugging Face Hub repo: accept its terms on huggingface.co/" + repo_id
               + " and log in (hf auth login, or set HF_TOKEN)")
    except RepositoryNotFoundError:
        msg = ("is not a Hugging Face Hub repo you can read (no such repo, or private: log in with hf auth login "
               "or HF_TOKEN); check the name, give a preset (parasim models)")
    except RevisionNotFoundError:
        msg = f"has no revision {revision!r} on the Hugging Face Hub; give a branch, tag or commit hash that exists"
    except (OfflineModeIsEnabled, LocalEntryNotFoundError):
        msg = (f"cannot reach the Hugging Face Hub and there is no cached config.json{at}: download it once online "
               "(check the network or proxy)")
    except EntryNotFoundError:
        msg = f"has no config.json{at} on the Hugging Face Hub (not a transformers model repo?)"
    except HfHubHTTPError as exc:
        msg = f"could not be fetched from the Hugging Face Hub ({_first_line(exc)})"
    except Exception as exc:  # the HTTP client's own errors (proxy, TLS) reach here: one line, not a traceback
        msg = f"could not be fetched from the Hugging Face Hub ({type(exc).__name__}: {_first_line(exc)})"
    finally:
        log.setLevel(level)
    raise InputError(f"{shown} {msg}, {PASS_PATH}")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
