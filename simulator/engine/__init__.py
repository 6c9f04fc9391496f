"""Discrete-event core (knows nothing about pipelines): tasks on streams and channels, one event heap
with deterministic ties, deadlock detection naming the stuck tasks. See `core`."""
from .core import Channel, DeadlockError, RunResult, Simulation, Stream, Task

__all__ = ["Channel", "DeadlockError", "RunResult", "Simulation", "Stream", "Task"]
