"""Chrome trace event format (opens in Perfetto / chrome://tracing) for a replayed pipeline timeline.

One process ("pipeline"), one thread per rank, one complete event ("ph": "X") per op; times in
microseconds as the format requires (converted here, at the output edge).
"""
import json


def trace_events(timeline) -> dict:
    """{"traceEvents": [...], "displayTimeUnit": "ms"} for `timeline` (a pipeline Timeline)."""
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"pipeline {timeline.schedule.name}"}}]
    for r in range(timeline.schedule.num_ranks):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}})
    for i, op in enumerate(timeline.ops):
        events.append({
            "name": op.label, "cat": op.kind, "ph": "X", "pid": 0, "tid": op.rank,
            "ts": float(timeline.start_s[i]) * 1e6, "dur": float(timeline.duration_s[i]) * 1e6,
            "args": {"stage": op.stage, "microbatch": op.microbatch},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(timeline, path) -> None:
    with open(path, "w") as fh:
        json.dump(trace_events(timeline), fh)
