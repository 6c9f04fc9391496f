"""Which elementwise ops one transformer layer runs under a software stack, and the bytes they move.

`layer_graph` lists a layer's forward and backward as a `Graph` (elementwise_ops.py): the GEMMs and the
attention kernel as boundaries, and between them the elementwise blocks of the stack's code
(Stack.elementwise, `SETTINGS`):

| block | fused (megatron, deepspeed) | eager (torchtitan) | hf (transformers; fsdp, hf) | packed |
|---|---|---|---|---|
| RMSNorm | TE / apex one kernel | torch `_fused_rms_norm` (bwd: 2 kernels) | LlamaRMSNorm, fp32 op by op | as eager |
| LayerNorm | TE / apex one kernel | torch `native_layer_norm` | torch `native_layer_norm` | as eager |
| RoPE | TE fused_rope | complex multiply in fp32 (ComplexRoPE) | rotate_half, activation dtype | as hf |
| FFN activation | bias_swiglu / bias_gelu | silu(w1 x) · w3 x | act(gate) · up | silu(g) · u, chunks |
| Q, K, V | one fused GEMM | FusedQKVLinear: copies; backward cat | 3 GEMMs: backward adds | views; bwd cat, copy |
| gate, up | one fused GEMM | two GEMMs: backward adds input gradients | the same | one GEMM; bwd cat |
| softmax (no flash) | FusedScaleMaskSoftmax | div, masked_fill, softmax; K/V repeated | ·scale, + mask, fp32 | eager |

"packed" is plain PyTorch with packed projections: one QKV GEMM whose output is viewed as heads (no copies) and
one gate/up GEMM that is `chunk`ed, as validation/train_step.py (the lent H100's harness), Phi-3's modelling code
and nanotron write them; the ops on those views, and every op with a broadcast operand, run torch's generic
elementwise loop (`Op.strided`, elementwise_ops.py).

Around a FlashAttention call, a stack with `attention_padding = "unpad"` (flash-attn's bert_padding: llm-foundry's
flash path) gathers q, k, v into rows and pads the output back, with the backward's zero-fills and scatters
(padding_ops.py).

Residual adds and dropout are one kernel each in every stack; the MoE router, dispatch and combine keep one
kernel each (not yet per stack), and the fused setting's all-to-all dispatcher re-sorts the routed copies by local
expert around the experts (Megatron-Core's chunk sorts); RoPE runs only on models without a learned position table.

The one rule (`region_bytes`): a kernel reads every tensor its ops read that they do not write, and writes
every tensor they write that something outside it reads (or nothing reads). Applied per aten op (eager
settings: each op is a kernel), per block (fused: each block is one kernel over its interface) or per
torch.compile region (`Stack.compiled`: Inductor fuses each maximal run of elementwise blocks between two
GEMMs or attention calls into one kernel, so a region reads its inputs and writes its outputs; the
region's forward outputs include what the backward reads; regions do not span a change of FFN / core-
attention membership; torchtitan compiles each TransformerBlock on its own, so no region spans layers).
memory_ops.py `memory_op_rows` turns a graph into `memory_ops.MemoryOp`s, per group (eager, fused) or per region
(compiled), timed by compute.py with the profile's memory efficiency table like every memory-bound op.
"""
from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

from .elementwise_ops import (Graph, Lin, Op, accumulate, act_backward, act_forward, add_forward, copies,
                              dropout_backward, dropout_forward, moe_backward, moe_forward, norm_backward,
                              norm_forward, softmax_backward, softmax_forward, sort_chunks)
from .gpt_oss_ops import clamped_swiglu_backward, clamped_swiglu_forward, expert_bias_backward, expert_bias_forward
from .layer_sizes import layer_dims, layer_sizes  # noqa: F401  (layer_sizes: part of this module's interface)
from .padding_ops import unpad_attention_backward, unpad_attention_forward
from .rope_ops import rope_backward, rope_forward, rope_tables

__all__ = ["SETTINGS", "layer_graph", "cached_graph", "layer_sizes", "region_bytes", "saved_bytes", "block_kernels",
           "compiled_regions", "kernel_counts"]

SETTINGS = {  # Stack.elementwise -> the implementation of each block (elementwise_ops.py)
    "fused": dict(norm="te", rope="te", act="fused", softmax="fused", qkv="fused", adds=False, repeat=False),
    "eager": dict(norm="torch", rope="complex", act="eager", softmax="eager", qkv="split", adds=True, repeat=True),
    "hf": dict(norm="hf", rope="rotate_half", act="eager", softmax="hf", qkv="separate", adds=True, repeat=True),
    "packed": dict(norm="torch", rope="rotate_half_sliced", act="chunked", softmax="eager", qkv="views", adds=True,
                   repeat=True),
}


def layer_graph(model, training, *, moe: bool = False, sequence_parallel: bool = False,
                setting: str | None = None) -> Graph:
    """One layer's forward and backward blocks for one microbatch on one rank under `setting` (default: the
    training's stack's `elementwise`), its tensor sizes as `Lin` combinations of `layer_sizes`' names. The input
    is `x`, the output `out`, the incoming gradient `d.out`."""
    return cached_graph(model, setting or training.stack.elementwise, float(training.activation_bytes),
                        bool(training.dropout), bool(training.flash_attention), moe, bool(sequence_parallel),
                        training.stack.attention_padding, training.stack.moe_dispatcher)


@lru_cache(maxsize=256)
def cached_graph(model, setting, e, dropout, flash, moe, sequence_parallel, padding="none",
                 dispatcher="alltoall") -> Graph:
    """`layer_graph` from hashable arguments (activation bytes e, training.dropout and flash_attention, the
    stack's attention_padding and moe_dispatcher), built once per model and setting."""
    s = dict(SETTINGS[setting])
    if model.norm != "rmsnorm" and s["norm"] == "hf":
        s["norm"] = "torch"  # transformers' LayerNorm models call nn.LayerNorm
    d = layer_dims(model, e, moe=moe, sequence_parallel=sequence_parallel)
    tr = SimpleNamespace(dropout=dropout, flash_attention=flash, unpad=flash and padding == "unpad",
                         sort_chunks=dispatcher == "alltoall" and s["act"] == "fused")
    g = Graph(e)
    g.t("x", d.Th)
    g.t("d.out", d.Th)
    _forward(g, model, tr, s, d, moe)
    _backward(g, model, tr, s, d, moe)
    return g


def _forward(g, m, tr, s, d, moe) -> None:
    n = m.norms_per_layer
    a_in = norm_forward(g, s["norm"], "n1", "x") if n >= 1 else "x"
    ao = _attention_forward(g, m, tr, s, d, a_in)
    o = g.t("o", d.Th)
    g.boundary("forward", "out_proj", (ao,), (o,))
    if n >= 3:
        o = norm_forward(g, s["norm"], "n3", o)
    if tr.dropout:
        o = dropout_forward(g, "drop1", o)
    h = add_forward(g, "res1", "x", o, "h")
    f = _ffn_forward(g, m, s, d, norm_forward(g, s["norm"], "n2", h) if n >= 2 else h, moe, tr.sort_chunks)
    if n >= 4:
        f = norm_forward(g, s["norm"], "n4", f)
    if tr.dropout:
        f = dropout_forward(g, "drop2", f)
    add_forward(g, "res2", h, f, "out")


def _backward(g, m, tr, s, d, moe) -> None:
    n = m.norms_per_layer
    dy = dropout_backward(g, "drop2", "d.out") if tr.dropout else "d.out"
    if n >= 4:
        dy = norm_backward(g, s["norm"], "n4", dy)
    df = _ffn_backward(g, m, s, d, dy, moe, tr.sort_chunks)
    if n >= 2:
        df = norm_backward(g, s["norm"], "n2", df)
    accumulate(g, "res2", (df, "d.out"), "d.h")
    do = dropout_backward(g, "drop1", "d.h") if tr.dropout else "d.h"
    if n >= 3:
        do = norm_backward(g, s["norm"], "n3", do)
    dao = g.like("d.ao", "ao")
    g.boundary("backward", "out_proj", (do,), (dao,))
    da = _attention_backward(g, m, tr, s, d, dao)
    if n >= 1:
        da = norm_backward(g, s["norm"], "n1", da)
    accumulate(g, "res1", (da, "d.h"), "d.x")


def _attention_forward(g, m, tr, s, d, x) -> str:
    q, k, v = _projections_forward(g, m, s, d, x)
    if m.qk_norm:
        q = norm_forward(g, s["norm"], "qn", q, group="qk_norm")
        k = norm_forward(g, s["norm"], "kn", k, group="qk_norm")
    if d.rope:
        table = g.inputs["rope.table"] = rope_tables(g, s["rope"], d.T, d.pos, d.rope_dim)
        q, k = rope_forward(g, s["rope"], "rq", q, table), rope_forward(g, s["rope"], "rk", k, table)
    g.inputs.update({"attn.q": q, "attn.k": k, "attn.v": v})
    ao = g.t("ao", d.q)
    if tr.unpad:
        return unpad_attention_forward(g, (q, k, v), ao)
    if tr.flash_attention:
        g.boundary("forward", "attention", (q, k, v), (ao,))
        return ao
    if s["repeat"] and not m.is_mla and m.num_kv_heads < m.num_heads:
        k, v = g.inputs["attn.krep"], g.inputs["attn.vrep"] = g.t("k.rep", d.q), g.t("v.rep", d.q)
        copies(g, "forward", "repeat_kv", (g.inputs["attn.k"], g.inputs["attn.v"]), (k, v), "repeat_kv")
    S = g.t("S", d.S)
    g.boundary("forward", "qk", (q, k), (S,))
    P = softmax_forward(g, s["softmax"], S, d.mask)
    if tr.dropout:
        P = dropout_forward(g, "adrop", P, group="softmax", core=True)
    g.boundary("forward", "pv", (P, v), (ao,))
    return ao


def _attention_backward(g, m, tr, s, d, dao) -> str:
    q, k, v = (g.inputs[f"attn.{t}"] for t in "qkv")  # what the attention (or QKᵀ and P·V) read
    if tr.unpad:
        grads = unpad_attention_backward(g, dao, (q, k, v))
    elif tr.flash_attention:
        grads = (g.like("d.attn.q", q), g.like("d.attn.k", k), g.like("d.attn.v", v))
        g.boundary("backward", "attention", (dao, q, k, v, "ao"), grads)
    else:
        grads = _scores_backward(g, tr, s, dao, q, k, v)
    dq, dk, dv = grads
    if d.rope:
        table, clone = g.inputs["rope.table"], s["qkv"] != "views"
        dq = rope_backward(g, s["rope"], "rq", dq, table, clone=clone)
        dk = rope_backward(g, s["rope"], "rk", dk, table, clone=clone)
    if m.qk_norm:
        dq = norm_backward(g, s["norm"], "qn", dq, group="qk_norm")
        dk = norm_backward(g, s["norm"], "kn", dk, group="qk_norm")
    return _projections_backward(g, m, s, d, dq, dk, dv)


def _scores_backward(g, tr, s, dao, q, k, v) -> tuple:
    """Backward of QKᵀ, the softmax (and attention dropout) and P·V without FlashAttention."""
    kk, vv = (g.inputs["attn.krep"], g.inputs["attn.vrep"]) if "attn.krep" in g.inputs else (k, v)
    dP, dvv = g.like("d.P", "S"), g.like("d.attn.vv", vv)
    g.boundary("backward", "pv", (dao, "adrop.y" if tr.dropout else "sm.P", vv), (dP, dvv))
    if tr.dropout:
        dP = dropout_backward(g, "adrop", dP, group="softmax", core=True)
    dS = softmax_backward(g, s["softmax"], dP)
    dq, dkk = g.like("d.attn.q", q), g.like("d.attn.kk", kk)
    g.boundary("backward", "qk", (dS, q, kk), (dq, dkk))
    if kk == k:
        return dq, dkk, dvv
    dk, dv = g.like("d.attn.k", k), g.like("d.attn.v", v)
    copies(g, "backward", "repeat_kv", (dkk, dvv), (dk, dv), "repeat_kv", op="sum", strided=False)
    return dq, dk, dv


def _projections_forward(g, m, s, d, x) -> tuple:
    """The Q, K, V projections (boundaries) and, per setting, the copies or norms between them."""
    if m.is_mla:
        lat = [g.t(p + ".in", n) for p, n in (("lq", d.lat_q), ("lkv", d.lat_kv)) if m.q_lora_rank or p == "lkv"]
        g.boundary("forward", "mla_down", (x,), tuple(lat))
        lat = [norm_forward(g, s["norm"], t[:-3], t, group="latent_norms") for t in lat]
        q, k, v = g.t("q", d.rope_q), g.t("k", d.rope_k), g.t("v", d.kv)
        g.boundary("forward", "mla_up", tuple(lat), (q, k, v))
        return q, k, v
    names = ("q", "k", "v") if s["qkv"] != "split" else ("qkv.q", "qkv.k", "qkv.v")  # views: q, k, v as they are
    qkv = (g.t(names[0], d.q), g.t(names[1], d.kv), g.t(names[2], d.kv))
    g.boundary("forward", "qkv_proj", (x,), qkv)
    if s["qkv"] != "split":
        return qkv
    out = (g.like("q", qkv[0]), g.like("k", qkv[1]), g.like("v", qkv[2]))
    copies(g, "forward", "qkv_split", qkv, out, "qkv_layout")
    return out


def _projections_backward(g, m, s, d, dq, dk, dv) -> str:
    """Gradient of the projections' input (the attention norm's output)."""
    if m.is_mla:
        lat = [p for p in ("lq", "lkv") if p in g.inputs]
        dl = tuple(g.like(f"d.{p}.y", g.inputs[p]) for p in lat)
        g.boundary("backward", "mla_up", (dq, dk, dv), dl)
        dl = tuple(norm_backward(g, s["norm"], p, t, group="latent_norms") for p, t in zip(lat, dl))
        return _input_grad(g, s, d, "mla_down", dl, 2 if s["adds"] else 1)
    if s["qkv"] == "split":
        dqkv = g.t("d.qkv", d.q + 2 * d.kv)
        g.block("backward", "qkv_split", "qkv_layout", (dq, dk, dv), (dqkv,), [Op("cat", (dq, dk, dv), (dqkv,))])
        return _input_grad(g, s, d, "qkv_proj", (dqkv,), 1)
    if s["qkv"] == "views":  # split's backward cats the heads' gradients, the view's copies them to [b·s, ·]
        heads, dqkv = g.t("d.qkv.heads", d.q + 2 * d.kv), g.t("d.qkv", d.q + 2 * d.kv)
        g.block("backward", "qkv_split", "qkv_layout", (dq, dk, dv), (dqkv,),
                [Op("cat", (dq, dk, dv), (heads,), strided=True), Op("clone", (heads,), (dqkv,), strided=True)])
        return _input_grad(g, s, d, "qkv_proj", (dqkv,), 1)
    return _input_grad(g, s, d, "qkv_proj", (dq, dk, dv), 3 if s["qkv"] == "separate" else 1)


def _input_grad(g, s, d, name, grads, gemms) -> str:
    """The input gradient of `gemms` GEMMs that read one input: each GEMM's dgrad writes its own, added
    (`accumulate`, group input_grad_adds) when there are several; sequence parallelism reduce-scatters it."""
    out = g.t(f"d.{name}.in", d.Tx)
    if gemms == 1:
        g.boundary("backward", name, grads, (out,))
    else:
        parts = tuple(g.t(f"{out}~{i}", d.Tx) for i in range(gemms))
        for i, p in enumerate(parts):
            g.boundary("backward", f"{name}.{i}", grads if len(grads) < gemms else (grads[i],), (p,))
        accumulate(g, name, parts, out, group="input_grad_adds")
    if d.sp:
        g.boundary("backward", f"{name}.reduce_scatter", (out,), (g.t(out + ".sp", d.Th),))
        out += ".sp"
    return out


def _ffn_forward(g, m, s, d, x, moe, sort=False) -> str:
    glu = m.glu_matrices == 3
    ins = tuple(g.t(n, d.f) for n in (("up.g", "up.u") if glu else ("up.x",)))
    act = (lambda: clamped_swiglu_forward(g, s["act"], ins)) if m.mlp == "clamped-swiglu" else \
        (lambda: act_forward(g, s["act"], glu, ins, kind=m.mlp))
    if not moe:
        g.boundary("forward", "mlp_up", (x,), ins)
        g.boundary("forward", "mlp_down", (act(),), (g.t("f", d.Th),))
        return "f"
    g.boundary("forward", "router", (x,), (g.t("moe.logits", d.scores, 4.0),))
    xp = moe_forward(g, d.Tx, d.routed, d.scores)
    if sort:
        sort_chunks(g, "forward", "moe.sort", d.sorted)
    g.boundary("forward", "experts_up", (xp, x), ins)
    g.boundary("forward", "experts_down", (act(),), (g.t("moe.out", d.routed),))
    out = expert_bias_forward(g, "moe.out") if _expert_bias(m, s) else "moe.out"
    if sort:
        sort_chunks(g, "forward", "moe.restore", d.sorted)
    g.block("forward", "combine", "moe_permute", (out,), (g.t("f", d.Tx),), ffn=True)
    return "f"


def _expert_bias(m, s) -> bool:
    """The routed experts' output bias as its own ops: Megatron-core's eager per-expert adds (gpt_oss_ops.py) in the
    fused setting's stacks (megatron; deepspeed, whose Megatron-DeepSpeed MoE code is not modelled apart); the
    other stacks' MoE blocks are not yet per stack (module docstring)."""
    return m.expert_bias and s["act"] == "fused"


def _ffn_backward(g, m, s, d, df, moe, sort=False) -> str:
    glu = m.glu_matrices == 3
    ins = ("up.g", "up.u") if glu else ("up.x",)
    if moe:
        out = "moe.out.b" if _expert_bias(m, s) else "moe.out"
        deo = g.like("d." + out, out)
        g.block("backward", "combine", "moe_permute", (df,), (deo,), ffn=True)
        if sort:
            sort_chunks(g, "backward", "moe.restore", d.sorted)
        deo = expert_bias_backward(g, deo, "moe.out") if _expert_bias(m, s) else deo
    da = g.like("d.act.a", "act.a")
    g.boundary("backward", "experts_down" if moe else "mlp_down", (deo if moe else df,), (da,))
    dins = (clamped_swiglu_backward(g, s["act"], da, ins) if m.mlp == "clamped-swiglu"
            else act_backward(g, s["act"], glu, da, ins, kind=m.mlp))
    if moe:
        g.boundary("backward", "experts_up", dins, (g.like("d.moe.perm", "moe.perm"),))
        if sort:
            sort_chunks(g, "backward", "moe.sort", d.sorted)
        return moe_backward(g, "d.moe.perm")
    return _input_grad(g, s, d, "mlp_up", dins, len(dins) if s["adds"] else 1)  # a GEMM per input gradient


# ---- bytes -------------------------------------------------------------------------------------------
def _size(g, names) -> Lin:
    return sum((g.size[n][0] * g.size[n][1] for n in names), Lin())


def region_bytes(g: Graph, units, readers: dict | None = None) -> Lin:
    """Bytes one kernel over `units` (ops or blocks) moves: it reads what they read and do not write, and
    writes what they write that a unit outside reads or nothing reads (`readers`: tensor -> ids of the
    blocks reading it; None: every write counts, as for one op or one block, whose outputs are all used)."""
    reads = dict.fromkeys(t for u in units for t in u.reads)
    writes = dict.fromkeys(t for u in units for t in u.writes)
    inside = {id(u) for u in units}
    outs = [t for t in writes if readers is None or not readers.get(t) or readers[t] - inside]
    return _size(g, [t for t in reads if t not in writes]) + _size(g, outs)


def saved_bytes(g: Graph, *, core: bool = True) -> Lin:
    """Bytes the layer keeps for backward under the graph's code: the forward's tensors (the input x included)
    that its backward reads, per aten op where a block runs as ops, else over the block's interface (autograd
    keeps what its backward formulas read). `core` False leaves out what the core-attention blocks write
    (selective recompute re-runs them). GEMM boundaries list what the elementwise code moves, not all their
    saved inputs, so only differences between settings of one model are meaningful (`memory.activations.
    stack_saved_extra_bytes`)."""
    written, read = {"x"}, set()
    for b in g.blocks:
        units = b.ops if b.ops else (b,)
        if b.phase == "forward" and (core or not b.core):
            written.update(t for u in units for t in u.writes)
        elif b.phase != "forward":
            read.update(t for u in units for t in u.reads)
    return _size(g, sorted(written & read))


def block_kernels(b) -> tuple:
    """The kernels of a block outside torch.compile: its eager ops, else the block itself (one kernel)."""
    return b.ops if b.ops else (b,)


def compiled_regions(g: Graph) -> list[list]:
    """Maximal runs of elementwise blocks of one phase between boundaries, split where FFN or core-attention
    membership changes (the module docstring)."""
    regions, cur = [], []
    for b in g.blocks:
        if b.boundary or (cur and (cur[-1].phase, cur[-1].ffn, cur[-1].core) != (b.phase, b.ffn, b.core)):
            regions += [cur] if cur else []
            cur = []
        if not b.boundary:
            cur.append(b)
    return regions + ([cur] if cur else [])


def kernel_counts(g: Graph, compiled: bool = False) -> dict:
    """Kernels the layer launches per phase: {"forward"/"backward": {"elementwise": n, "boundary": n}}
    (boundaries: GEMM and attention calls in the graph; weight-gradient GEMMs are not in it). Eager ops
    count every aten op, including those on small tensors."""
    out = {p: {"elementwise": 0, "boundary": 0} for p in ("forward", "backward")}
    for b in g.blocks:
        if b.boundary:
            out[b.phase]["boundary"] += 1
        elif not compiled:
            out[b.phase]["elementwise"] += sum(u.kernels for u in b.ops) if b.ops else 1
    if compiled:
        for r in compiled_regions(g):
            out[r[0].phase]["elementwise"] += 1
    return out
