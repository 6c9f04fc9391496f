"""docs/compute.md's table of what Zero Bubble's profiled stage times leave out is what validation/zb_profile_gap.py
computes from the published rows now."""
from pathlib import Path

from helpers.validation_script import load

ROOT = Path(__file__).resolve().parent.parent


def _module():
    return load("zb_profile_gap")


def test_doc_table_is_the_script_s():
    assert _module().summary() in (ROOT / "docs" / "compute.md").read_text()


def test_every_compared_row_is_at_table_9_s_micro_batch_and_the_profiles_fall_short():
    d = _module().gaps()
    assert len(d) >= 40
    assert (d.difference < 0).all()  # the profiled work never fills the measured step
