"""Narayanan et al. 2021 (arXiv:2104.04473), Table 1: the step-time model predicts the achieved
TFLOP/s per GPU of the ten weak-scaling runs with one set of A100 constants.

Targets from the step-time issue: mean absolute error under 5%, no run over 10%. The error
recorded when the constants were fitted (bench/calibrate_sc21.py) is pinned too, so a change to
the cost model that makes the calibration worse fails here and must say why.
"""

import pytest

from bench import sc21

RECORDED_MEAN_ERROR = 0.0146   # 1.86% -> 1.46% with the GEMM shape rule measured on H100 kernels
# (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)) and the A100 refitted
# 0.69 / 64 -> 0.715 / 170 (the half-efficiency k fitted here, 0-256, picks the kernels' 170).
# 0.0184 until the cross-node step constant was refitted 41 -> 35 ms
# 1.81% -> 1.84% when the per-step host term went 18 -> 0 ms (bench/calibrate_step_sync.py,
# refitted after the B200 took its own GEMM rate); the fit (0.69, 64) is unchanged.
# 1.80% -> 1.81% with the fixed per-step terms (cost_models/step_fixed.py: Megatron-LM's
# gradient-buffer memset, the gradient norm and clipping, the loss all-reduce): the small
# models' steps grow a little (gpt-1.7B -1.1% -> -1.4%); the fit (0.72, 128) is unchanged.
"""bench/calibrate_sc21.py with gemm_peak_fraction 0.72, gemm_half_efficiency_dim 128 (each row with its
script's DDP, `sc21.DDP_IMPL`): 1.80%."""


@pytest.fixture(scope="module")
def predictions():
    return sc21.predict()


def test_sc21_table1_has_ten_runs(predictions):
    assert [p.name for p in predictions] == [
        "gpt-1.7B", "gpt-3.6B", "gpt-7.5B", "gpt-18.4B", "gpt-39.1B", "gpt-76.1B",
        "gpt-145.6B", "gpt-310.1B", "gpt-529.6B", "gpt-1008.0B"]


def test_sc21_table1_no_run_is_off_by_more_than_10_percent(predictions):
    worst = max(predictions, key=lambda p: abs(p.error))
    assert abs(worst.error) < 0.10, worst


def test_sc21_table1_mean_error_under_5_percent_and_not_growing(predictions):
    error = sc21.mean_absolute_error(predictions)
    assert error < 0.05
    # Rounded to 0.01% when recorded: allow that rounding, nothing more.
    assert error <= RECORDED_MEAN_ERROR + 0.00005
