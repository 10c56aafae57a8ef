"""The GEMM shape rule (`cost_models.compute.gemm_time_s`) against GEMM kernel times measured
on Hopper GPUs at their sustained clock (bench/device_kernels.py --sections gemm_grid:
bench/data/kernels_h100_gemm_grid.json, kernels_h200_gemm_grid.json).

The shape constants are FITTED on the H100 grid (bench/fit_gemm_shape.py): the first test
checks that every Hopper preset carries that fit. The H200 grid (the same die, faster HBM) is
held out: the H100's constants price it within the error of its own fit. The rule's claims
that pick strategies are checked on the measured times: tokens cost no rate on a wide GEMM, a
short reduction does."""

import pytest

from bench.fit_gemm_shape import DEFAULT, Grid, fit, priced_with
from cost_models.compute import Gemm, gemm_flops
from planner.inputs.loader import load_cluster

DATA = DEFAULT.parent


@pytest.fixture(scope="module")
def h100_fit():
    return fit(Grid.load(DATA / "kernels_h100_gemm_grid.json", preset="dgx-h100"))


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-h200", "dgx-h800"])
def test_hopper_presets_carry_the_h100_kernel_fit(h100_fit, preset):
    error, (_, half_k, fill_dim) = h100_fit
    assert error == pytest.approx(0.073, abs=0.002)
    eff = load_cluster(preset).efficiency
    assert (eff.gemm_half_efficiency_k, eff.gemm_fill_dim) == (half_k, fill_dim) == (170, 970)


def test_h200_grid_held_out_is_priced_by_the_h100_constants():
    # The H200's own fit: k 176, fill 940, RMS 0.083; the H100's constants, with only the rate
    # fitted there (749 TFLOP/s): RMS 0.085.
    grid = Grid.load(DATA / "kernels_h200_gemm_grid.json", preset="dgx-h200")
    assert len(grid.rows) == 567
    eff = load_cluster("dgx-h200").efficiency
    rate, error = priced_with(grid, half_k=eff.gemm_half_efficiency_k,
                              fill_dim=eff.gemm_fill_dim)
    assert error < 0.09
    assert 700e12 < rate < 800e12


def test_tokens_cost_no_rate_on_a_wide_gemm_and_a_short_k_does():
    # Measured: at k 4096 and n 8192, 1,024 tokens run within 10% of 8,192's rate (the former
    # min(m, n, k) rule with 512 charged 1,024 tokens 27% more than 8,192); at 8,192 tokens
    # and n 8192, k 512 runs at most 0.85 of k 4096's rate. The rule says the same.
    grid = Grid.load(DATA / "kernels_h100_gemm_grid.json", preset="dgx-h100")
    measured = {(r["m"], r["n"], r["k"]): r["bf16_s"] for r in grid.rows}
    modelled = dict(zip(measured, grid.times(rate=735e12, half_k=170, fill_dim=970)))
    for times in (measured, modelled):
        def rate(m, n, k):
            return gemm_flops(Gemm(m, n, k)) / times[(m, n, k)]
        assert rate(1024, 8192, 4096) / rate(8192, 8192, 4096) > 0.9
        assert rate(8192, 8192, 512) / rate(8192, 8192, 4096) < 0.85
