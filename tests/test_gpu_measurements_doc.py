"""docs/gpu-measurements.md is what validation/gpu_measurements_report.py writes from the committed measurements
and the current simulator: a change to the model that moves a compared number must regenerate the page."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))


def test_the_page_is_current():
    import gpu_measurements_report as G

    assert (ROOT / "docs" / "gpu-measurements.md").read_text() == G.text()
