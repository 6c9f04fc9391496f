"""A small deterministic discrete-event engine that knows nothing about pipelines.

Model: *tasks* run on *resources*. A task starts when every task it waits for has finished (plus a
per-edge delay, e.g. a link latency) and its resource lets it. Resources:

- `Stream`: one task at a time (a GPU compute stream). ``in_order=True`` runs its tasks in the order
  they were added (a static per-rank schedule); ``False`` runs ready tasks first come, first served.
- `Channel`: a link moving `size_bytes` per task at `bandwidth_bytes_per_s` after `latency_s`;
  ``sharing="fair"`` splits the bandwidth equally between transfers in flight (processor sharing),
  ``"fifo"`` sends one transfer at a time.

Events live in one heap ordered by (time, priority, sequence number), so equal-time events resolve
in a fixed order and a run is reproducible bit for bit (the SimPy design). When the heap runs dry
with tasks left, `DeadlockError` names the stuck tasks and what each waits for.
Times are seconds; a task's end is computed as ``start + duration`` and a dependency's arrival as
``end + delay``, the same float operations as a longest-path sweep, so both agree exactly.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError


class DeadlockError(InputError):
    """The tasks cannot all run: some wait, directly or not, on each other. Names the stuck tasks."""


@dataclass(frozen=True, kw_only=True)
class Stream:
    name: str
    in_order: bool = True


@dataclass(frozen=True, kw_only=True)
class Channel:
    name: str
    bandwidth_bytes_per_s: float
    latency_s: float = 0.0
    sharing: str = "fair"

    def __post_init__(self):
        if not (self.bandwidth_bytes_per_s > 0) or not np.isfinite(self.bandwidth_bytes_per_s):
            raise InputError(f"channel {self.name}: bandwidth_bytes_per_s must be > 0, got {self.bandwidth_bytes_per_s!r}")
        if not (self.latency_s >= 0) or not np.isfinite(self.latency_s):
            raise InputError(f"channel {self.name}: latency_s must be >= 0, got {self.latency_s!r}")
        if self.sharing not in ("fair", "fifo"):
            raise InputError(f"channel {self.name}: sharing must be 'fair' or 'fifo', got {self.sharing!r}")


@dataclass(frozen=True, kw_only=True)
class Task:
    """`duration_s` on a Stream, `size_bytes` on a Channel; `after` = ((task id, delay_s), ...)."""

    name: str
    resource: str
    duration_s: float = 0.0
    size_bytes: float = 0.0
    after: tuple = ()


@dataclass(frozen=True)
class RunResult:
    start_s: np.ndarray
    end_s: np.ndarray
    names: tuple

    @property
    def makespan_s(self) -> float:
        return float(self.end_s.max()) if len(self.end_s) else 0.0


_ARRIVE, _DONE, _CHANNEL = 0, 1, 2  # event priorities at equal times: arrivals, completions, channel


@dataclass
class _StreamState:
    spec: Stream
    order: list = field(default_factory=list)  # in_order: task ids in added order
    pos: int = 0
    ready: list = field(default_factory=list)  # not in_order: heap of (ready time, seq, task)
    busy: bool = False


@dataclass
class _ChannelState:
    spec: Channel
    active: dict = field(default_factory=dict)  # task -> remaining bytes
    queue: list = field(default_factory=list)   # fifo waiting tasks
    last_t: float = 0.0
    version: int = 0


class Simulation:
    """Add resources and tasks, then `run()` once."""

    def __init__(self, resources=()):
        self._res = {}
        self._tasks: list[Task] = []
        for r in resources:
            self.add_resource(r)

    def add_resource(self, res):
        if res.name in self._res:
            raise InputError(f"resource {res.name!r} added twice")
        self._res[res.name] = _StreamState(res) if isinstance(res, Stream) else _ChannelState(res)

    def add(self, task: Task) -> int:
        if task.resource not in self._res:
            raise InputError(f"task {task.name}: unknown resource {task.resource!r}")
        tid = len(self._tasks)
        for dep, delay in task.after:  # ids may refer to tasks added later; checked in run()
            if not (delay >= 0) or not np.isfinite(delay):
                raise InputError(f"task {task.name}: delay must be finite and >= 0, got {delay!r}")
        self._tasks.append(task)
        st = self._res[task.resource]
        if isinstance(st, _StreamState) and st.spec.in_order:
            st.order.append(tid)
        return tid

    # -- run -------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        tasks = self._tasks
        n = len(tasks)
        start = np.full(n, np.nan)
        end = np.full(n, np.nan)
        waiting = np.array([len(t.after) for t in tasks], dtype=np.int64)
        ready_at = np.zeros(n)
        dependents = [[] for _ in range(n)]
        for tid, t in enumerate(tasks):
            for dep, delay in t.after:
                if not (0 <= dep < n) or dep == tid:
                    raise InputError(f"task {t.name}: waits for unknown task id {dep}")
                dependents[dep].append((tid, delay))
        heap = []
        seq = 0

        def push(time, prio, kind, payload):
            nonlocal seq
            heapq.heappush(heap, (time, prio, seq, kind, payload))
            seq += 1

        def become_ready(tid, now):
            st = self._res[tasks[tid].resource]
            if isinstance(st, _StreamState):
                if not st.spec.in_order:
                    heapq.heappush(st.ready, (now, tid))
                try_stream(st, now)
            else:
                channel_add(st, tid, now)

        def try_stream(st, now):
            if st.busy:
                return
            if st.spec.in_order:
                if st.pos < len(st.order) and waiting[st.order[st.pos]] == 0 and ready_at[st.order[st.pos]] <= now:
                    tid = st.order[st.pos]
                    st.pos += 1
                else:
                    return
            else:
                if not st.ready:
                    return
                _, tid = heapq.heappop(st.ready)
            st.busy = True
            start[tid] = now
            push(now + tasks[tid].duration_s, _DONE, "done", tid)

        def channel_add(st, tid, now):
            spec = st.spec
            if spec.sharing == "fifo":
                st.queue.append(tid)
                if not st.active:
                    channel_start_next(st, now)
                return
            channel_advance(st, now)
            st.active[tid] = float(tasks[tid].size_bytes)
            start[tid] = now
            channel_schedule(st, now)

        def channel_start_next(st, now):
            if st.queue:
                tid = st.queue.pop(0)
                start[tid] = now
                st.active[tid] = 0.0
                push(now + st.spec.latency_s + tasks[tid].size_bytes / st.spec.bandwidth_bytes_per_s, _DONE, "done", tid)

        def channel_advance(st, now):
            if st.active and now > st.last_t:
                rate = st.spec.bandwidth_bytes_per_s / len(st.active)
                for k in st.active:
                    st.active[k] = max(0.0, st.active[k] - rate * (now - st.last_t))
            st.last_t = now

        def channel_schedule(st, now):
            st.version += 1
            if st.active:
                rate = st.spec.bandwidth_bytes_per_s / len(st.active)
                tid = min(st.active, key=lambda k: (st.active[k], k))
                push(now + st.active[tid] / rate, _CHANNEL, "chan", (st.spec.name, st.version, tid))

        def finish(tid, now):
            end[tid] = now + (self._res[tasks[tid].resource].spec.latency_s
                              if isinstance(self._res[tasks[tid].resource], _ChannelState)
                              and self._res[tasks[tid].resource].spec.sharing == "fair" else 0.0)
            if end[tid] > now:  # fair channel: latency after the bytes are through
                push(end[tid], _DONE, "arrived", tid)
                return
            release(tid, now)

        def release(tid, now):
            for child, delay in dependents[tid]:
                waiting[child] -= 1
                t = now + delay
                ready_at[child] = max(ready_at[child], t)
                if waiting[child] == 0:
                    push(ready_at[child], _ARRIVE, "ready", child)

        for tid in range(n):
            if waiting[tid] == 0:
                push(0.0, _ARRIVE, "ready", tid)
        done = 0
        while heap:
            now, _, _, kind, payload = heapq.heappop(heap)
            if kind == "ready":
                become_ready(payload, now)
            elif kind == "done":
                tid = payload
                st = self._res[tasks[tid].resource]
                done += 1
                end[tid] = now
                if isinstance(st, _StreamState):
                    st.busy = False
                    release(tid, now)
                    try_stream(st, now)
                else:
                    del st.active[tid]
                    release(tid, now)
                    channel_start_next(st, now)
            elif kind == "arrived":
                done += 1
                release(payload, now)
            else:  # channel completion check
                name, version, tid = payload
                st = self._res[name]
                if version != st.version:
                    continue
                channel_advance(st, now)
                del st.active[tid]
                channel_schedule(st, now)
                finish(tid, now)
                if end[tid] <= now:
                    done += 1
        if done < n:
            raise DeadlockError(self._stuck(start, waiting))
        return RunResult(start, end, tuple(t.name for t in tasks))

    def _stuck(self, start, waiting) -> str:
        tasks = self._tasks
        names = []
        for st in self._res.values():
            if isinstance(st, _StreamState) and st.spec.in_order and st.pos < len(st.order):
                tid = st.order[st.pos]
                blockers = [tasks[d].name for d, _ in tasks[tid].after if np.isnan(start[d]) or waiting[d] > 0]
                names.append(f"{tasks[tid].name} on {st.spec.name} waits for {', '.join(blockers) or 'its stream'}")
        if not names:
            names = [tasks[i].name for i in np.flatnonzero(np.isnan(start))[:6]]
        more = f" (+{len(names) - 6} more)" if len(names) > 6 else ""
        return f"deadlock: {int(np.isnan(start).sum())} tasks never start: " + "; ".join(names[:6]) + more
