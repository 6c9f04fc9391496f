"""Hardware presets of the published runs of 2025 (issue 25): gb300-nvl72, b300, h200-nvl, mi325x, mi355x.

Each loads, carries a source for every section and table, and its key numbers are the ones its `source`
strings cite (vendor pages, the NVIDIA Blackwell Ultra blog, MLPerf Training v5.1 system JSONs); the GEMM
top is the MAMF row of ../shared/data/kernel_benchmarks.csv (h200-nvl, b300, gb300-nvl72: OpenXLA's measured
kernels, tests/test_xla_gemm.py); a Llama-3-70B estimate runs on each and lands where the datasheets put it against dgx-h100; `parasim hardware` lists them.
"""
import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from simulator.cli import cli
from simulator.estimate import estimate
from simulator.spec.hardware import load_hardware
from simulator.spec.layout import Layout
from simulator.spec.load import load_model
from simulator.spec.presets import read_toml, resolve
from simulator.spec.training import Training

ROOT = Path(__file__).resolve().parents[1]
NEW = ("gb300-nvl72", "b300", "h200-nvl", "mi325x", "mi355x")

# name: (model contains, dense bf16 TFLOP/s, hbm_gb as written, usable MiB or None, HBM TB/s,
#        NVLink/IF GB/s per direction per GPU, per link or peer, domain, gpus per node, topology, NVLS,
#        NICs per node, Gb/s per NIC, board W)
KEY = {
    # NVIDIA Blackwell Ultra blog (288 GB, 8 TB/s); GB300 NVL72 360 PF BF16 sparse / 72 / 2; MLPerf v5.1 Theia
    # (284208 MiB, 4x ConnectX-8 800G per 4-GPU tray, NVLink5 1800 GB/s); Lambda GB300 JSON (1400 W)
    "gb300-nvl72": ("GB300", 2500, 288, 284208, 8.0, 900, 50, 72, 4, "switch", True, 4, 800, 1400),
    # HGX B300 36 PF BF16 sparse / 8 / 2; MLPerf v5.1 Nebius B300 (275040 MiB, 8x ConnectX-8 800G, 1100 W)
    "b300": ("B300", 2250, 288, 275040, 8.0, 900, 50, 8, 8, "switch", True, 8, 800, 1100),
    # NVIDIA H200 page, NVL column: 1,671 TFLOPS BF16 with sparsity, 141 GB, 4.8 TB/s, 900 GB/s NVLink bridge
    # (2- or 4-way), 600 W; AI Enterprise RA 2-8-5 (4 east-west NICs per 8 GPUs)
    "h200-nvl": ("H200 NVL", 835.5, 141, 143771, 4.8, 450, 150, 4, 4, "mesh", False, 2, 400, 600),
    # AMD MI325X: 1,307.4 BF16 dense, 256 GB, 6 TB/s, 7 IF links (as MI300X), 1000 W; MangoBoost MLPerf 8 NICs
    "mi325x": ("MI325X", 1307.4, 256, None, 6.0, 448, 64, 8, 8, "mesh", False, 8, 400, 1000),
    # AMD MI355X: 256 CUs x 8192 FP8 FLOP/clk x 2.4 GHz / 2 = 2,516.6 BF16, 288 GB, 8 TB/s, 7 IF links of
    # 153.6 GB/s bidirectional, 1400 W; Pollara 400 one per GPU
    "mi355x": ("MI355X", 2516.6, 288, None, 8.0, 537.6, 76.8, 8, 8, "mesh", False, 8, 400, 1400),
}


@pytest.mark.parametrize("name", NEW)
def test_each_preset_loads_with_a_source_for_every_section_and_table(name):
    p = load_hardware(name)
    assert p.name == name
    assert set(p.sources) >= {"gpu", "node", "network", "peak_tflops", "board_power_w"}
    assert all(len(s) > 40 for s in p.sources.values())
    for table, curve in p.efficiency.items():
        assert len(curve.source) > 40, table
    # tables taken from another profile say so, naming it
    copied = [t for t, c in p.efficiency.items() if c.source.startswith("assumed: as ")]
    assert "network" in copied  # memory: copied, or from a published benchmark (validation/published_memory_tables.py)
    assert "memory" in copied or "published" in p.efficiency["memory"].source  # gpu-benches, KernelAgent-Oink
    for t in copied:
        other = p.efficiency[t].source.split()[2]
        assert load_hardware(other).efficiency_curve(t)[1].tolist() == p.efficiency_curve(t)[1].tolist(), (t, other)


@pytest.mark.parametrize("name", NEW)
def test_key_numbers_are_the_cited_ones(name):
    (model, bf16, hbm_gb, usable_mib, hbm_tb_s, nvlink, link, domain, per_node, topology, nvls, nics, gbit,
     watts) = KEY[name]
    p = load_hardware(name)
    raw = read_toml(resolve("hardware_profiles", name))
    assert model in p.gpu
    assert p.peak_flops("bf16") == pytest.approx(bf16 * 1e12)
    assert p.peak_flops("fp16") == p.peak_flops("bf16")
    assert p.peak_flops("fp8") == pytest.approx(2 * bf16 * 1e12, rel=1e-3)  # vendors round the two apart
    assert raw["gpu"]["hbm_gb"] == hbm_gb
    assert p.hbm_bytes == (usable_mib * 2**20 if usable_mib else hbm_gb * 1e9)
    assert p.hbm_bytes_per_s == pytest.approx(hbm_tb_s * 1e12)
    assert p.nvlink_bytes_per_s == pytest.approx(nvlink * 1e9)           # per direction: half the vendor's figure
    assert p.nvlink_link_bytes_per_s == pytest.approx(link * 1e9)
    assert (p.nvlink_domain_gpus, p.gpus_per_node, p.nvlink_topology, p.nvls) == (domain, per_node, topology, nvls)
    assert (p.nics_per_node, p.nic_bytes_per_s) == (nics, gbit * 1e9 / 8)
    assert p.board_power_w == watts


def test_vendor_bidirectional_figures_are_halved():
    # NVLink5 "1.8 TB/s" (GB300, B300), NVLink4 bridge "900 GB/s per GPU" (H200 NVL), IF 7 x 128 / 7 x 153.6 GB/s
    for name, bidir in [("gb300-nvl72", 1800), ("b300", 1800), ("h200-nvl", 900), ("mi325x", 7 * 128),
                        ("mi355x", 7 * 153.6)]:
        assert load_hardware(name).nvlink_bytes_per_s == pytest.approx(bidir / 2 * 1e9)
    # a mesh of k GPUs: the k-1 links to the peers make up the aggregate
    for name in ("h200-nvl", "mi325x", "mi355x"):
        p = load_hardware(name)
        assert (p.nvlink_domain_gpus - 1) * p.nvlink_link_bytes_per_s == pytest.approx(p.nvlink_bytes_per_s)


def _mamf(shared_data, gpu):
    with open(shared_data("kernel_benchmarks.csv")) as f:
        rows = [r for r in csv.DictReader(f) if (r["kind"], r["gpu"], r["dtype"]) == ("gemm", gpu, "bf16")
                and r["kernel"].startswith("torch.mm")]  # the MAMF (mamf-finder) row, not hipBLASLt's
    assert len(rows) == 1, gpu
    return float(rows[0]["tflops"])


@pytest.mark.parametrize("name,gpu,peak", [
    ("mi325x", "MI325X", 1307.4), ("mi355x", "MI355X", 2516.6),
])  # h200-nvl, b300 and gb300-nvl72 read OpenXLA's measured kernels (tests/test_xla_gemm.py)
def test_gemm_top_is_the_measured_mamf_fraction(shared_data, name, gpu, peak):
    top = _mamf(shared_data, gpu) / peak
    p = load_hardware(name)
    assert p.interp_efficiency("gemm", 1e13) == pytest.approx(top, abs=1e-4)
    # the roll-off below it is Calculon's step curve relative to its 0.95 top, as in every preset
    assert p.efficiency_curve("gemm")[1].tolist() == pytest.approx([top * f / 0.95 for f in (0.10, 0.60, 0.90, 0.95)],
                                                                   abs=1e-4)


def test_mi355x_peak_is_derived_from_amd_per_cu_rates():
    # 256 CUs x 8,192 FP8 FLOP/clock/CU x 2.4 GHz; BF16 half of it
    p = load_hardware("mi355x")
    assert p.peak_flops("fp8") == pytest.approx(256 * 8192 * 2.4e9, rel=1e-4)
    assert p.peak_flops("bf16") == pytest.approx(p.peak_flops("fp8") / 2, rel=1e-4)


def _llama3_70b(hw):
    """Llama-3-70B, 8k tokens, 128 sequences, TP4 x PP8 x DP2 on 64 GPUs: TP stays inside every preset's
    NVLink / Infinity Fabric domain (4 GPUs on h200-nvl) and the layout fits 80 GB H100s."""
    layout = Layout(num_gpus=64, tp=4, pp=8, zero=1, recompute="selective", sequence_parallel=True)
    return estimate(load_model("llama3-70b"), Training(seq_length=8192, global_batch_size=128), layout,
                    load_hardware(hw))


def test_llama3_70b_runs_on_each_and_lands_where_the_datasheets_put_it():
    e = {n: _llama3_70b(n) for n in (*NEW, "dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72", "mi300x")}
    for n in NEW:
        assert e[n].to_dict()["feasible"] and e[n].step_s > 0 and 0 < e[n].mfu < 1, n
    h100 = e["dgx-h100"]
    # Blackwell Ultra and CDNA 4: faster per GPU than an H100 (same GPU count, same job)
    for n in ("gb300-nvl72", "b300", "mi355x"):
        assert e[n].step_s < h100.step_s and e[n].compute_s < h100.compute_s, n
    # ... and than their predecessors
    assert e["b300"].step_s < e["dgx-b200"].step_s
    assert e["gb300-nvl72"].step_s < e["gb200-nvl72"].step_s
    assert e["gb300-nvl72"].step_s < e["b300"].step_s            # 2,500 vs 2,250 TFLOP/s, same NVLink5
    assert e["mi355x"].step_s < e["mi325x"].step_s
    # MI325X: MI300X's compute (1,307.4 TFLOP/s > H100's 989.4) with more HBM bandwidth: no slower than MI300X,
    # faster than H100 in compute; its 7-link mesh makes TP4 communication slower than H100's NVSwitch
    assert e["mi325x"].step_s <= e["mi300x"].step_s and e["mi325x"].compute_s < h100.compute_s
    # H200 NVL: the H200 die at 600 W and lower clocks (835.5 vs 989.4 TFLOP/s): slower than an H200 SXM and
    # than an H100 in compute
    assert e["h200-nvl"].step_s > e["dgx-h200"].step_s and e["h200-nvl"].compute_s > h100.compute_s


def test_tp_beyond_the_h200_nvl_bridge_goes_over_the_network():
    # TP8 on 4-GPU bridge domains: the TP all-reduces cross the 2 x 400 Gb/s NICs of each domain
    layout = Layout(num_gpus=64, tp=8, pp=2, zero=1, recompute="selective", sequence_parallel=True)
    t = Training(seq_length=8192, global_batch_size=128)
    nvl, sxm = (estimate(load_model("llama3-70b"), t, layout, load_hardware(n)) for n in ("h200-nvl", "dgx-h200"))
    assert nvl.exposed_comm_by_group_s["tp"] > 2 * sxm.exposed_comm_by_group_s["tp"]


def test_parasim_hardware_lists_them():
    res = CliRunner().invoke(cli, ["hardware", "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    for name in NEW:
        bf16 = KEY[name][1]
        assert rows[name]["bf16_tflops"] == pytest.approx(bf16)
        assert rows[name]["nvlink_domain_gpus"] == KEY[name][7]
    table = CliRunner().invoke(cli, ["hardware"])
    assert table.exit_code == 0 and all(n in table.output for n in NEW)


def test_docs_hardware_table_has_a_row_with_sources_for_each():
    doc = (ROOT / "docs" / "hardware.md").read_text()
    for name in NEW:
        rows = [line for line in doc.splitlines() if line.startswith(f"| {name} |")]
        assert len(rows) == 1, name
        assert "MLPerf" in rows[0] or "AMD" in rows[0] or "NVIDIA" in rows[0], rows[0]
