"""The fused attention kernel's rate by keys and head dim, against kernel times measured on
Hopper GPUs (bench/data/kernels_h100.json and kernels_h200.json, bench/device_kernels.py on an
H100 and an H200).

The curve's two halves and the presets' reference shares are FITTED on those runs
(bench/fit_attention_rate.py), each preset on its own GPU's: these tests check that the presets
carry the fit of the data in the repository, and how closely the fitted curve follows each
point. The held-out check of the measured rates is tests/costing/test_attention_kernel.py."""

import json

import numpy as np
import pytest

from bench.fit_attention_rate import DEFAULT, attention_points, fit, sink_points
from cost_models.compute import attention_kernel_fraction, attention_sink_backward_s
from planner.inputs.loader import load_cluster


FILES = {"kernels_h100.json": ("NVIDIA H100 80GB HBM3", ("dgx-h100", "dgx-h800")),
         "kernels_h200.json": ("NVIDIA H200", ("dgx-h200",))}


@pytest.fixture(scope="module", params=sorted(FILES))
def measured(request):
    gpu, points = attention_points(DEFAULT.parent / request.param)
    return request.param, gpu, points, fit(points)


def test_reference_point_is_the_preset_share():
    assert attention_kernel_fraction(keys=4096, head_dim=128, reference_fraction=0.5,
                                     half_keys=450, half_head_dim=28) == pytest.approx(0.5)


def test_zero_halves_keep_the_rate_flat():
    for keys, d in ((64, 64), (512, 128), (65536, 192)):
        assert attention_kernel_fraction(keys=keys, head_dim=d, reference_fraction=0.4,
                                         half_keys=0, half_head_dim=0) == pytest.approx(0.4)


def test_rate_grows_with_keys_and_head_dim():
    rate = [attention_kernel_fraction(keys=k, head_dim=128, reference_fraction=0.5,
                                      half_keys=450, half_head_dim=28)
            for k in (128, 512, 2048, 8192, 32768)]
    assert rate == sorted(rate) and rate[-1] < 0.5 * (1 + 450 / 4096)
    assert attention_kernel_fraction(keys=4096, head_dim=64, reference_fraction=0.5,
                                     half_keys=450, half_head_dim=28) < 0.5


def test_hopper_presets_carry_the_fit(measured):
    """The constants in each Hopper preset are what the fit of its GPU's run gives (fitted)."""
    name, gpu, _, best = measured
    assert gpu == FILES[name][0]
    for preset in FILES[name][1]:
        eff = load_cluster(preset).efficiency
        assert eff.attention_half_keys == best["half_keys"]
        assert eff.attention_half_head_dim == best["half_head_dim"]
        assert eff.flash_attention_fraction == pytest.approx(best["reference"]["flash"], abs=0.01)
        assert eff.flash2_attention_fraction == pytest.approx(best["reference"]["flash2"],
                                                              abs=0.01)


def test_fitted_curve_follows_every_measured_point(measured):
    """cuDNN from 0.26-0.30 of peak at 1K to 0.56 at 64K, and head dim 64, within 6% (fitted)."""
    _, _, points, best = measured
    assert len(points) == 18
    for p in points:
        curve = attention_kernel_fraction(
            keys=p["keys"], head_dim=p["head_dim"],
            reference_fraction=best["reference"][p["kernel"]], half_keys=best["half_keys"],
            half_head_dim=best["half_head_dim"])
        assert curve == pytest.approx(p["fraction"], rel=0.06), p


# Attention sinks: what cuDNN's backward adds for a learnable softmax offset.
SINKS_FITTED = DEFAULT.parent / "kernels_h200_cudnn.json"
SINKS_HELD_OUT = DEFAULT.parent / "kernels_h100_cudnn.json"


def test_sink_constant_is_the_h200_fit():
    """Fitted: the Hopper presets' per-row time is the median of the H200 shapes."""
    row_s = float(np.median([p["extra_s"] / p["rows"] for p in sink_points(SINKS_FITTED)[1]]))
    for preset in ("dgx-h200", "dgx-h100", "dgx-h800"):
        assert load_cluster(preset).efficiency.attention_sink_row_s == pytest.approx(row_s,
                                                                                   rel=0.01)


def test_sink_backward_against_held_out_h100_kernels():
    """Held out: the H100 run's 16 shapes (8-64 heads, head dim 64 and 128, 4K-16K tokens,
    full causal and 128-key windows), none in the fit, within 15% of rows x heads x the
    constant: the sink's cost does not depend on the keys, the head dim or the length."""
    gpu, points = sink_points(SINKS_HELD_OUT)
    assert gpu.startswith("NVIDIA H100") and len(points) == 16
    row_s = load_cluster("dgx-h100").efficiency.attention_sink_row_s
    rows = json.loads(SINKS_HELD_OUT.read_text())["rows"]
    for r in rows:
        if r.get("section") != "cudnn" or not r.get("sink") or "bwd_s" not in r:
            continue
        base = next(b for b in rows if b.get("section") == "cudnn" and not b.get("sink")
                    and b.get("shape") == r["shape"] and b.get("batch") == r["batch"]
                    and b.get("window") == r["window"])
        model = attention_sink_backward_s(seq_len=r["seq"], micro_batch=r["batch"],
                                          num_heads=r["heads"], tp=1, row_s=row_s)
        assert model == pytest.approx(r["bwd_s"] - base["bwd_s"], rel=0.15), r["shape"]
        assert r["fwd_s"] == pytest.approx(base["fwd_s"], rel=0.1)   # the forward: unchanged


def test_sink_backward_is_per_rank_rows_times_heads():
    # gpt-oss-120b, micro-batch 4 of 4,096 tokens, 64 heads at tp 1 and 2.
    one = attention_sink_backward_s(seq_len=4096, micro_batch=4, num_heads=64, tp=1,
                                    row_s=1.62e-9)
    assert one == pytest.approx(4 * 4096 * 64 * 1.62e-9)          # 1.70 ms
    assert attention_sink_backward_s(seq_len=4096, micro_batch=4, num_heads=64, tp=2,
                                     row_s=1.62e-9) == pytest.approx(one / 2)
