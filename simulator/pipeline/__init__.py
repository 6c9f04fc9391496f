"""Replay of pipeline schedules: timeline, bubbles, critical path, in-flight memory (`replay`, replay.py); one
compiled pass over many layouts of many schedule shapes (`makespan_multi`, the sweep's path, multi.py)."""
from . import cache  # the on-disk schedule-shape cache, loaded with the replay it serves
from .compiled import CompiledSchedule, DeadlockError, compile_schedule
from .pipedream import steady_state_time_per_microbatch
from .multi import ShapeTables, flush_shape_tables, makespan_multi, shape_tables
from .replay import Timeline, critical_path, inflight_profile, op_delays, op_durations, replay

__all__ = ["CompiledSchedule", "DeadlockError", "cache", "ShapeTables", "Timeline", "compile_schedule", "critical_path",
           "flush_shape_tables", "inflight_profile", "makespan_multi", "op_delays", "op_durations", "replay",
           "shape_tables", "steady_state_time_per_microbatch"]
