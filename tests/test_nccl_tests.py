"""nccl-tests parsing and collective efficiency points (simulator/calibrate/nccl_tests.py).

Fixtures in tests/data/nccl/ are nccl-tests outputs whose numbers are rows of the shared
collectives.csv (each file's header says which rows and which public source).
"""
from pathlib import Path

import numpy as np
import pytest

from simulator.calibrate.nccl_tests import (busbw_factor, efficiency_points, latency_s, network_bytes_per_node,
                                            parse_nccl_tests, read_nccl_tests)
from simulator.errors import InputError
from simulator.spec.hardware import load_hardware

DATA = Path(__file__).parent / "data" / "nccl"


def test_a100_all_reduce_log_parses_every_size_with_both_placements():
    d = read_nccl_tests(DATA / "all_reduce_perf_8xa100.log")
    # 32 KiB .. 16 GiB in powers of two = 20 sizes, out-of-place + in-place rows
    assert len(d) == 40
    assert set(d["placement"]) == {"out-of-place", "in-place"}
    assert (d["collective"] == "all_reduce").all()
    assert d["nranks"].iloc[0] == 8 and d["nodes"].iloc[0] == 1 and d["gpus_per_node"].iloc[0] == 8
    assert d["size_bytes"].min() == 32768 and d["size_bytes"].max() == 2**34
    row = d[(d.size_bytes == 2**30) & (d.placement == "out-of-place")].iloc[0]
    # collectives.csv a100_8gpu_ar_1073741824: 8203.9 us, algbw 130.88, busbw 229.04 GB/s
    assert row.time_s == pytest.approx(8203.9e-6)
    assert row.algbw_bytes_per_s == pytest.approx(130.88e9)
    assert row.busbw_bytes_per_s == pytest.approx(229.04e9)
    assert d["warmup_iters"].iloc[0] == 5 and d["iters"].iloc[0] == 50


def test_two_node_log_counts_ranks_and_hosts_from_the_device_block():
    d = read_nccl_tests(DATA / "all_reduce_perf_2x8xh100_a3mega.log")
    assert d["nranks"].iloc[0] == 16 and d["nodes"].iloc[0] == 2 and d["gpus_per_node"].iloc[0] == 8
    assert d["device"].iloc[0] == "NVIDIA H100 80GB HBM3"
    assert len(d) == 2 * 31  # 8 B .. 8 GiB
    inplace = d[(d.placement == "in-place") & (d.size_bytes == 8589934592)].iloc[0]
    assert inplace.time_s == pytest.approx(47743e-6)  # integer-printed time column


@pytest.mark.parametrize("name", ["all_reduce_perf_8xa100.log", "all_reduce_perf_2x8xh100_a3mega.log",
                                  "sendrecv_perf_8xa100.log", "all_reduce_perf_2xh100pcie.log"])
def test_printed_bandwidths_match_nccl_tests_definitions(name):
    """algbw = S/t and busbw = algbw·factor(n) (nccl-tests doc/PERFORMANCE.md), within print rounding."""
    d = read_nccl_tests(DATA / name)
    d = d[d["algbw_bytes_per_s"] > 1e9]  # rows printed as 0.00 GB/s carry no digits to compare
    n = d["nranks"].iloc[0]
    alg = d["size_bytes"] / d["time_s"]
    # time printed with 4-5 significant digits, GB/s with 2 decimals
    np.testing.assert_allclose(d["algbw_bytes_per_s"], alg, rtol=2e-3, atol=0.006e9)
    np.testing.assert_allclose(d["busbw_bytes_per_s"], d["algbw_bytes_per_s"] * busbw_factor(d["collective"].iloc[0], n),
                               rtol=2e-3, atol=0.011e9)


def test_busbw_factors_are_the_nccl_tests_ones():
    assert busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert busbw_factor("alltoall", 16) == pytest.approx(15 / 16)
    assert busbw_factor("sendrecv", 8) == 1.0
    with pytest.raises(InputError, match="bogus"):
        busbw_factor("bogus", 8)


OLD_FORMAT = """\
# nThread 1 nGpus 4 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  11 on     hostA device  0 [0x1a] Tesla V100-SXM2-32GB
#   Rank  1 Pid  11 on     hostA device  1 [0x1b] Tesla V100-SXM2-32GB
#   Rank  2 Pid  11 on     hostA device  2 [0x3d] Tesla V100-SXM2-32GB
#   Rank  3 Pid  11 on     hostA device  3 [0x3e] Tesla V100-SXM2-32GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576         65536   float    none    100.0   10.49    7.86  0e+00     99.0   10.59    7.94  0e+00
NCCL INFO some interleaved noise line
     2097152        131072   float    none    200.0   10.49    7.86  0e+00    201.0   10.43    7.82  0e+00
# Out of bounds values : 0 OK
"""


def test_older_format_without_root_column_and_noise_lines_parses():
    # a made-up all_gather run in the pre-2.10 layout (no root column, 'error' column)
    d = parse_nccl_tests("$ ./build/all_gather_perf -b 1M -e 4M -g 4\n" + OLD_FORMAT)
    assert list(d["size_bytes"].unique()) == [1048576, 2097152]
    assert (d["collective"] == "all_gather").all() and d["nranks"].iloc[0] == 4
    assert d[d.placement == "in-place"]["time_s"].tolist() == pytest.approx([99e-6, 201e-6])
    assert (d["root"] == -1).all()


def test_unnamed_collective_and_empty_text_are_input_errors():
    with pytest.raises(InputError, match="which collective"):
        parse_nccl_tests(OLD_FORMAT)
    with pytest.raises(InputError, match="no nccl-tests result rows"):
        parse_nccl_tests("hello\n", collective="all_reduce")


def test_ring_efficiency_large_message_is_busbw_over_nvlink():
    """At 16 GiB the latency is negligible: eta = busbw / 300 GB/s (A100 NVLink3 per direction)."""
    hw = load_hardware("dgx-a100-80g")
    d = read_nccl_tests(DATA / "all_reduce_perf_8xa100.log")
    p = efficiency_points(d, hw)
    big = p[p.size_bytes == 2**34].iloc[0]
    assert big.table == "nvlink_ring"
    assert big.efficiency == pytest.approx(234.89 / 300, rel=2e-3)  # collectives.csv busbw 234.89 GB/s


def test_latency_is_taken_off_before_the_bandwidth_term():
    """eta·B·(t - L) must equal the bus volume: check against the closed form for 32 KiB on 8 GPUs."""
    hw = load_hardware("dgx-a100-80g")
    d = read_nccl_tests(DATA / "all_reduce_perf_8xa100.log")
    p = efficiency_points(d, hw)
    r = p[p.size_bytes == 32768].iloc[0]
    L = 2 * 7 * hw.nvlink_latency_s  # ring all-reduce: 2(n-1) hops
    assert r.latency_s == pytest.approx(L)
    expected = 32768 * 2 * 7 / 8 / (43.83e-6 - L) / hw.nvlink_bytes_per_s
    assert r.efficiency == pytest.approx(expected, rel=1e-9)
    raw = efficiency_points(d, hw, subtract_latency=False)
    assert raw[raw.size_bytes == 32768].iloc[0].efficiency == pytest.approx(32768 * 1.75 / 43.83e-6 / 300e9)


def test_two_node_all_reduce_feeds_the_network_table_per_nic():
    """2 nodes: each node sends 2(N-1)/N·S = S over its 8 NICs. At 8 GiB, 47535 us:
    per-NIC rate = 8 GiB / 47.535 ms / 8 = 22.6 GB/s, i.e. 0.90 of a 200 Gb/s NIC (A3 Mega's NICs)."""
    hw = load_hardware("dgx-h100")  # 8 x 400 Gb/s NICs: the same rate is 0.45 of its NIC
    d = read_nccl_tests(DATA / "all_reduce_perf_2x8xh100_a3mega.log")
    p = efficiency_points(d, hw, subtract_latency=False)
    r = p[p.size_bytes == 8589934592].iloc[0]
    assert r.table == "network" and r.group_span == "inter-node"
    assert r.efficiency == pytest.approx(8589934592 / 47535e-6 / 8 / 50e9, rel=1e-9)
    assert r.efficiency * 50e9 / 25e9 == pytest.approx(0.9035, abs=1e-3)


def test_sendrecv_feeds_nvlink_p2p_and_network_volumes_follow_the_node_ring():
    hw = load_hardware("dgx-a100-80g")
    p = efficiency_points(read_nccl_tests(DATA / "sendrecv_perf_8xa100.log"), hw, subtract_latency=False)
    assert set(p["table"]) == {"nvlink_p2p"}
    # 1 GiB in 5503.4 us = 195.1 GB/s = 0.65 of 300 GB/s (the source's own '65% of spec')
    assert p[p.size_bytes == 2**30].iloc[0].efficiency == pytest.approx(0.6503, abs=5e-4)
    assert network_bytes_per_node("all_reduce", 100.0, 32, 4) == pytest.approx(150.0)  # 2·3/4
    assert network_bytes_per_node("all_gather", 100.0, 16, 2) == pytest.approx(50.0)
    assert network_bytes_per_node("alltoall", 100.0, 16, 2) == pytest.approx(8 * 100 * 8 / 16)
    assert latency_s("sendrecv", hw, 2, 2) == hw.ib_latency_s
