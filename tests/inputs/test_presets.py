"""Every cluster preset loads, and the newer presets pin a few datasheet numbers against the
source their comment cites (dense TFLOP/s: half the sparse figure where the sheet gives that).
A preset whose efficiencies no run calibrated gets the assumed-preset band and note."""

from __future__ import annotations

import pytest

from planner.costing.uncertainty import RunKind, run_kinds, uncertainty_notes
from planner.inputs import presets
from planner.inputs.loader import load_cluster, make_problem


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_loads_and_names_its_sources(name):
    cluster = load_cluster(name)
    assert cluster.name == name
    assert cluster.source is not None and cluster.source.datasheets


# (preset, memory GiB, dense bf16 TFLOP/s, fp8, fp4, HBM GB/s, per-direction intra-node GB/s)
DATASHEET = [
    # DGX/HGX B300: BF16 36 PF and FP8 72 PF sparse, FP4 108 PF dense, per 8 GPUs; 8 TB/s;
    # NVLink 5 1.8 TB/s bidirectional; nvidia-smi 275040 MiB on B300 SXM6 AC.
    ("dgx-b300", 275040 / 1024, 36e3 / 2 / 8, 72e3 / 2 / 8, 108e3 / 8, 8000, 900),
    # GB300 NVL72: BF16 360 PF and FP8 720 PF sparse, FP4 1,080 PF dense, 576 TB/s, per 72.
    ("gb300-nvl72", 275040 / 1024, 360e3 / 2 / 72, 720e3 / 2 / 72, 1080e3 / 72, 576e3 / 72, 900),
    # H800 SXM: H100 SXM compute (989.4 / 1978.9 dense) and HBM; NVLink 400 GB/s bidirectional.
    ("dgx-h800", 81559 / 1024, 989.4, 1978.9, None, 3350, 400 / 2),
    # MI300X: 1307.4 / 2614.9 TFLOP/s dense, 5.3 TB/s, 7 xGMI links x 128 GB/s bidirectional;
    # rocm-smi VRAM 206141652992 B.
    ("amd-mi300x", 206141652992 / 2**30, 1307.4, 2614.9, None, 5300, 7 * 128 / 2),
    # MI325X: MI300X compute, 256 GiB HBM3E at 6 TB/s.
    ("amd-mi325x", 256, 1307.4, 2614.9, None, 6000, 7 * 128 / 2),
    # MI355X: 256 CUs x 2.4 GHz x 8192 FP8 FLOP/clk = 5033.2 TF, bf16 half, MXFP4 double;
    # 288 GiB at 8 TB/s; 7 xGMI links x 153.6 GB/s bidirectional.
    ("amd-mi355x", 288, 256 * 2.4e9 * 4096 / 1e12, 256 * 2.4e9 * 8192 / 1e12,
     256 * 2.4e9 * 16384 / 1e12, 8000, 7 * 153.6 / 2),
]


@pytest.mark.parametrize(("name", "memory_gib", "bf16", "fp8", "fp4", "hbm", "intra"), DATASHEET)
def test_preset_pins_its_datasheet(name, memory_gib, bf16, fp8, fp4, hbm, intra):
    gpu = load_cluster(name).gpu
    # Printed rounded to 0.01 GiB and 0.1 TFLOP/s: half the last digit.
    assert gpu.memory_gib == pytest.approx(memory_gib, abs=0.005)
    assert gpu.peak_tflops.bf16 == pytest.approx(bf16, abs=0.05)
    assert gpu.peak_tflops.fp8 == pytest.approx(fp8, abs=0.05)
    assert gpu.peak_tflops.fp4 == (None if fp4 is None else pytest.approx(fp4, abs=0.05))
    assert gpu.hbm_gb_per_s == pytest.approx(hbm)
    assert load_cluster(name).intra_node.bandwidth_gb_per_s == pytest.approx(intra)


def test_h800_is_h100_but_for_nvlink():
    h100, h800 = load_cluster("dgx-h100"), load_cluster("dgx-h800")
    assert h800.gpu.peak_tflops == h100.gpu.peak_tflops
    assert h800.gpu.hbm_gb_per_s == h100.gpu.hbm_gb_per_s
    assert h800.intra_node.bandwidth_gb_per_s == 200 < h100.intra_node.bandwidth_gb_per_s


def test_h200_has_its_own_hbm_and_h100_compute():
    h100, h200 = load_cluster("dgx-h100"), load_cluster("dgx-h200")
    assert h200.gpu.hbm_gb_per_s == 4800 and h100.gpu.hbm_gb_per_s == 3350
    assert h200.gpu.peak_tflops == h100.gpu.peak_tflops


NEW_ASSUMED = ["dgx-b300", "gb300-nvl72", "dgx-h800", "amd-mi300x", "amd-mi325x", "amd-mi355x"]


@pytest.mark.parametrize("name", NEW_ASSUMED)
def test_new_presets_are_flagged_assumed_with_a_band_and_note(name):
    problem = make_problem("llama3-8b", name, gpus=8)
    assert problem.cluster.source.calibration is None
    assert RunKind.ASSUMED_PRESET in run_kinds(problem, cp=1)
    (note,) = uncertainty_notes(problem, cp=1, step_s=10.0)
    assert f"{name}'s efficiencies are assumed" in note
