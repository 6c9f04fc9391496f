"""The live and peak bytes inside a torch.profiler run (profile_memory=True): its [memory] allocation events
summed in time order. Imported by the tests and by the helper scripts run in a subprocess."""
import json
import os
import tempfile


def peak_bytes(prof) -> int:
    """Bytes above those live when `prof` started, at their highest."""
    return live_bytes(prof)[1]


def live_bytes(prof) -> tuple[int, int]:
    """(bytes allocated in `prof` and still live at its end, the highest they reached)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    live = peak = 0
    # in the order the profiler recorded them ("Ev Idx"), where it says; else by time
    for e in sorted((e for e in events if e.get("name") == "[memory]"),
                    key=lambda e: (e["args"].get("Ev Idx", 0), e["ts"])):
        live += e["args"]["Bytes"]
        peak = max(peak, live)
    return live, peak
