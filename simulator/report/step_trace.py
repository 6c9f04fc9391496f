"""Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing) of one estimated step
(report/step_timeline.py): one process per pipeline rank, a compute thread (the F / B / W ops, the
optimizer) and one thread per communication group beside it (TP, CP, EP, FSDP / ZeRO-3, DP, PP p2p
transfers, PP p2p exposed wait), every slice a complete event ("ph": "X") with times in microseconds
(the format's unit, converted here at the output edge). A slice's category says its group and whether
the step waits for it (`tp,exposed`, `zero3,hidden`, ...); `otherData` holds the estimate's breakdown.
Formatted directly (linear in the slices; no dict per event).
"""
from __future__ import annotations

import json

import numpy as np

from .step_timeline import TRACKS

TRACK_TITLES = {"compute": "compute", "tp": "TP", "cp": "CP", "ep": "EP", "zero3": "FSDP / ZeRO-3", "dp": "DP",
                "pp": "PP p2p (transfers in)", "pp_wait": "PP p2p (exposed wait)"}
_GROUP = {"pp_wait": "pp"}
_CHUNK = 65536


def _metadata(st) -> list[str]:
    """Process (pipeline rank) and thread (track) names, sorted rank by rank, track by track."""
    lay = st.estimate.layout
    a = st.timeline.schedule.arrays
    seg = st.segments
    out = []
    for r in range(st.num_ranks):
        stages = sorted(set(a.stage[a.rank_offsets[r]:a.rank_offsets[r + 1]].tolist()))
        title = f"pipeline rank {r} (stage{'s' if len(stages) > 1 else ''} {', '.join(map(str, stages))})"
        out += [json.dumps({"name": "process_name", "ph": "M", "pid": r, "args": {"name": title}}),
                json.dumps({"name": "process_sort_index", "ph": "M", "pid": r, "args": {"sort_index": r}})]
        used = {0} | set(np.unique(seg.track[seg.rank == r]).tolist())
        for t in sorted(used):
            name = TRACK_TITLES[TRACKS[t]] + (f" (TP group of {lay.tp})" if TRACKS[t] == "tp" else "")
            out += [json.dumps({"name": "thread_name", "ph": "M", "pid": r, "tid": t, "args": {"name": name}}),
                    json.dumps({"name": "thread_sort_index", "ph": "M", "pid": r, "tid": t,
                                "args": {"sort_index": t}})]
    return out


def _op_events(st) -> list[str]:
    """The compute thread's ops: `F12` (micro-batch 12), `B3 c1` (chunk 1 of its rank), `W0`, ..."""
    tl = st.timeline
    a = tl.schedule.arrays
    chunks = tl.schedule.chunks_per_rank > 1
    letters = np.array(("F", "B", "W"))[a.kind].tolist()
    split = (a.kind == 1) & ~a.includes_weight
    what = np.where(a.kind == 0, "forward", np.where(a.kind == 2, "weight gradient",
                                                      np.where(split, "input gradient", "full backward"))).tolist()
    cols = zip(letters, a.microbatch.tolist(), st.chunk.tolist(), a.stage.tolist(), a.rank.tolist(),
               (tl.start_s * 1e6).tolist(), (tl.duration_s * 1e6).tolist(), (st.compute_s * 1e6).tolist(),
               (st.contention_s * 1e6).tolist(), what)
    return [f'{{"name": "{k}{j}{f" c{c}" if chunks else ""}", "cat": "{k}", "ph": "X", "pid": {r}, "tid": 0, '
            f'"ts": {ts!r}, "dur": {du!r}, "args": {{"op": "{w}", "microbatch": {j}, "chunk": {c}, "stage": {s}, '
            f'"compute_us": {cu!r}, "contention_us": {co!r}}}}}'
            for k, j, c, s, r, ts, du, cu, co, w in cols]


def _segment_events(st) -> list[str]:
    """Communication, p2p waits and the tail: name = the collective, category = group and exposure."""
    seg = st.segments
    labels = st.timeline.labels() if len(seg) else []
    out = []
    for rank, track, name, ts, dur, exposed, op in zip(
            seg.rank.tolist(), seg.track.tolist(), seg.name.tolist(), (seg.start_s * 1e6).tolist(),
            (seg.dur_s * 1e6).tolist(), seg.exposed.tolist(), seg.op.tolist()):
        tr = TRACKS[track]
        if tr == "compute":
            cat, args = "optimizer", '{"tail": true}'
        else:
            group = _GROUP.get(tr, tr)
            cat = f"{group},{'exposed' if exposed else 'hidden'}"
            of = f', "op": "{labels[op]}"' if op >= 0 else ""
            args = f'{{"group": "{group}", "exposed": {"true" if exposed else "false"}{of}}}'
        out.append(f'{{"name": "{seg.names[name]}", "cat": "{cat}", "ph": "X", "pid": {rank}, "tid": {track}, '
                   f'"ts": {ts!r}, "dur": {dur!r}, "args": {args}}}')
    return out


def other_data(st) -> dict:
    """The step's totals and the estimate's breakdown (SI units), for the trace's `otherData`."""
    e = st.estimate
    return {"scenario": e.layout.label, "model": e.model.name, "schedule": e.layout.schedule,
            "step_s": st.step_s, "makespan_s": st.makespan_s, "makespan_without_p2p_s": st.makespan_no_p2p_s,
            "busiest_rank": st.busiest_rank, "tail_rank": st.tail_rank, "compute_s": e.compute_s,
            "exposed_comm_by_group_s": e.exposed_comm_by_group_s, "bubble_s": e.bubble_s,
            "busy_s_per_rank": list(st.timeline.busy_s_per_rank),
            "note": "one process per pipeline rank (each stands for its TP x CP x DP group); inside an op the "
                    "exposed communication is drawn first, the hidden under the compute after it"}


def write_step_trace(st, path) -> None:
    """Write the trace of StepTimeline `st` to `path` (one JSON object: traceEvents, displayTimeUnit,
    otherData)."""
    events = _metadata(st) + _op_events(st) + _segment_events(st)
    with open(path, "w") as fh:
        fh.write('{"traceEvents": [\n')
        for i in range(0, len(events), _CHUNK):
            fh.write((",\n" if i else "") + ",\n".join(events[i:i + _CHUNK]))
        fh.write('\n], "displayTimeUnit": "ms", "otherData": ' + json.dumps(other_data(st)) + "}\n")
