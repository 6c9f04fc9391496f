"""Any torch model, not only decoder transformers: trace an `nn.Module` once (trace.py), time its ops and
layers on a hardware profile (cost.py), and run it data parallel (DDP, FSDP: parallel.py), pipelined
(1F1B: pipeline.py) and over GPU counts (scaling.py). docs/torch-models.md.

torch is optional: nothing here imports it at module level; the functions that need it import it when
called (trace.py, load.py), so `import simulator.torchmodel` works without torch and the transformer path
never needs it.
"""
from .cost import COMPUTE_DTYPES, LayerTimes, MemoryBreakdown, TorchTraining, layer_times, op_times_s
from .load import INSTALL_HINT, build_module, load_factory, require_torch
from .parallel import MODES, StepResult, ddp_step, fsdp_step
from .pipeline import PipelineResult, balanced_split, pipeline_step
from .scaling import ScalingRow, Tracer, batch_sweep, largest_batch_over, scaling_rows, step
from .trace import DEVICES, GradReady, LayerTrace, ModelTrace, OpRecord, trace_module

__all__ = ["COMPUTE_DTYPES", "DEVICES", "INSTALL_HINT", "MODES", "GradReady", "LayerTimes", "LayerTrace",
           "MemoryBreakdown", "ModelTrace", "OpRecord", "PipelineResult", "ScalingRow", "StepResult", "Tracer",
           "TorchTraining", "balanced_split", "batch_sweep", "build_module", "ddp_step", "fsdp_step",
           "largest_batch_over", "layer_times", "load_factory", "op_times_s", "pipeline_step", "require_torch",
           "scaling_rows", "step", "trace_module"]
