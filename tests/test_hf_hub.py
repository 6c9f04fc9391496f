"""Hugging Face Hub ids as models (spec/hub.py): `--model Org/Name[@revision]` and `[model] preset` read the
repo's config.json from a pre-filled Hugging Face cache under tmp_path. No test touches the network:
HF_HUB_OFFLINE=1 throughout, and every socket connection or name lookup raises."""
import json
import socket
import sys

import pytest

from simulator.cli import main
from simulator.errors import InputError
from simulator.spec.hf import load_hf_config
from simulator.spec.hub import is_hub_id, split_hub_id
from simulator.spec.load import load_model
from simulator.spec.scenario import load_scenario

hub = pytest.importorskip("huggingface_hub")
from huggingface_hub import constants as hub_constants, utils as hub_utils  # noqa: E402

SHA_MAIN = "a" * 40
SHA_V2 = "b" * 40
LLAMA = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 2, "intermediate_size": 688, "vocab_size": 1000, "rope_theta": 500000.0,
         "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 128, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 384, "vocab_size": 1500,
         "tie_word_embeddings": True, "use_sliding_window": False, "attention_dropout": 0.0}
JOB = ["--hardware", "dgx-h100", "--gpus", "8", "--tp", "2", "--seq", "1024", "--global-batch", "8"]


def _snapshot(cache, repo: str, sha: str, config: dict, ref: str | None = "main"):
    """Write `config` as the config.json of `repo` at commit `sha` in the Hugging Face cache layout, with
    refs/<ref> naming the commit (huggingface_hub writes the hash without a newline)."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / sha
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    if ref:
        (folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(sha)
    return snap / "config.json"


class NetworkUsed(BaseException):
    """Raised by any connection attempt; a BaseException, so no `except Exception` on the way hides it."""


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Offline mode on (the environment and huggingface_hub's copy read at import); any connection fails."""
    def refuse(*args, **kwargs):
        raise NetworkUsed("a test tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A Hugging Face cache folder holding Org/TinyLlama (main, and v2 with 6 layers) and Qwen/Qwen2-Tiny;
    the working directory is a fresh folder, so no relative path shadows the ids."""
    c = tmp_path / "hf" / "hub"
    _snapshot(c, "Org/TinyLlama", SHA_MAIN, LLAMA)
    _snapshot(c, "Org/TinyLlama", SHA_V2, {**LLAMA, "num_hidden_layers": 6}, ref="v2")
    _snapshot(c, "Qwen/Qwen2-Tiny", SHA_MAIN, QWEN2)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(c))
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(c))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return c


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize("repo,config", [("Org/TinyLlama", LLAMA), ("Qwen/Qwen2-Tiny", QWEN2)])
def test_hub_id_loads_the_cached_config_like_the_file(cache, tmp_path, repo, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    m, ref = load_model(repo), load_hf_config(path)
    assert m.total_params() == ref.total_params() and m.active_params() == ref.active_params()
    assert m.num_layers == config["num_hidden_layers"] and m.vocab_size == config["vocab_size"]
    assert (m.name, m.source) == (repo, f"hf-hub:{repo}@{SHA_MAIN}")


def test_tiny_llama_parameter_count_by_hand(cache):
    h, L, f, V, kv = 256, 4, 688, 1000, 2 * 32  # kv: 2 KV heads x head_dim 32
    layer = h * h + 2 * h * kv + h * h + 3 * h * f + 2 * h
    assert load_model("Org/TinyLlama").total_params() == L * layer + 2 * V * h + h


def test_revision_picks_that_snapshot(cache):
    for rev in ("v2", SHA_V2):
        m = load_model(f"Org/TinyLlama@{rev}")
        assert m.num_layers == 6 and m.source == f"hf-hub:Org/TinyLlama@{SHA_V2}" and m.name == f"Org/TinyLlama@{rev}"
    assert load_model(f"Org/TinyLlama@{SHA_MAIN}").num_layers == 4 == load_model("Org/TinyLlama@main").num_layers


def test_missing_repo_or_revision_offline_is_one_line_exit_2(cache, capsys):
    for name in ("Org/Missing", "Org/TinyLlama@v3"):
        code, out, err = run(["memory", "--model", name, *JOB], capsys)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert name in err and "HF_HUB_OFFLINE" in err and "config.json" in err and "Traceback" not in err


def test_preset_name_and_existing_paths_win(cache, tmp_path):
    preset = load_model("llama3-8b")
    assert preset.name == "llama3-8b" and not preset.source.startswith("hf-hub:")
    assert not is_hub_id("llama3-8b") and is_hub_id("Org/TinyLlama") and is_hub_id("Qwen/Qwen2.5-7B@main")
    assert not is_hub_id("configs/llama.json") and not is_hub_id("/abs/x") and not is_hub_id("a/b/c")
    # an existing file named like the id (a TOML of HF keys) is read as the file, not the cached repo
    (tmp_path / "work" / "Org").mkdir()
    (tmp_path / "work" / "Org" / "TinyLlama").write_text("hidden_size = 64\nnum_hidden_layers = 2\n"
                                                         "num_attention_heads = 4\nintermediate_size = 128\n"
                                                         "vocab_size = 100\n")
    assert not is_hub_id("Org/TinyLlama")
    m = load_model("Org/TinyLlama")
    assert m.num_layers == 2 and not m.source.startswith("hf-hub:")


def test_config_json_path_and_folder_still_load_the_file(cache, tmp_path):
    folder = tmp_path / "work" / "Qwen" / "Qwen2-Tiny"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**QWEN2, "num_hidden_layers": 5}))
    for name in ("Qwen/Qwen2-Tiny/config.json", "Qwen/Qwen2-Tiny", str(folder)):
        m = load_model(name)
        assert m.num_layers == 5 and m.source == "" and m.name == "Qwen2-Tiny", name


def test_huggingface_hub_not_installed_says_what_to_do(cache, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import huggingface_hub` raises ImportError
    with pytest.raises(InputError, match="pip install huggingface_hub"):
        load_model("Org/TinyLlama")
    code, out, err = run(["estimate", "--model", "Org/TinyLlama", *JOB], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "pip install huggingface_hub" in err
    assert load_model("llama3-8b").name == "llama3-8b"  # presets need no huggingface_hub


def test_memory_and_estimate_json_record_the_id_and_commit(cache, capsys):
    for cmd in ("memory", "estimate"):
        code, out, err = run([cmd, "--model", "Org/TinyLlama", *JOB, "--format", "json"], capsys)
        assert code == 0, err
        d = json.loads(out)["model"]
        assert d["name"] == "Org/TinyLlama" and d["source"] == f"hf-hub:Org/TinyLlama@{SHA_MAIN}"
        assert d["params"] == load_model("Org/TinyLlama").total_params()
    code, out, _ = run(["memory", "--model", "llama3-8b", *JOB, "--format", "json"], capsys)
    assert code == 0 and "source" not in json.loads(out)["model"]


def test_scenario_model_preset_takes_a_hub_id(cache, tmp_path):
    sc = tmp_path / "job.toml"
    sc.write_text('[model]\npreset = "Qwen/Qwen2-Tiny"\n[hardware]\npreset = "dgx-h100"\nnum_gpus = 8\n'
                  "[training]\nseq_length = 1024\nglobal_batch_size = 8\n[layout]\ntp = 2\n")
    s = load_scenario(str(sc))
    assert s.model.name == "Qwen/Qwen2-Tiny" and s.model.source == f"hf-hub:Qwen/Qwen2-Tiny@{SHA_MAIN}"


def test_split_hub_id():
    assert split_hub_id("Qwen/Qwen2.5-7B") == ("Qwen/Qwen2.5-7B", None)
    assert split_hub_id("org/name@refs/pr/1") == ("org/name", "refs/pr/1")


def _raise(cls, msg="boom"):
    err = cls.__new__(cls)  # the HTTP errors want a response object; only the type matters here
    err.args = (msg,)
    return err


@pytest.mark.parametrize("error,words", [
    ("GatedRepoError", ["gated", "HF_TOKEN", "config.json"]),
    ("RepositoryNotFoundError", ["not a Hugging Face Hub repo", "parasim models"]),
    ("RevisionNotFoundError", ["no revision"]),
    ("LocalEntryNotFoundError", ["cannot reach the Hugging Face Hub", "download it once online"]),
])
def test_online_failures_are_one_line(cache, monkeypatch, error, words):
    """With offline mode off and nothing cached, hf_hub_download goes online: its errors (raised by a
    stand-in, never a real request) each become one line."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)

    def fake(repo_id, filename, *, revision=None, local_files_only=False, **kw):
        if local_files_only:
            raise hub_utils.LocalEntryNotFoundError("not cached")
        raise _raise(getattr(hub_utils, error))

    monkeypatch.setattr(hub, "hf_hub_download", fake)
    with pytest.raises(InputError) as exc:
        load_model("Org/Elsewhere@v1" if error == "RevisionNotFoundError" else "Org/Elsewhere")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("Org/Elsewhere") and all(w in msg for w in words), msg


def test_online_download_records_the_commit(cache, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    fetched = _snapshot(tmp_path / "other", "Org/New", "c" * 40, LLAMA)
    calls = []

    def fake(repo_id, filename, *, revision=None, local_files_only=False, **kw):
        calls.append(local_files_only)
        if local_files_only:
            raise hub_utils.LocalEntryNotFoundError("not cached")
        return str(fetched)

    monkeypatch.setattr(hub, "hf_hub_download", fake)
    m = load_model("Org/New")
    assert calls == [True, False] and m.source == f"hf-hub:Org/New@{'c' * 40}"
