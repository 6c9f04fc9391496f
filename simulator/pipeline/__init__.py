"""Replay of pipeline schedules: timeline, bubbles, critical path, in-flight memory; a vectorised fast
path over many layouts sharing a schedule shape. See `replay`."""
from . import cache  # the on-disk schedule-shape cache, loaded with the replay it serves
from .compiled import CompiledSchedule, DeadlockError, compile_schedule
from .pipedream import steady_state_time_per_microbatch
from .replay import (ShapeTables, Timeline, critical_path, flush_shape_tables, inflight_profile,
                     makespan_multi, op_delays, op_durations, replay, shape_tables)
from .stages import split_layers, stage_times

__all__ = ["CompiledSchedule", "DeadlockError", "cache", "ShapeTables", "Timeline", "compile_schedule", "critical_path",
           "flush_shape_tables", "inflight_profile", "makespan_multi", "op_delays", "op_durations", "replay",
           "shape_tables", "split_layers", "stage_times", "steady_state_time_per_microbatch"]
