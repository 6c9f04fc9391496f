"""Per-stage costs for uneven splits: layers per (virtual) stage and the extra work of the first
stage (embedding) and the last stage (LM head and loss)."""
import numpy as np

from ..errors import InputError


def split_layers(num_layers: int, num_stages: int, *, first_stage_fewer: int = 0, last_stage_fewer: int = 0):
    """Layers per stage: as even as possible after removing `first_stage_fewer` / `last_stage_fewer`
    layers from the first / last stage (e.g. 1 each to balance embedding and LM head, as the Zero
    Bubble paper does). Remainders go to the middle stages first. Returns a tuple of ints."""
    if num_stages < 1 or num_layers < 0:
        raise InputError(f"split_layers: need num_stages >= 1 and num_layers >= 0, got {num_stages}, {num_layers}")
    total = num_layers + first_stage_fewer + last_stage_fewer
    base, rem = divmod(total, num_stages)
    counts = [base] * num_stages
    order = sorted(range(num_stages), key=lambda s: (abs(s - (num_stages - 1) / 2), s))
    for s in order[:rem]:
        counts[s] += 1
    counts[0] -= first_stage_fewer
    counts[-1] -= last_stage_fewer
    if min(counts) < 0:
        raise InputError(f"split_layers: {num_layers} layers cannot fill {num_stages} stages with those offsets")
    return tuple(counts)


def stage_times(*, layers_per_stage, layer_s: float, first_extra_s: float = 0.0, last_extra_s: float = 0.0):
    """Per-stage time t_s = layers_s x layer_s (+ first_extra_s on stage 0, + last_extra_s on the
    last stage). One formula; use it once per op kind (F, B, W)."""
    t = np.asarray(layers_per_stage, dtype=float) * float(layer_s)
    t = t.copy()
    t[0] += first_extra_s
    t[-1] += last_extra_s
    if not np.isfinite(t).all() or (t < 0).any():
        raise InputError(f"stage_times: times must be finite and >= 0, got {t.tolist()}")
    return t
