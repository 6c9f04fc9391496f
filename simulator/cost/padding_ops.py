"""flash-attn's `bert_padding` around a FlashAttention call (Stack.attention_padding = "unpad"), as a layer graph's
blocks (elementwise_ops.py): the copies it runs on the GPU. Its host synchronisations are cost/launch.py's
`padding_sync_s`.

llm-foundry's `attn_impl: flash` (llmfoundry/models/layers/attention.py `flash_attn_fn`, mosaicml/llm-foundry
5e85bd6) calls, in every layer's forward, `bert_padding.unpad_input` on the query, the key and the value, runs
`flash_attn_varlen_func` on the [tokens, heads, d] rows, and `bert_padding.pad_input` on its output
(flash-attn 2.3.6, flash_attn/bert_padding.py):

- unpad_input: the rows gathered, `index_first_axis` = torch.gather(x, 0, indices expanded over the row):
  read x, write the rows (torch 2.11 runs it as `vectorized_gather_kernel`, validation/h100_cp_unpad/sync.csv);
  its backward zero-fills a [b·s, width] gradient and scatters the rows into it (`scatter_`);
- pad_input: `index_put_first_axis` = a zero-filled [b·s, width] output, then `output[indices] = rows`
  (index_put_); its backward gathers the gradient's rows (`grad[indices]`, aten::index).

With every token real (the benchmarks' packed data) the rows are all b·s tokens, so each copy moves the whole
tensor. The kernels, read from an H100 trace of these blocks (validation/h100_cp_unpad/unpad_kernels.csv, torch
2.11): the gathers, pad_input's backward `grad[indices]` included, run `vectorized_gather_kernel` (2.9 TB/s there:
timed as copies); scatter_ runs `_scatter_gather_elementwise_kernel` (1.3 TB/s there and queued, 1.3-1.4 TB/s in
validation/h100_cp_unpad/indexing_queued.csv), a per-element indexing kernel timed as `Op.strided` (the strided
table's 1.64 TB/s); index_put_ runs `index_elementwise_kernel` (0.8 TB/s), timed with the profile's
`memory_indexed` table (`Op.indexed`, validation/h100_indexed_table.py: 0.86 TB/s queued). The small per-call
kernels (mask sum, nonzero, max, cumsum, pad of cu_seqlens) move O(b·s) bytes and count 0 here; their
host time is what the synchronisations expose (`padding_sync_s`). Measured on an H100 around MPT blocks:
validation/gpu_unpad.py."""
from __future__ import annotations

from .elementwise_ops import Graph, Op

GROUP = "attention_padding"


def unpad_attention_forward(g: Graph, qkv: tuple, ao: str) -> str:
    """q, k, v gathered into rows, the attention kernel on the rows, its output padded back into `ao`."""
    rows = tuple(g.like(f"{t}.unpad", t) for t in qkv)
    g.block("forward", "unpad", GROUP, qkv, rows, [Op("gather", (t,), (r,)) for t, r in zip(qkv, rows)])
    out = g.like("ao.unpad", ao)
    g.boundary("forward", "attention", rows, (out,))
    g.block("forward", "pad", GROUP, (out,), (ao,),
            [Op("zeros", (), (ao,)), Op("index_put_", (out,), (ao,), indexed=True)])
    return ao


def unpad_attention_backward(g: Graph, dao: str, qkv: tuple) -> tuple:
    """pad_input's backward (a row gather of d.ao), the attention backward on the rows, unpad_input's backward
    for q, k, v (zero-fill, scatter). Returns the gradients of q, k, v."""
    drows_out = g.like("d.ao.unpad", "ao.unpad")
    g.block("backward", "pad", GROUP, (dao,), (drows_out,), [Op("index", (dao,), (drows_out,))])
    rows = tuple(f"{t}.unpad" for t in qkv)
    drows = tuple(g.like(f"d.{r}", r) for r in rows)
    g.boundary("backward", "attention", (drows_out,) + rows + ("ao.unpad",), drows)
    grads = tuple(g.like(f"d.attn.{n}", t) for n, t in zip("qkv", qkv))
    g.block("backward", "unpad", GROUP, drows, grads,
            [op for dr, gr in zip(drows, grads) for op in (Op("zeros", (), (gr,)),
                                                           Op("scatter_", (dr,), (gr,), strided=True))])
    return grads
