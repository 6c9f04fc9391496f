"""Trace any `torch.nn.Module` once, for one input shape and batch: what the cost model needs, as plain data.

One forward and one backward run under three observers (torch is imported inside the functions only):
- `torch.utils.flop_counter.FlopCounterMode` counts FLOPs (its registry: 2·m·n·k per matmul, 2·C_in/g·
  C_out·k_h·k_w·H_out·W_out per image per convolution, convolution backward 2x that when both input and
  weight gradients are asked for); the backward runs under the counter too, so backward FLOPs are
  counted, not assumed to be 2x forward. Its total is kept (`flop_counter_total`) to check the per-op
  records against.
- a `TorchDispatchMode` under the counter (`_Recorder`) records every executed aten op with the layer it
  belongs to, whether it ran in the backward, its FLOPs per call (the counter's registry, so the totals
  agree), the kernels it stands for and the elements it reads and writes (inputs + outputs; view ops
  move nothing).
- `torch.autograd.graph.saved_tensors_hooks` sees every tensor autograd saves for the backward; storages
  are counted once (a view of a saved storage keeps the whole storage alive), parameters not at all
  (they are counted as parameters).

Layers: the module's children in order, or a user-given list of submodule names (disjoint). An op runs
in the layer whose forward was entered last (forward) or whose output gradient arrived last (backward);
ops between layers (a flatten in the parent's forward) go to the layer before them. Parameters outside
every layer form one more layer, "(root)", with no ops.

Float tensors are recorded as element counts and priced at the training's activation dtype by the cost
model (the trace runs in fp32; under autocast the GEMM operands and saved activations are bf16/fp16:
[assumption] every saved float tensor takes the activation dtype); other tensors (int64 max-pool
indices, bool masks) as bytes.

Device: "meta" (default) runs no arithmetic, only shapes, so a ResNet-50 at batch 256 traces in about a
second; "cpu" runs the model for real (models with ops that have no meta kernel); "auto" tries meta,
then cpu.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InputError

__all__ = ["OpRecord", "LayerTrace", "GradReady", "ModelTrace", "trace_module", "DEVICES"]

DEVICES = ("meta", "cpu", "auto")
_NO_DATA = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh",
            "_local_scalar_dense", "resize_", "set_"}  # allocate or look, move no data


@dataclass(frozen=True, kw_only=True)
class OpRecord:
    """One executed aten op: its layer (index into ModelTrace.layers), pass, FLOPs (per call, the
    counter's registry), kernels it stands for (convolution backward: one per gradient asked), elements
    of float tensors and bytes of the others it reads and writes."""

    name: str
    layer: int
    backward: bool
    flops: float
    kernels: int
    float_elements: float
    other_bytes: float


@dataclass(frozen=True, kw_only=True)
class LayerTrace:
    """A top-level layer: its trainable parameters, FLOPs per pass, what autograd saved for the backward
    while it ran (float elements and other bytes, storages counted once), and its output (float elements,
    other bytes: what a pipeline stage boundary after it sends)."""

    name: str
    params: int
    forward_flops: float
    backward_flops: float
    saved_float_elements: float
    saved_other_bytes: float
    output_float_elements: float
    output_other_bytes: float


@dataclass(frozen=True, kw_only=True)
class GradReady:
    """A trainable parameter's gradient is accumulated after backward op `op_index` (its count of backward
    ops run so far): what DDP buckets follow."""

    numel: int
    layer: int
    op_index: int


@dataclass(frozen=True, kw_only=True)
class ModelTrace:
    """What one forward + backward of `model_name` at (batch, *input_shape) did, per layer and per op."""

    model_name: str
    input_shape: tuple[int, ...]
    batch: int
    device: str
    layers: tuple[LayerTrace, ...]
    ops: tuple[OpRecord, ...]
    grad_ready: tuple[GradReady, ...]
    flop_counter_total: float
    flop_counter_forward: float
    buffer_bytes: float = 0.0  # module buffers (BatchNorm running statistics): what DDP broadcasts each forward

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def forward_flops(self) -> float:
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def backward_flops(self) -> float:
        return sum(layer.backward_flops for layer in self.layers)

    @property
    def layer_names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)


def _tensor_sizes(tree, seen=None):
    """(float elements, other bytes) of the tensors in a pytree, each tensor object once."""
    import torch
    from torch.utils._pytree import tree_leaves

    seen = set() if seen is None else seen
    fe, ob = 0.0, 0.0
    for t in tree_leaves(tree):
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen.add(id(t))
            if t.is_floating_point():
                fe += t.numel()
            else:
                ob += t.numel() * t.element_size()
    return fe, ob


def _recorder_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Recorder(TorchDispatchMode):
        """Records every aten op that reaches it (see the module docstring)."""

        def __init__(self, state, registry):
            super().__init__()
            self.state, self.registry = state, registry

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func._overloadpacket.__name__
            if func.is_view or name in _NO_DATA or self.state.paused:
                return out
            flops = self.registry[func._overloadpacket](*args, **kwargs, out_val=out) \
                if func._overloadpacket in self.registry else 0
            kernels = 1
            if name == "convolution_backward":  # output_mask: (input, weight, bias) gradients asked
                kernels = max(1, int(bool(args[-1][0])) + int(bool(args[-1][1])))
            seen = set()
            fi, bi = _tensor_sizes((args, kwargs), seen)
            fo, bo = _tensor_sizes(out, set())  # in place: the output is read and written
            backward = torch._C._current_graph_task_id() != -1
            self.state.ops.append(OpRecord(name=name, layer=self.state.layer, backward=backward,
                                           flops=float(flops), kernels=kernels, float_elements=fi + fo,
                                           other_bytes=bi + bo))
            return out

    return _Recorder


class _State:
    """Mutable bookkeeping of one trace."""

    def __init__(self, n_layers: int):
        self.layer = 0
        self.paused = False  # True while the trace makes its own tensors (the backward's seed)
        self.ops: list[OpRecord] = []
        self.saved = [[0.0, 0.0] for _ in range(n_layers)]
        self.outputs = [[0.0, 0.0] for _ in range(n_layers)]
        self.seen_storages: set[int] = set()
        self.param_storages: set[int] = set()
        self.ready: list[GradReady] = []
        self.hooks: list = []


def _select_layers(module, layers):
    """[(name, submodule)] of the layers: the children, or the given submodule names (disjoint)."""
    if layers is None:
        chosen = list(module.named_children())
        if not chosen:
            return [(type(module).__name__, module)]
        return chosen
    chosen = []
    for name in layers:
        try:
            chosen.append((name, module.get_submodule(name)))
        except AttributeError:
            raise InputError(f"layer {name!r} is not a submodule of {type(module).__name__}") from None
    names = [n for n, _ in chosen]
    for a in names:
        for b in names:
            if a != b and b.startswith(a + "."):
                raise InputError(f"layers must be disjoint: {b!r} is inside {a!r}")
    if len(set(names)) != len(names):
        raise InputError("layers must be distinct")
    return chosen


def _layer_params(module, chosen):
    """Trainable parameter counts per chosen layer (shared parameters once, in the first layer holding
    them) plus those outside every layer; and each parameter's layer index."""
    owner, counts = {}, []
    for i, (_, sub) in enumerate(chosen):
        n = 0
        for p in sub.parameters():
            if p.requires_grad and id(p) not in owner:
                owner[id(p)] = i
                n += p.numel()
        counts.append(n)
    rest = 0
    for p in module.parameters():
        if p.requires_grad and id(p) not in owner:
            owner[id(p)] = len(chosen)
            rest += p.numel()
    return counts, rest, owner


def _install_hooks(state, module, chosen, owner):
    """Forward pre/post hooks on the layers (which layer runs; output sizes; backward layer switches)
    and post-accumulate-grad hooks on the trainable parameters (when each gradient is ready)."""
    import torch
    from torch.utils._pytree import tree_leaves

    def pre(i):
        def hook(mod, args):
            state.layer = i
        return hook

    def post(i):
        def hook(mod, args, out):
            fe, ob = _tensor_sizes(out)
            state.outputs[i] = [fe, ob]
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(lambda g, i=i: setattr(state, "layer", i))
        return hook

    for i, (_, sub) in enumerate(chosen):
        state.hooks.append(sub.register_forward_pre_hook(pre(i)))
        state.hooks.append(sub.register_forward_hook(post(i)))
    for p in module.parameters():
        state.param_storages.add(p.untyped_storage()._cdata)
        if p.requires_grad:
            def ready(param, i=owner[id(p)]):
                n_bwd = sum(1 for o in state.ops if o.backward)
                state.ready.append(GradReady(numel=param.numel(), layer=i, op_index=n_bwd))
            state.hooks.append(p.register_post_accumulate_grad_hook(ready))


def _pack_hook(state):
    """saved_tensors_hooks pack: count a saved activation's storage once, in the layer running."""
    def pack(t):
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in state.seen_storages and key not in state.param_storages:
            state.seen_storages.add(key)
            if t.is_floating_point():
                state.saved[state.layer][0] += storage.nbytes() / t.element_size()
            else:
                state.saved[state.layer][1] += storage.nbytes()
        return t
    return pack


def _run(module, x, state, n_layers):
    """One forward and backward under the counter and the recorder; (counter total, counter forward)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from torch.utils._pytree import tree_leaves

    counter = FlopCounterMode(display=False)
    with _recorder_class()(state, counter.flop_registry), counter:
        with torch.autograd.graph.saved_tensors_hooks(_pack_hook(state), lambda t: t):
            out = module(x)
        forward_total = counter.get_total_flops()
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outs:
            raise InputError("the model's output does not require grad: nothing to train")
        state.paused = True
        seeds = [torch.ones_like(t) for t in outs]  # d(loss)/d(output) = 1: no loss function is traced
        state.paused, state.layer = False, n_layers - 1
        torch.autograd.backward(outs, seeds)
    return float(counter.get_total_flops()), float(forward_total)


def _input(shape, batch, device, input_dtype):
    import torch

    dtype = {"float32": torch.float32, "int64": torch.int64}[input_dtype]
    size = (batch, *shape)
    if device == "meta":
        return torch.empty(size, device="meta", dtype=dtype)
    if dtype == torch.int64:
        return torch.zeros(size, dtype=dtype)
    return torch.randn(size, generator=torch.Generator().manual_seed(0))


def _to_device(module, device: str):
    """`module` on `device`; a module already on the meta device gets fresh storage there (`to_empty`) and
    its parameters re-initialised where its submodules know how (`reset_parameters`): values only matter
    to a cpu trace, and then only to avoid NaNs, never to the counts."""
    if device != "meta" and any(p.is_meta for p in module.parameters()):
        module = module.to_empty(device=device)
        for sub in module.modules():
            if callable(getattr(sub, "reset_parameters", None)):
                sub.reset_parameters()
        return module
    return module.to(device)


def _check_args(input_shape, batch, device, input_dtype):
    shape = tuple(input_shape)
    if not shape or any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in shape):
        raise InputError(f"input shape must be positive integers (one sample, without the batch), got {input_shape!r}")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise InputError(f"batch must be an integer >= 1, got {batch!r}")
    if device not in DEVICES:
        raise InputError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if input_dtype not in ("float32", "int64"):
        raise InputError(f"input dtype must be float32 or int64, got {input_dtype!r}")
    return shape


def trace_module(module, input_shape, batch: int, *, layers=None, device: str = "meta",
                 input_dtype: str = "float32", name: str | None = None) -> ModelTrace:
    """Trace `module` (an nn.Module, moved to `device` and put in train mode) on a (batch, *input_shape)
    input: one forward and backward (module docstring). `layers`: submodule names to treat as the
    top-level layers (default: the children in order). InputError where the model's forward or
    backward fails on that input (one line)."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise InputError(f"expected a torch.nn.Module, got {type(module).__name__}")
    shape = _check_args(input_shape, batch, device, input_dtype)
    if device == "auto":
        try:
            return trace_module(module, shape, batch, layers=layers, device="meta", input_dtype=input_dtype, name=name)
        except InputError:
            return trace_module(module, shape, batch, layers=layers, device="cpu", input_dtype=input_dtype, name=name)
    module = _to_device(module, device).train()
    module.zero_grad(set_to_none=True)  # a gradient left by an earlier trace would add accumulation ops
    chosen = _select_layers(module, layers)
    counts, rest, owner = _layer_params(module, chosen)
    names = [n for n, _ in chosen] + (["(root)"] if rest else [])
    state = _State(len(names))
    _install_hooks(state, module, chosen, owner)
    try:
        total, forward = _run(module, _input(shape, batch, device, input_dtype), state, len(chosen))
    except InputError:
        raise
    except Exception as exc:  # the user's model failed on this input: one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(f"the model failed on a ({batch}, {', '.join(map(str, shape))}) input on {device}: "
                         f"{type(exc).__name__}: {first}") from None
    finally:
        for h in state.hooks:
            h.remove()
        module.zero_grad(set_to_none=True)
    trace = _collect(state, names, counts + ([rest] if rest else []), shape, batch, device, total, forward,
                     name or type(module).__name__)
    buffers = float(sum(b.numel() * b.element_size() for b in module.buffers()))
    return replace(trace, buffer_bytes=buffers)


def _collect(state, names, counts, shape, batch, device, total, forward, model_name) -> ModelTrace:
    """The frozen ModelTrace from a finished trace's bookkeeping."""
    flops = [[0.0, 0.0] for _ in names]
    for op in state.ops:
        flops[op.layer][int(op.backward)] += op.flops
    layers = tuple(LayerTrace(name=n, params=int(counts[i]), forward_flops=flops[i][0], backward_flops=flops[i][1],
                              saved_float_elements=state.saved[i][0], saved_other_bytes=state.saved[i][1],
                              output_float_elements=state.outputs[i][0], output_other_bytes=state.outputs[i][1])
                   for i, n in enumerate(names))
    return ModelTrace(model_name=model_name, input_shape=shape, batch=batch, device=device, layers=layers,
                      ops=tuple(state.ops), grad_ready=tuple(state.ready), flop_counter_total=total,
                      flop_counter_forward=forward)
