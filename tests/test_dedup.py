"""distinct_rows: grouping by equal keys, checked against a plain dictionary of tuples, with the C
hash table (native.first_ids) and without it (pandas.factorize)."""
import numpy as np
import pytest

from simulator import native
from simulator.dedup import distinct_rows


@pytest.fixture(params=["C", "pandas"], autouse=True)
def numbering(request, monkeypatch):
    if request.param == "C" and native.LIB is None:
        pytest.skip("the C library is not built")
    if request.param == "pandas":
        monkeypatch.setattr(native, "LIB", None)
    return request.param


def _reference(*keys):
    seen, inv, first = {}, [], []
    for i, row in enumerate(zip(*keys)):
        if row not in seen:
            seen[row] = len(seen)
            first.append(i)
        inv.append(seen[row])
    return np.array(first, dtype=np.int64), np.array(inv, dtype=np.int64)


def test_matches_dictionary_grouping_for_mixed_key_types():
    rng = np.random.default_rng(0)
    n = 5000
    keys = (rng.integers(0, 4, n), rng.integers(0, 2**40, n) % 7 * 2**40,  # small ints; huge ints
            rng.random(n).round(1), rng.integers(0, 2, n).astype(bool),
            np.array(["none", "full", "selective"], dtype=object)[rng.integers(0, 3, n)], rng.integers(-3, 3, n))
    first, inv = distinct_rows(*keys)
    ref_first, ref_inv = _reference(*keys)
    assert np.array_equal(first, ref_first) and np.array_equal(inv, ref_inv)


def test_many_wide_keys_do_not_overflow():
    # 12 keys of 2^19 distinct values each would overflow a mixed-radix int64 code without re-numbering
    rng = np.random.default_rng(1)
    base = rng.integers(0, 2**19, (12, 300))
    keys = [np.concatenate([b, b]) for b in base]  # every row appears twice
    first, inv = distinct_rows(*keys)
    assert len(first) == 300 and np.array_equal(inv[:300], inv[300:]) and np.array_equal(first, np.arange(300))


def test_codes_that_share_hash_slots_and_extreme_values_group_exactly():
    # codes the C table hashes to the same few slots (its hash: the top bits of code x 0x9E3779B97F4A7C15;
    # 20,000 rows: 2^16 slots), the last slot among them: long probe chains that wrap around the
    # table's end; int64 extremes and negative codes are keys like any other
    c = np.arange(3_000_000, dtype=np.uint64)
    slot = (c * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(48)  # (wraps modulo 2^64, as in C)
    same = c[np.isin(slot, (7, 8, 2**16 - 1))].astype(np.int64)
    assert len(same) > 60
    pool = np.concatenate([same, [np.iinfo(np.int64).max, np.iinfo(np.int64).min, -1, 0, 1]])
    rng = np.random.default_rng(2)
    code = pool[rng.integers(0, len(pool), 20000)]
    ref_first, ref_inv = _reference(code)
    first, inv = distinct_rows(code)
    assert np.array_equal(first, ref_first) and np.array_equal(inv, ref_inv)
    if native.LIB is not None:
        inv, first = native.first_ids(code)
        assert np.array_equal(first, ref_first) and np.array_equal(inv, ref_inv)


def test_empty_input():
    first, inv = distinct_rows(np.zeros(0, dtype=int))
    assert len(first) == 0 and len(inv) == 0


def test_gather_rows_equals_fancy_indexing_for_every_shape_and_dtype_the_kernel_gathers():
    from simulator.dedup import gather_rows

    rng = np.random.default_rng(5)
    inv = rng.integers(0, 40, 1000)
    for x in (rng.random(40), rng.random((40, 4)), rng.random((40, 32)) > 0.5,
              rng.integers(0, 9, (40, 32)).astype(np.int32), rng.random((40, 3, 2))):
        got = gather_rows(x, inv)
        assert got.dtype == x.dtype and np.array_equal(got, x[inv])
    assert gather_rows(rng.random((40, 4)), np.zeros(0, dtype=np.int64)).shape == (0, 4)


def test_factorize_equals_pandas_on_the_cases_it_handles_itself_and_those_it_hands_over():
    # dedup.factorize groups object arrays by element identity, then merges equal values; pandas.factorize
    # (a hash of every element) is the independent reference, including equal strings held by distinct
    # objects, 1 == 1.0 == True, tuples, None and NaN (missing, or kept as a value)
    import pandas as pd

    from simulator.dedup import factorize

    shared = np.array(["none", "selective", "full"], dtype=object)[np.random.default_rng(4).integers(0, 3, 3000)]
    copies = np.array(["".join(list(x)) for x in shared], dtype=object)  # same values, new objects
    cases = [shared, copies, np.array([None, "a", None, "b"], dtype=object),
             np.array([1, 1.0, True, "x", (1, 2), (1, 2)], dtype=object), np.array([], dtype=object),
             np.array(["a", np.nan, "a"], dtype=object), np.array([3, 1, 3])]
    for v in cases:
        for keep in (False, True):
            codes, uniques = factorize(v, missing_as_value=keep)
            want_codes, want_uniques = pd.factorize(v, use_na_sentinel=not keep)
            assert np.array_equal(codes, want_codes), (v[:6], keep)
            assert len(uniques) == len(want_uniques)
            assert all(a is b or a == b or (pd.isna(a) and pd.isna(b)) for a, b in zip(uniques, want_uniques))


def test_rank_order_sorts_strings_as_pandas_sorted_codes_with_missing_values():
    # the rank sorts the few distinct strings, not every row: the same order as pandas' sorted codes
    import pandas as pd

    from simulator.sweep.rank import layout_labels, rank_order

    rng = np.random.default_rng(6)
    df = pd.DataFrame({"tp": rng.integers(1, 3, 500), "cp": 1, "pp": 1, "dp": 1, "ep": 1, "vpp": 1,
                       "schedule": np.array(["zb-h1", "1f1b", "gpipe", None], dtype=object)[rng.integers(0, 4, 500)],
                       "feasible": True, "tokens_per_s": 1.0})
    order = rank_order(df, layout_labels(df))
    want = pd.factorize(df["schedule"].to_numpy(), sort=True)[0]
    lab = pd.factorize(df["tp"].to_numpy(), sort=True)[0]  # the label here orders as tp
    assert np.array_equal(order, np.lexsort((want, lab)))
