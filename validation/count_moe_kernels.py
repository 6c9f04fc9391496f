"""Kernels one Hugging Face MoE decoder layer launches, counted on CPU: the hf and fsdp stacks' MoE layer counts.

    python validation/count_moe_kernels.py [--out validation/cpu/moe_layer_kernels.csv]

transformers' Qwen3MoeDecoderLayer (sdpa attention, q/k norms, top-k router, the experts as 3D weights) runs one
forward and one backward under torch.profiler on CPU, counted as validation/count_layer_kernels.py counts a dense layer
(leaf aten ops that do work), for both experts implementations and 4, 8 and 16 experts (every expert hit):
- grouped_mm, transformers 5's default (modeling_utils.get_correct_experts_implementation: "grouped_mm" unless asked
  otherwise; integrations/moe.py grouped_mm_experts_forward: sort by expert, histc, cumsum, two grouped GEMMs). On a
  CPU its GEMMs run as the fallback's loop of one mm per expert (the counts grow by exactly 2 mm forward and 4
  backward per expert, nothing else); on a GPU each is one grouped kernel, forward and per gradient, so the GPU's
  count is the CPU's less that loop plus 2 forward and 4 backward kernels, whatever the expert count;
- eager (transformers' own loop over the hit experts: where, index, two linears, SiLU, mul, index_add per expert):
  the count's intercept and slope in the expert count.
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))
OUT = ROOT / "validation" / "cpu" / "moe_layer_kernels.csv"
EXPERTS = (4, 8, 16)


def _layer(torch, impl: str, experts: int, h: int = 64, s: int = 256):
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeDecoderLayer, Qwen3MoeRotaryEmbedding

    cfg = Qwen3MoeConfig(hidden_size=h, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
                         moe_intermediate_size=32, num_experts=experts, num_experts_per_tok=2, num_hidden_layers=1)
    cfg._attn_implementation, cfg._experts_implementation = "sdpa", impl
    layer = Qwen3MoeDecoderLayer(cfg, 0).to(torch.bfloat16)
    for p in layer.parameters():  # (3D expert weights are created empty)
        torch.nn.init.normal_(p, std=0.02)
    pos = torch.arange(s)[None]
    pe = Qwen3MoeRotaryEmbedding(cfg)(torch.randn(1, s, h, dtype=torch.bfloat16), pos)
    return lambda x: layer(x, position_embeddings=pe, attention_mask=None, position_ids=pos)


def rows() -> list[dict]:
    """Per implementation and expert count: forward and backward kernels, and their mm ops."""
    import torch
    import transformers
    from count_layer_kernels import count

    torch.manual_seed(0)
    out = []
    for impl in ("grouped_mm", "eager"):
        for e in EXPERTS:
            f, b = count(torch, _layer(torch, impl, e), 64, 256)
            out.append({"experts_implementation": impl, "experts": e, "forward_kernels": len(f),
                        "backward_kernels": len(b), "forward_mm": Counter(f)["aten::mm"],
                        "backward_mm": Counter(b)["aten::mm"], "torch": torch.__version__,
                        "transformers": transformers.__version__})
    return out


def gpu_counts(table: list[dict]) -> dict:
    """{implementation: (m_f, m_b, p_f, p_b)}: an MoE layer's launches on a GPU, m + G·p for G local experts."""
    def at(impl, e):
        return next(r for r in table if r["experts_implementation"] == impl and int(r["experts"]) == e)

    lo, hi = at("grouped_mm", EXPERTS[0]), at("grouped_mm", EXPERTS[-1])
    slope = [(int(hi[k]) - int(lo[k])) / (EXPERTS[-1] - EXPERTS[0]) for k in ("forward_kernels", "backward_kernels")]
    assert slope == [2.0, 4.0], slope  # the CPU fallback's loop only (module docstring)
    grouped = (int(lo["forward_kernels"]) - 2 * EXPERTS[0] + 2, int(lo["backward_kernels"]) - 4 * EXPERTS[0] + 4)
    lo, hi = at("eager", EXPERTS[0]), at("eager", EXPERTS[-1])
    p = [(int(hi[k]) - int(lo[k])) // (EXPERTS[-1] - EXPERTS[0]) for k in ("forward_kernels", "backward_kernels")]
    eager = (int(lo["forward_kernels"]) - p[0] * EXPERTS[0], int(lo["backward_kernels"]) - p[1] * EXPERTS[0])
    return {"grouped_mm": (*grouped, 0, 0), "eager": (*eager, *p)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    table = rows()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    for impl, (mf, mb, pf, pb) in gpu_counts(table).items():
        print(f"{impl}: {mf} + {pf}·G forward, {mb} + {pb}·G backward kernels per MoE layer on a GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
