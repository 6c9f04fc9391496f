"""Test-session settings: the schedule-shape cache (simulator/pipeline/cache.py) goes to a folder of
this session, so tests neither read a cache left by other runs nor fill the user's."""
import os
import tempfile

os.environ["PARASIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="parasim-test-cache-")
os.environ.pop("PARASIM_NO_CACHE", None)
