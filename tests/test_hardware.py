"""HardwareProfile presets and loader: SI conversion, per-direction bandwidths, strict keys, curves."""
import copy

import numpy as np
import pytest

from simulator.errors import InputError
from simulator.cli.presets import list_hardware
from simulator.spec.hardware import hardware_from_dict, load_hardware
from simulator.spec.presets import read_toml, resolve

PRESETS = ["dgx-a100-40g", "dgx-a100-80g", "dgx-h100", "dgx-h800", "dgx-h200", "dgx-b200", "gb200-nvl72", "mi300x",
           "aws-p6-b200", "gcp-a3-mega"]


@pytest.mark.parametrize("name", PRESETS)
def test_every_binding_preset_loads_with_sources(name):
    p = load_hardware(name)
    assert p.name == name
    assert set(p.sources) >= {"gpu", "node", "network"} and all(p.sources.values())
    for curve in p.efficiency.values():
        assert curve.source


def test_h100_units_are_si_and_nvlink_is_per_direction():
    p = load_hardware("dgx-h100")
    assert p.hbm_bytes == 81559 * 2**20              # capacity CUDA sees (nvidia-smi 81559 MiB), not "80 GB"
    assert p.hbm_bytes / 2**30 == pytest.approx(79.65, abs=0.01)
    assert p.nvlink_bytes_per_s == 450e9             # NVIDIA's "900 GB/s" is bidirectional
    assert p.nic_bytes_per_s == 400e9 / 8            # NDR 400 Gb/s = 50 GB/s per direction
    assert p.peak_flops("bf16") == pytest.approx(989.4e12)
    assert p.nvls and p.gpus_per_node == 8


def test_a100_has_no_fp8_peak():
    with pytest.raises(InputError, match="fp8"):
        load_hardware("dgx-a100-80g").peak_flops("fp8")


def test_gemm_top_end_is_the_published_mamf_fraction():
    # formulas.md §6.3: H100 794.5/989, MI300X 781.9/1300 (the A100, Hopper and Blackwell presets read OpenXLA's
    # measured kernels instead; tests/test_xla_gemm.py holds them against the MAMF rows)
    for name, mamf in [("dgx-h100-datasheet", 794.5 / 989), ("mi300x", 781.9 / 1300)]:
        assert load_hardware(name).interp_efficiency("gemm", 1e13) == pytest.approx(mamf, abs=0.002)


def test_interp_efficiency_is_log_linear_and_clamped():
    p = load_hardware("dgx-h100")
    x, e = p.efficiency_curve("memory")               # 1e5..1e8 bytes
    mid = np.sqrt(x[1] * x[2])                        # halfway in log10
    got = p.interp_efficiency("memory", np.array([1.0, mid, 1e12]))
    np.testing.assert_allclose(got, [e[0], (e[1] + e[2]) / 2, e[-1]])


def test_ring_plateau_matches_the_nccl_maintainer_figure():
    # nccl-tests #212: ~370 GB/s busbw of 450 on H100 NVLink for ring collectives
    p = load_hardware("dgx-h100")
    assert p.interp_efficiency("nvlink_ring", 16 * 2**30) * 450 == pytest.approx(370, abs=1)


def _raw(name="dgx-h100"):
    return read_toml(resolve("hardware_profiles", name))


def test_unknown_key_is_rejected_with_a_hint():
    d = _raw()
    d["node"]["nvlink_gbps"] = 1
    with pytest.raises(InputError, match="nvlink_gbps"):
        hardware_from_dict(d, where="x.toml")


def test_missing_key_is_rejected():
    d = _raw()
    del d["gpu"]["hbm_gb"]
    with pytest.raises(InputError, match="hbm_gb"):
        hardware_from_dict(d, where="x.toml")


def test_unknown_preset_suggests_close_names():
    with pytest.raises(InputError, match="dgx-h100"):
        load_hardware("dgx-h10")


def test_bad_values_raise_input_error():
    d = _raw()
    d["node"]["nvlink_gb_per_s"] = -1
    with pytest.raises(InputError, match="nvlink"):
        hardware_from_dict(d, where="x.toml")
    d = _raw()
    d["efficiency"]["gemm"]["x"] = sorted(d["efficiency"]["gemm"]["x"], reverse=True)
    with pytest.raises(InputError, match="increase"):
        hardware_from_dict(d, where="x.toml")


def test_provenance_section_is_accepted_for_measured_profiles():
    d = _raw()
    d["provenance"] = {"device": "H100 SXM", "versions": "torch 2.13", "date": "2025-01-01", "protocol": "mamf"}
    p = hardware_from_dict(copy.deepcopy(d), where="measured.toml")
    assert p.provenance["device"] == "H100 SXM"


def test_profile_is_frozen_and_mappings_read_only():
    p = load_hardware("dgx-h100")
    with pytest.raises(Exception):
        p.hbm_bytes = 1
    with pytest.raises(TypeError):
        p.peak_flops_per_s["bf16"] = 1


def test_list_hardware_has_one_row_per_preset():
    df = list_hardware()
    assert set(PRESETS) <= set(df.name)
    row = df.set_index("name").loc["dgx-h100"]
    assert row.nvlink_gb_per_s_per_dir == 450 and row.bf16_tflops == pytest.approx(989.4)


def test_usable_capacity_is_optional_and_falls_back_to_the_datasheet():
    p = load_hardware("dgx-b200")  # no hbm_usable_mib in its profile
    assert p.hbm_bytes == pytest.approx(180e9, rel=0.1)


def test_the_h100_preset_ships_measured_tables_and_the_datasheet_ones_are_an_opt_in():
    """dgx-h100's optimizer table is the faster of the two H100 calibrations at each point (validation/h100/
    lent-opt.toml, lent2.toml), its GEMM table the back-to-back measurement (validation/h100_gemm_table.py,
    tests/test_h100_gemm_table.py), its memory table the kernels timed inside CUDA graphs on the lent H100
    (validation/h100_memory_table.py, tests/test_h100_memory_table.py), not datasheet figures."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "validation" / "h100"
    a, b = (tomllib.load(open(root / f, "rb"))["efficiency"] for f in ("lent-opt.toml", "lent2.toml"))
    hw, ds = load_hardware("dgx-h100"), load_hardware("dgx-h100-datasheet")
    assert "gpu_graphed.py" in hw.efficiency["memory"].source
    x, e = hw.efficiency_curve("optimizer")
    assert list(x) == a["optimizer"]["x"]
    want = [max(p, q) for p, q in zip(a["optimizer"]["efficiency"], b["optimizer"]["efficiency"])]
    assert list(e) == pytest.approx(want, rel=1e-3)
    # the GEMM table on the calibrations' knots: from 1e11 FLOPs never faster than their burst (back to back at the
    # power limit), below faster (their one-call times held the host's issue, which the launch bound charges)
    bx = a["gemm"]["x"]
    burst = dict(zip(bx, (max(p, q) for p, q in zip(a["gemm"]["efficiency"], b["gemm"]["efficiency"]))))
    x, e = hw.efficiency_curve("gemm")
    on = [(k, float(v)) for k, v in zip(x, e) if float(k) in burst]
    assert len(on) >= 5
    assert all(v <= burst[k] * 1.001 for k, v in on if k >= 1e11)
    assert all(v > burst[k] for k, v in on if k < 1e10)
    for name in ("gemm", "optimizer"):
        assert "measured" in hw.efficiency[name].source
    assert "MAMF" in ds.efficiency["gemm"].source
