"""ModelSpec: the architecture of a decoder-only transformer (dense, MoE, MLA) and its parameter counts.

Notation (formulas.md §0): h hidden size, L layers, n_h query heads, n_kv KV heads, d_h head dim,
q = n_h·d_h, kv = n_kv·d_h, f FFN size, V vocabulary, E routed experts, k experts per token,
f_e expert FFN size, f_sh total shared-expert FFN size, η = 1 (RMSNorm) or 2 (LayerNorm with bias).

Every count here must equal `sum(p.numel())` of the same config instantiated with Hugging Face
`transformers` (tests/test_model.py checks it on the meta device for every supported architecture).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..errors import InputError

MLP_KINDS = ("swiglu", "geglu", "gelu", "squared-relu", "clamped-swiglu")
NORM_KINDS = ("rmsnorm", "layernorm")
# The largest accepted value of any integer field (a size, a count of layers, heads or experts) and of
# the total parameter count: far beyond any real model (vocabularies ~2**18, hidden sizes ~2**14,
# 10**12 parameters), yet low enough that every count stays exact in int64 and float64 (issue 24:
# hidden_size = 1e30 raised OverflowError, num_hidden_layers = 2**63 gave 128128 parameters).
MAX_FIELD = 2**24
MAX_LAYERS = 2**20  # a sweep of 2**20 layers takes 15 s on 8 GPUs, one of 2**24 minutes (its tables grow with L)
MAX_PARAMS = 2**53


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer. Sizes are element counts; see the module notation table."""

    name: str = "custom"
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int | None = None  # None: = num_heads (MHA); 1: MQA
    head_dim: int | None = None  # None: hidden_size // num_heads
    ffn_hidden_size: int
    vocab_size: int
    mlp: str = "swiglu"  # swiglu / geglu / clamped-swiglu (GPT-OSS: clamped gate and up, g·σ(1.702g)·(u + 1)): 3
    # matrices (gate, up, down); gelu, squared-relu (Nemotron-4: relu(x)²): 2 matrices
    norm: str = "rmsnorm"  # rmsnorm: weight only; layernorm: weight + bias
    norms_per_layer: int = 2  # Gemma-2 has 4 (pre/post attention and feed-forward)
    qkv_bias: bool = False  # Qwen2: bias on Q, K, V only
    out_bias: bool = False  # bias on the attention output projection
    mlp_bias: bool = False  # biases on the MLP projections
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on Q and K (2·d_h parameters per layer)
    tie_word_embeddings: bool = False
    learned_position_embeddings: int = 0  # GPT-2: rows of the learned position table (0: RoPE)
    embedding_norm: bool = False  # BLOOM: a norm on the word embeddings (word_embeddings_layernorm)
    # MoE (num_experts = 0: dense)
    num_experts: int = 0
    experts_per_token: int = 0
    moe_ffn_hidden_size: int = 0
    shared_expert_ffn_hidden_size: int = 0  # total over all shared experts
    shared_expert_gate: bool = False  # Qwen2-MoE: a sigmoid gate Linear(h, 1) on the shared expert
    first_k_dense: int = 0  # DeepSeek first_k_dense_replace: the first k layers keep a dense FFN
    moe_layer_freq: int = 1  # layer i (0-based, i >= first_k_dense) is MoE iff (i + 1) % freq == 0
    dense_layers: tuple[int, ...] = ()  # extra layers forced dense (Qwen mlp_only_layers)
    expert_bias: bool = False  # GPT-OSS: biases on every expert's projections and on the router
    # group-limited routing (DeepSeek-V3 §2.1.2, HF n_group / topk_group): the experts form router_groups contiguous
    # groups and a token's experts come from router_group_topk of them (0: no limit); it sets how many nodes a token
    # is sent to (cost/ep_dispatch.py)
    router_groups: int = 1
    router_group_topk: int = 0
    # MLA (DeepSeek-V2/V3); kv_lora_rank = 0: ordinary attention
    q_lora_rank: int = 0  # 0: queries projected directly from h
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # multi-token prediction (DeepSeek-V3 §2.2; Megatron-Core --mtp-num-layers; HF num_nextn_predict_layers): D
    # modules on the last pipeline stage, each a transformer layer of the last layer's kind, a projection 2h -> h of
    # the normed embedding and hidden state (2 norms), a final norm and the shared embedding and LM head
    mtp_layers: int = 0
    # sliding-window attention (Mistral, Gemma-2, GPT-OSS; HF sliding_window, layer_types): in the layers listed
    # (0-based) a query attends to the sliding_window most recent keys, itself included (HF: kv_idx > q_idx − w)
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] = ()
    attention_sinks: bool = False  # GPT-OSS: one learned softmax logit per query head and layer (HF `sinks`)
    source: str = ""
    # The largest dropout probability of the config it was read from (spec/hf.py); the scenario's
    # default for Training.dropout (spec/scenario.py). Not part of the architecture: no count uses it.
    config_dropout: float = 0.0

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("name", "source", "mlp", "norm", "dense_layers", "sliding_layers", "config_dropout") \
                    or isinstance(v, bool) \
                    or v is None:
                continue
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise InputError(f"model {f.name} must be an integer, got {v!r}")
            must_be_positive = f.name in ("hidden_size", "num_layers", "num_heads", "ffn_hidden_size",
                                          "vocab_size", "norms_per_layer", "moe_layer_freq")
            if v < 0 or (must_be_positive and v == 0):
                raise InputError(f"model {f.name} must be {'> 0' if must_be_positive else '>= 0'}, got {v!r}")
            if v > MAX_FIELD:
                raise InputError(f"model {f.name} must be <= {MAX_FIELD} (2**24), got {v!r}")
            if f.name == "num_layers" and v > MAX_LAYERS:  # a sweep's pipeline tables grow with the layers
                raise InputError(f"model num_layers (num_hidden_layers) must be <= {MAX_LAYERS} (2**20), got {v!r}")
        p = self.config_dropout
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise InputError(f"model config_dropout must be a probability from 0 to 1, got {p!r}")
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        if self.head_dim is None:
            if self.hidden_size % self.num_heads:
                raise InputError(f"hidden_size({self.hidden_size}) is not divisible by num_attention_heads"
                                 f"({self.num_heads}); give head_dim explicitly")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise InputError(f"num_attention_heads({self.num_heads}) must be a multiple of "
                             f"num_key_value_heads({self.num_kv_heads})")
        if self.mlp not in MLP_KINDS:
            raise InputError(f"model mlp must be one of {', '.join(MLP_KINDS)}, got {self.mlp!r}")
        if self.norm not in NORM_KINDS:
            raise InputError(f"model norm must be one of {', '.join(NORM_KINDS)}, got {self.norm!r}")
        if self.num_experts:
            if not 1 <= self.experts_per_token <= self.num_experts:
                raise InputError(f"num_experts_per_tok({self.experts_per_token}) must be in 1..num_experts"
                                 f"({self.num_experts})")
            if self.moe_ffn_hidden_size <= 0:
                raise InputError("an MoE model needs moe_intermediate_size > 0")
            g, m, k = self.router_groups, self.router_group_topk, self.experts_per_token
            if g < 1 or self.num_experts % g or not 0 <= m <= g or (m and k > m * self.num_experts // g):
                raise InputError(f"n_group({g}) must divide the experts ({self.num_experts}) and topk_group({m}) be "
                                 f"in 0..n_group, its groups holding at least num_experts_per_tok({k})")
            if self.first_k_dense > self.num_layers:
                raise InputError(f"first_k_dense_replace({self.first_k_dense}) > num_hidden_layers({self.num_layers})")
            if not self.moe_layer_mask.any():  # (experts in no layer: an expert-parallel layout would mean nothing)
                raise InputError(f"num_experts({self.num_experts}) in no layer: decoder_sparse_step / moe_layer_freq "
                                 f"({self.moe_layer_freq}), first_k_dense_replace ({self.first_k_dense}) and "
                                 f"mlp_only_layers leave none of the {self.num_layers} layers an MoE layer")
        if self.sliding_layers and not self.sliding_window:
            raise InputError("sliding-window layers (layer_types 'sliding_attention') need sliding_window > 0")
        if any(not 0 <= i < self.num_layers for i in self.sliding_layers):
            raise InputError(f"sliding-window layers {list(self.sliding_layers)} must be in 0..num_hidden_layers-1 "
                             f"({self.num_layers - 1})")
        if self.kv_lora_rank and not (self.qk_nope_head_dim + self.qk_rope_head_dim and self.v_head_dim):
            raise InputError("an MLA model (kv_lora_rank > 0) needs qk_nope_head_dim, qk_rope_head_dim, v_head_dim")
        self._check_size()

    def _check_size(self) -> None:
        """InputError when the parameter count (in exact integers, before any int64 array) passes MAX_PARAMS."""
        common = self.attention_params() + self.norms_per_layer * self.norm_params
        ffn = max(self.ffn_params(), self.moe_ffn_params() if self.is_moe else 0)
        n = int(self.num_layers) * int(common + ffn) + self.embedding_params() + self.head_params()
        if n > MAX_PARAMS:
            raise InputError(f"model {self.name!r} has {n:.3g} parameters, more than parasim counts exactly "
                             f"(2**53); check its sizes")

    # ---- derived sizes -------------------------------------------------------------------------
    def local_experts(self, ep):
        """Routed experts per rank of an expert-parallel group of `ep` (scalar or array): E / ep; 0 for a dense
        model. The one rule of how many experts a rank holds (flops.moe_ops, the launch count, the chunk sorts)."""
        return self.num_experts / np.asarray(ep, dtype=float) if self.is_moe else 0.0 * np.asarray(ep, dtype=float)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Head dim of Q and K, the one attention kernels run at: d_h (MLA: d_nope + d_rope)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def q_size(self) -> int:
        """q = n_h·d_h, the query projection width (MLA: n_h·(d_nope + d_rope))."""
        return self.num_heads * self.qk_head_dim

    @property
    def kv_size(self) -> int:
        """kv = n_kv·d_h, one of the K or V projection widths (MLA: width of V, n_h·d_v)."""
        if self.is_mla:
            return self.num_heads * self.v_head_dim
        return self.num_kv_heads * self.head_dim

    @property
    def glu_matrices(self) -> int:
        """c_f: matrices per FFN (3 for the gated units SwiGLU, GeGLU and GPT-OSS's clamped SwiGLU, 2 for GeLU and
        squared ReLU)."""
        return 3 if self.mlp in ("swiglu", "geglu", "clamped-swiglu") else 2

    @property
    def norm_params(self) -> int:
        """η·h: parameters of one norm over h (η = 1 RMSNorm, 2 LayerNorm)."""
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    @property
    def moe_layer_mask(self) -> np.ndarray:
        """Boolean array of length L: True where layer i has a routed-expert FFN.

        Rule (HF Qwen2-MoE `decoder_sparse_step`, DeepSeek `first_k_dense_replace`): MoE iff
        E > 0, i >= first_k_dense, (i + 1) % moe_layer_freq == 0 and i not in dense_layers.
        """
        i = np.arange(self.num_layers)
        mask = (i >= self.first_k_dense) & ((i + 1) % self.moe_layer_freq == 0) & (self.num_experts > 0)
        if self.dense_layers:
            mask &= ~np.isin(i, self.dense_layers)
        return mask

    @property
    def num_moe_layers(self) -> int:
        return int(self.moe_layer_mask.sum())

    @property
    def window_share(self) -> float:
        """σ: the share of the layers whose attention is windowed (0 without a window). Costs read per layer kind
        (dense, MoE) take the mean over the model's layers: a stage of L/p layers differs from it by at most one
        layer's attention."""
        return len(self.sliding_layers) / self.num_layers if self.sliding_window else 0.0

    def attended_keys(self, context):
        """Keys per query averaged over the layers when a query sees `context` keys without a window (the decode
        step's KV read, the cached tokens per layer): (1 − σ)·c + σ·min(c, w)."""
        c = np.asarray(context, dtype=float)
        if not self.window_share:
            return c
        return (1.0 - self.window_share) * c + self.window_share * np.minimum(c, self.sliding_window)

    # ---- parameter counts (formulas.md §1) ------------------------------------------------------
    def attention_params(self) -> int:
        """Attention parameters of one layer.

        MHA/GQA (formulas.md §1.2): 2·h·d_h·(n_h + n_kv) (+ q + 2kv QKV bias, + h output bias).
        MLA (formulas.md §1.4, HF DeepseekV3Attention): r_q·(h + n_h(d_n + d_r) + 1)
        + (h + η... ) → with RMSNorm latent norms: q_a (h·r_q) + q_a_norm (r_q) + q_b (r_q·n_h(d_n+d_r))
        + kv_a (h·(r_kv + d_r)) + kv_a_norm (r_kv) + kv_b (r_kv·n_h(d_n + d_v)) + o (n_h·d_v·h);
        attention_bias puts biases on the down projections q_a (r_q) and kv_a (r_kv + d_r) and on o (h).
        """
        h = self.hidden_size
        if self.is_mla:
            nh = self.num_heads
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * nh * qk
            else:
                q = h * nh * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank \
                + self.kv_lora_rank * nh * (self.qk_nope_head_dim + self.v_head_dim)
            o = nh * self.v_head_dim * h
            bias = (self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim if self.qkv_bias else 0) \
                + (h if self.out_bias else 0)
            return q + kv + o + bias
        q, kv = self.q_size, self.kv_size
        p = h * (q + 2 * kv) + q * h
        if self.qkv_bias:
            p += q + 2 * kv
        if self.out_bias:
            p += h
        if self.qk_norm:
            p += 2 * self.head_dim
        if self.attention_sinks:
            p += self.num_heads
        return p

    def ffn_params(self, ffn_hidden_size: int | None = None) -> int:
        """One dense FFN: c_f·h·f (+ biases: c_f−1 of size f and one of size h). formulas.md §1.2."""
        f = self.ffn_hidden_size if ffn_hidden_size is None else ffn_hidden_size
        p = self.glu_matrices * self.hidden_size * f
        if self.mlp_bias:
            p += (self.glu_matrices - 1) * f + self.hidden_size
        return p

    def expert_params(self) -> int:
        """One routed expert: c_f·h·f_e (+ its biases with expert_bias: (c_f−1)·f_e + h, GPT-OSS's
        gate_up_proj_bias and down_proj_bias)."""
        p = self.glu_matrices * self.hidden_size * self.moe_ffn_hidden_size
        if self.expert_bias:
            p += (self.glu_matrices - 1) * self.moe_ffn_hidden_size + self.hidden_size
        return p

    @property
    def router_params(self) -> int:
        """The router of one MoE layer: h·E (+ E bias with expert_bias, + h for Qwen2-MoE's shared-expert gate)."""
        return self.num_experts * (self.hidden_size + (1 if self.expert_bias else 0)) \
            + (self.hidden_size if self.shared_expert_gate else 0)

    def moe_ffn_params(self, active: bool = False) -> int:
        """One MoE FFN (formulas.md §1.3): E·c_f·h·f_e + c_f·h·f_sh + h·E (router) [+ h shared gate].

        active=True counts k routed experts instead of E (parameters touched per token).
        """
        n = self.experts_per_token if active else self.num_experts
        p = n * self.expert_params() + self.router_params
        if self.shared_expert_ffn_hidden_size:
            p += self.glu_matrices * self.hidden_size * self.shared_expert_ffn_hidden_size
        return p

    def layer_params(self, active: bool = False) -> np.ndarray:
        """Parameters of each layer (array of length L): attention + FFN (dense or MoE) + norms."""
        common = self.attention_params() + self.norms_per_layer * self.norm_params
        dense = common + self.ffn_params()
        moe = common + (self.moe_ffn_params(active) if self.is_moe else 0)
        return np.where(self.moe_layer_mask, moe, dense).astype(np.int64)

    def embedding_params(self) -> int:
        """Input embedding V·h (+ learned positions P·h, + the embedding norm's η·h: BLOOM)."""
        return (self.vocab_size * self.hidden_size + self.learned_position_embeddings * self.hidden_size
                + (self.norm_params if self.embedding_norm else 0))

    def head_params(self) -> int:
        """Final norm (η·h) plus the untied LM head (V·h; 0 when tied to the embedding)."""
        return self.norm_params + (0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size)

    def total_params(self) -> int:
        """N = Σ layers + embedding + final norm + untied head (formulas.md §1.2, §1.3)."""
        return int(self.layer_params().sum()) + self.embedding_params() + self.head_params()

    def active_params(self) -> int:
        """Parameters used per token: MoE layers count k of E routed experts (formulas.md §1.3)."""
        return int(self.layer_params(active=True).sum()) + self.embedding_params() + self.head_params()

    def non_embedding_params(self) -> int:
        """N without the input embedding and position table (Kaplan 2020 §2.1 convention)."""
        return self.total_params() - self.embedding_params()

    @property
    def mtp_layer_is_moe(self) -> bool:
        """An MTP module's transformer layer has routed experts where the model's last layer has (Megatron-Core
        num_floating_point_operations: `last_layer_is_moe`)."""
        return bool(self.num_layers and self.moe_layer_mask[-1])

    def mtp_module_split(self) -> tuple[int, int, int]:
        """(TP-sharded, replicated, routed-expert) parameters of one MTP module: its transformer layer (by class,
        spec/placement.py layer_param_split) plus the projection 2h·h (column-parallel, Megatron eh_proj) and
        three norms (enorm, hnorm, final_layernorm); the embedding and the LM head are the model's own."""
        from .placement import layer_param_split

        split = layer_param_split(self)["moe" if self.mtp_layer_is_moe else "dense"]
        h = self.hidden_size
        return int(split[0]) + 2 * h * h, int(split[1]) + 3 * self.norm_params, int(split[2])

    def mtp_params(self) -> int:
        """Parameters of the D multi-token-prediction modules (0 without them)."""
        return self.mtp_layers * sum(self.mtp_module_split())

    def summary(self) -> dict:
        """The "model" object of the JSON outputs (estimate, memory): name, params, active_params, and the
        `source` of a model read from the Hugging Face Hub ("hf-hub:org/name@<commit>", spec/hub.py)."""
        d = {"name": self.name, "params": self.total_params(), "active_params": self.active_params()}
        if self.mtp_layers:
            d["mtp_params"] = self.mtp_params()
        if self.source.startswith("hf-hub:"):
            d["source"] = self.source
        return d

    def with_(self, **changes) -> "ModelSpec":
        """A copy with some fields changed (validated again)."""
        from dataclasses import replace

        return replace(self, **changes)


def stage_layer_counts(num_layers: int, pp: int, layers_per_stage: tuple[int, ...] | None = None) -> np.ndarray:
    """Layers held by each pipeline stage: an even split L/p, or an explicit uneven split.

    Raises InputError when the split does not add up to L.
    """
    if layers_per_stage:
        if len(layers_per_stage) != pp:
            raise InputError(f"layers_per_stage has {len(layers_per_stage)} entries, expected pp({pp})")
        if sum(layers_per_stage) != num_layers:
            raise InputError(f"layers_per_stage sums to {sum(layers_per_stage)} != num_hidden_layers({num_layers})")
        if min(layers_per_stage) < 0:
            raise InputError(f"layers_per_stage must be >= 0, got {layers_per_stage}")
        return np.asarray(layers_per_stage, dtype=np.int64)
    if num_layers % pp:
        raise InputError(f"num_hidden_layers({num_layers}) is not divisible by pp({pp})")
    return np.full(pp, num_layers // pp, dtype=np.int64)
