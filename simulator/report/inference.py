"""The text form of an inference estimate (`parasim estimate --inference`): simulator/inference.py's
`InferenceEstimate.to_dict()` as lines with units."""
from __future__ import annotations

from ..units import GiB


def _ms(x: float) -> str:
    return f"{1e3 * x:10.3f} ms"


def inference_lines(d: dict, *, header: str) -> list[str]:
    """Lines of the inference breakdown; `header` names the model, hardware and layout."""
    pre, dec = d["prefill"], d["decode"]
    mode = "eager (the stack's launch bound)" if d["eager_decode"] else "CUDA graphs"
    lines = [
        header,
        f"serving             batch {d['batch']} per replica x (prompt {d['prompt_tokens']} + output "
        f"{d['output_tokens']} tokens), {d['replicas']} replica(s) of {d['gpus_per_replica']} GPU(s); prefill in "
        f"{pre['microbatches']} micro-batch(es) of {pre['micro_batch_size']:g}, decode {dec['microbatches']} "
        f"micro-batch(es) of {dec['micro_batch_size']:g} in flight, {mode}",
        f"time to first token {_ms(d['time_to_first_token_s'])}  (prefill of the batch, "
        f"{pre['flops'] / 1e12:,.1f} TFLOP, MFU {100 * pre['mfu']:.1f} %)",
        f"  per micro-batch   compute {_ms(pre['compute_s']).strip()}, TP comm {_ms(pre['tp_comm_s']).strip()}, "
        f"EP comm {_ms(pre['ep_comm_s']).strip()}, PP hop {_ms(pre['p2p_s']).strip()} (stage {pre['stage']})",
        f"time per out. token {_ms(d['decode_s_per_token'])}  at context {d['decode_context_tokens']:g} "
        f"({dec['bound']}-bound; one micro-batch through the pipeline {_ms(d['decode_latency_s']).strip()})",
        f"  per micro-batch   HBM reads {_ms(dec['memory_s']).strip()} "
        f"(weights {dec['weight_read_bytes'] / 1e9:.2f} GB "
        f"+ KV {dec['kv_read_bytes'] / 1e9:.2f} GB + activations {dec['activation_bytes'] / 1e9:.2f} GB), compute "
        f"{_ms(dec['compute_s']).strip()}, TP comm {_ms(dec['tp_comm_s']).strip()}, EP comm "
        f"{_ms(dec['ep_comm_s']).strip()}, PP hop {_ms(dec['p2p_s']).strip()} (stage {dec['stage']})",
        f"request             {d['request_s']:10.3f} s   (prefill + {d['output_tokens'] - 1} decode steps)",
        f"throughput          {d['tokens_per_s_per_gpu']:,.1f} output tokens/s per GPU over the request "
        f"(decode alone {d['decode_tokens_per_s_per_gpu']:,.1f}; prefill {d['prefill_tokens_per_s_per_gpu']:,.0f} "
        f"prompt tokens/s per GPU; {d['tokens_per_s']:,.0f} output tokens/s on all GPUs)",
        _max_batch_line(d),
        f"peak memory         {d['peak_bytes'] / GiB:.2f} GiB per GPU at batch {d['batch']} "
        f"({'fits' if d['feasible'] else 'does NOT fit: ' + d['reason']})",
    ]
    return lines


def _max_batch_line(d: dict) -> str:
    mb = "no limit (no KV cache on the binding stage)" if d["max_batch"] is None else f"{d['max_batch']:,} sequences"
    free, room = d["kv_free_bytes"], "(HBM - context/NCCL) / (1 + reserve)"
    room = (f"{free / GiB:.2f} GiB free for it = {room} - weights - activations" if free >= 0 else
            f"none free for it: weights + activations exceed {room} by {-free / GiB:.2f} GiB")
    return (f"max batch           {mb} per replica at {d['context_tokens']} tokens "
            f"(KV {d['kv_cache_bytes_per_sequence'] / 2**20:,.1f} MiB per sequence; {room}, "
            f"stage {d['max_batch_stage']})")
