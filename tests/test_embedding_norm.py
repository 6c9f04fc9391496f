"""BLOOM's LayerNorm on the word embeddings (ModelSpec.embedding_norm): what it keeps for backward against
the tensors torch saves for Hugging Face's own module, its kernel on the first stage, and that a model
without it is unchanged."""
import numpy as np
import pytest

from simulator.cost.memory_ops import _embedding_memory_ops
from simulator.memory.head_activations import embedding_activation_bytes
from simulator.spec.hf import model_from_hf
from simulator.spec.training import Training

BLOOM = dict(model_type="bloom", n_embed=64, n_layer=2, n_head=4, vocab_size=128)


def test_the_norm_keeps_its_input_and_two_statistics_as_torch_saves_them():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    b, s, h = 2, 16, BLOOM["n_embed"]
    hf = transformers.BloomForCausalLM(transformers.BloomConfig(**{k: v for k, v in BLOOM.items()
                                                                    if k != "model_type"})).to(torch.bfloat16)
    ln = hf.transformer.word_embeddings_layernorm
    params = {p.data_ptr() for p in hf.parameters()}
    saved = []

    def pack(t):
        if t.data_ptr() not in params:
            saved.append(t.numel())
        return t

    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        ln(x)
    T = b * s
    assert sorted(saved) == [T, T, T * h]  # the input, and mean and rstd per token
    spec = model_from_hf(BLOOM, strict=False)
    tr = Training(seq_length=s, global_batch_size=b, precision="bf16", dropout=False)
    kw = dict(tp=1, cp=1, micro_batch_size=b, sequence_parallel=False)
    extra = embedding_activation_bytes(spec, tr, **kw) - embedding_activation_bytes(spec.with_(embedding_norm=False),
                                                                                     tr, **kw)
    # the bf16 input, and the statistics in fp32 (the accumulation type CUDA's layer_norm and apex keep them in;
    # on CPU torch keeps them in the input's dtype)
    assert float(extra) == 2 * T * h + 4 * 2 * T


def test_the_first_stage_runs_the_norm_and_a_model_without_it_does_not():
    spec = model_from_hf(BLOOM, strict=False)
    tr = Training(seq_length=128, global_batch_size=4)
    kw = dict(tp=np.array([1.0, 2.0]), cp=1, micro_batch_size=2, sequence_parallel=False)
    names = [op.name for op in _embedding_memory_ops(spec, tr, **kw)]
    assert names == ["embedding", "embedding_norm"]
    norm = _embedding_memory_ops(spec, tr, **kw)[1]
    assert np.all(np.asarray(norm.forward_bytes) > 0) and np.all(np.asarray(norm.backward_bytes) > 0)
    assert [op.name for op in _embedding_memory_ops(spec.with_(embedding_norm=False), tr, **kw)] == ["embedding"]


@pytest.mark.parametrize("cfg, key", [
    (dict(BLOOM, n_embed=-5), "n_embed"),
    (dict(BLOOM, n_embed=64, hidden_size=128), "n_embed"),       # two spellings, two values
    (dict(BLOOM, num_key_value_heads=2), "num_key_value_heads"),  # BLOOM has no GQA: not counted, refused
    (dict(BLOOM, n_layer="24"), "n_layer"),
])
def test_a_bad_bloom_config_is_one_line_naming_the_key(tmp_path, capsys, cfg, key):
    import json

    from simulator.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SystemExit) as e:
        main(["memory", "--model", str(path), "--hardware", "dgx-h100", "--gpus", "1", "--seq", "128",
              "--global-batch", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and key in err[0], err
