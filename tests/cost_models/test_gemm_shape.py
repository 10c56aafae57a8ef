"""The GEMM shape rule (`cost_models.compute.gemm_time_s`) against GEMM kernel times measured
on Hopper GPUs at their sustained clock (bench/device_kernels.py --sections gemm_grid:
bench/data/kernels_h100_gemm_grid.json, kernels_h200_gemm_grid.json).

The shape constants are FITTED on the H100 grid (bench/fit_gemm_shape.py): the first test
checks that every Hopper preset carries that fit. The H200 grid (the same die, faster HBM) is
held out: the H100's constants price it within the error of its own fit. The rule's claims
that pick strategies are checked on the measured times: tokens cost no rate on a wide GEMM, a
short reduction does."""

import json

import numpy as np
import pytest

from bench import fit_gemm_shape
from cost_models.compute import Gemm
from planner.inputs.loader import load_cluster

DATA = fit_gemm_shape.DEFAULT.parent


def _rows(name: str) -> list[dict]:
    rows = json.loads((DATA / name).read_text())["rows"]
    return [r for r in rows if r.get("section") == "gemm_grid" and "bf16_s" in r
            and r["m"] >= fit_gemm_shape.MIN_TOKENS]


def _grid(rows):
    return Gemm(*(np.array([r[key] for r in rows], float) for key in ("m", "n", "k")))


@pytest.fixture(scope="module")
def h100_fit():
    return fit_gemm_shape.fit(_rows("kernels_h100_gemm_grid.json"))


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-h200", "dgx-h800"])
def test_hopper_presets_carry_the_h100_kernel_fit(h100_fit, preset):
    error, (_, half_k, fill_dim) = h100_fit
    assert error == pytest.approx(0.073, abs=0.002)
    eff = load_cluster(preset).efficiency
    assert (eff.gemm_half_efficiency_k, eff.gemm_fill_dim) == (half_k, fill_dim) == (170, 970)


def test_h200_grid_held_out_is_priced_by_the_h100_constants():
    # The H200's own fit: k 176, fill 940, RMS 0.083; the H100's constants, with only the rate
    # fitted there (749 TFLOP/s): RMS 0.085.
    rows = _rows("kernels_h200_gemm_grid.json")
    assert len(rows) == 567
    cluster = load_cluster("dgx-h200")
    hbm = dict(fit_gemm_shape.HBM)
    fit_gemm_shape.HBM.update(hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9,
                              hbm_fraction=cluster.efficiency.hbm_fraction)
    try:
        grid, measured = _grid(rows), np.array([r["bf16_s"] for r in rows])
        eff = cluster.efficiency
        shape = dict(half_k=eff.gemm_half_efficiency_k, fill_dim=eff.gemm_fill_dim)
        rate = fit_gemm_shape._best_rate(
            measured, lambda r: fit_gemm_shape._times(grid, rate=r, **shape), 3e14, 2e15)
        error = fit_gemm_shape._rms(fit_gemm_shape._times(grid, rate=rate, **shape), measured)
    finally:
        fit_gemm_shape.HBM.update(hbm)
    assert error < 0.09
    assert 700e12 < rate < 800e12


def test_tokens_cost_no_rate_on_a_wide_gemm_and_a_short_k_does():
    # Measured: at k 4096 and n 8192, 1,024 tokens run within 10% of 8,192's rate (the former
    # min(m, n, k) rule with 512 charged 1,024 tokens 27% more than 8,192); at 8,192 tokens
    # and n 8192, k 512 runs at most 0.85 of k 4096's rate. The rule says the same.
    rows = {(r["m"], r["n"], r["k"]): r for r in _rows("kernels_h100_gemm_grid.json")}

    def rate(m, n, k):
        return 2 * m * n * k / rows[(m, n, k)]["bf16_s"]

    assert rate(1024, 8192, 4096) / rate(8192, 8192, 4096) > 0.9
    assert rate(8192, 8192, 512) / rate(8192, 8192, 4096) < 0.85
    shape = dict(half_k=170, fill_dim=970, rate=735e12)

    def model(m, n, k):
        g = Gemm(m, n, k)
        return 2 * m * n * k / fit_gemm_shape._times(g, **shape)

    assert model(1024, 8192, 4096) / model(8192, 8192, 4096) > 0.9
    assert model(8192, 8192, 512) / model(8192, 8192, 4096) < 0.85
