"""The fused attention kernel's rate by keys and head dim, against kernel times measured on
Hopper GPUs (bench/data/kernels_h100.json and kernels_h200.json, bench/device_kernels.py on an
H100 and an H200).

The curve's two halves and the presets' reference shares are FITTED on those runs
(bench/fit_attention_rate.py), each preset on its own GPU's: these tests check that the presets
carry the fit of the data in the repository, and how closely the fitted curve follows each
point. The held-out check of the measured rates is tests/costing/test_attention_kernel.py."""

import pytest

from bench.fit_attention_rate import DEFAULT, attention_points, fit
from cost_models.compute import attention_kernel_fraction
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
