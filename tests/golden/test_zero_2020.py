"""Rajbhandari et al. 2020, ZeRO (arXiv:1910.02054): Figure 1 and Table 1."""

import pytest

from cost_models.enums import ZeroStage
from cost_models.memory import StateBytes, model_state_bytes
from cost_models.units import GB

MIXED_ADAM = StateBytes(weights=2, gradients=2, optimizer=12)   # K = 12 (Sec. 3.1)


def total_gb(num_params, dp, stage):
    return model_state_bytes(num_params=num_params, dp=dp, zero_stage=stage,
                             per_param=MIXED_ADAM).total / GB


# Figure 1: Psi = 7.5e9, N_d = 64. Printed in GB to 0.1, hence abs=0.05.
@pytest.mark.parametrize(("stage", "expected_gb"), [
    (ZeroStage.NONE, 120.0),
    (ZeroStage.OPTIMIZER_STATES, 31.4),
    (ZeroStage.GRADIENTS, 16.6),
    (ZeroStage.PARAMETERS, 1.9),
])
def test_zero2020_figure1(stage, expected_gb):
    assert total_gb(7.5e9, 64, stage) == pytest.approx(expected_gb, abs=0.05)


# Table 1: per-device GB for DP degrees 1, 4, 16, 64, 256, 1024. The 7.5B rows are printed
# to 0.1 GB (abs 0.05); the 1T row of P_os+g+p to 0.1 GB as well.
DP = (1, 4, 16, 64, 256, 1024)


@pytest.mark.parametrize(("stage", "row"), [
    (ZeroStage.OPTIMIZER_STATES, (120, 52.5, 35.6, 31.4, 30.4, 30.1)),
    (ZeroStage.GRADIENTS, (120, 41.3, 21.6, 16.6, 15.4, 15.1)),
    (ZeroStage.PARAMETERS, (120, 30, 7.5, 1.9, 0.5, 0.1)),
])
def test_zero2020_table1_7_5b(stage, row):
    for dp, expected in zip(DP, row):
        assert total_gb(7.5e9, dp, stage) == pytest.approx(expected, abs=0.05)


def test_zero2020_table1_1t_parameter_sharding():
    row = (16000, 4000, 1000, 250, 62.5, 15.6)
    for dp, expected in zip(DP, row):
        assert total_gb(1e12, dp, ZeroStage.PARAMETERS) == pytest.approx(expected, abs=0.05)
