"""The fit: known constants recovered from runs the planner itself priced under them, the
linearised standard errors against their closed form, refusals of what the runs cannot
determine, and physical bounds held."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.calibrate import fit
from planner.errors import InfeasibleError, InputError
from planner.inputs.loader import load_cluster
from tests.calibrate.calibration_cases import TRUE_CONSTANTS, synthetic_runs

FOUR = tuple(path.split(".")[1] for path in TRUE_CONSTANTS)


def test_recovers_the_constants_the_runs_were_made_with(measured):
    calibration = fit.calibrate(load_cluster("dgx-h100"), measured, FOUR)
    for c in calibration.constants:
        assert c.before == fit.settings().constants[c.constant.name].value(
            load_cluster("dgx-h100"))
        assert c.after == pytest.approx(TRUE_CONSTANTS[c.constant.path], abs=1e-3)
        assert 0 < c.standard_error < 0.1 * (c.constant.upper - c.constant.lower)
        assert not c.at_bound
    # The preset is 14-58% off on these runs; the fit leaves rounding (4 digits) only.
    assert calibration.mean_abs_error("before") > 0.3
    assert calibration.mean_abs_error("after") < 1e-3
    assert calibration.cluster.efficiency.gemm_peak_fraction == pytest.approx(0.50, abs=1e-3)


def test_standard_errors_follow_the_closed_form():
    # J = diag(a, b): se_j = sigma / |J_jj| (Press et al. Eq. 15.5.15 with J^T J diagonal).
    J = np.array([[2.0, 0.0], [0.0, 0.5], [0.0, 0.0]])
    assert fit.standard_errors(J, 0.02) == pytest.approx([0.01, 0.04])
    # Two parallel columns: their difference is free, both errors explode.
    J = np.array([[1.0, 2.0], [0.5, 1.0]])
    assert min(fit.standard_errors(J, 0.02)) > 1e6
    # One row, one column: the linear case, se = sigma / slope.
    assert fit.standard_errors(np.array([[0.25]]), 0.02) == pytest.approx([0.08])


STEP_CONSTANTS = tuple(name for name, c in fit.settings().constants.items()
                       if c.measures == "step")


def test_refuses_constants_the_runs_cannot_tell_apart(measured):
    with pytest.raises(InfeasibleError) as refused:
        fit.calibrate(load_cluster("dgx-h100"), measured, STEP_CONSTANTS)
    lines = refused.value.details
    assert str(refused.value) == "6 measurements cannot determine 8 constants"
    # Tensor-parallel all-reduces ride NVLink in two runs only, briefly: nothing pins it.
    assert any(line.startswith("no run depends on intra_node_bus_fraction enough") and
               "tensor parallelism 1 and 8" in line for line in lines)
    assert any("cannot tell gemm_half_efficiency_k apart from gemm_peak_fraction" in line
               for line in lines)
    fix = lines[-1]
    assert fix.startswith("these the runs do determine: --fit ")
    subset = tuple(fix.split("--fit ")[1].split(","))
    assert "gemm_peak_fraction" in subset and "intra_node_bus_fraction" not in subset
    # ... and the subset it names fits: what a fit without names does, keeping the others
    # with the same reasons.
    named = fit.calibrate(load_cluster("dgx-h100"), measured, subset)
    default = fit.calibrate(load_cluster("dgx-h100"), measured)
    assert [c.constant.name for c in default.constants] == list(subset)
    assert [c.after for c in default.constants] == [c.after for c in named.constants]
    assert [why for _, why in default.not_fitted] == lines[:-1]
    assert {name for name, _ in default.not_fitted} | set(subset) == set(STEP_CONSTANTS)
    assert named.not_fitted == []


def test_refused_when_nothing_is_determined_only_when_nothing_is_determined(measured):
    # One run on one node without tensor parallelism: NVLink carries only its overlapped
    # gradient reduction, so its step barely moves with the NVLink bus fraction.
    with pytest.raises(InfeasibleError) as refused:
        fit.calibrate(load_cluster("dgx-h100"), measured[:1], ("intra_node_bus_fraction",))
    assert refused.value.details[-1] == "no constant is determined by these runs alone"


def test_one_run_cannot_split_two_compute_constants(measured):
    with pytest.raises(InfeasibleError) as refused:
        fit.calibrate(load_cluster("dgx-h100"), measured[:1],
                      ("gemm_peak_fraction", "flash_attention_fraction"))
    assert str(refused.value) == "1 measurement cannot determine 2 constants"
    assert refused.value.details[-1] == "these the runs do determine: --fit gemm_peak_fraction"


def test_one_run_one_constant_is_exact(measured):
    # n = p: no scatter to learn from; the error is the assumed noise through the slope.
    calibration = fit.calibrate(load_cluster("dgx-h100"), measured[:1], ("gemm_peak_fraction",))
    (c,) = calibration.constants
    assert calibration.mean_abs_error("after") < 1e-3
    run = calibration.runs[0]
    assert run.after.step_s == pytest.approx(measured[0].step_s, rel=1e-3)
    assert c.standard_error > 0


def test_a_run_slower_than_physics_allows_stops_at_the_bound():
    runs = synthetic_runs({"efficiency.gemm_peak_fraction": 0.05})[:2]   # 5% of peak
    calibration = fit.calibrate(load_cluster("dgx-h100"), runs, ("gemm_peak_fraction",))
    (c,) = calibration.constants
    assert c.after == 0.2 and c.at_bound
    assert calibration.mean_abs_error("after") > 0.3


def test_peak_memory_fits_the_reserve(measured):
    # peak = framework + (1 + fragmentation) x allocated (stage_costs.py): two unknowns,
    # linear, recovered from runs that allocate different amounts.
    true = {"reserve.framework_gib": 3.5, "reserve.fragmentation_fraction": 0.12}
    runs = synthetic_runs(true, peaks=True)
    calibration = fit.calibrate(load_cluster("dgx-h100"), runs,
                                ("framework_gib", "fragmentation_fraction"))
    got = {c.constant.path: c.after for c in calibration.constants}
    assert got == pytest.approx(true, rel=2e-3)
    assert calibration.mean_abs_error("after", "peak") < 1e-3
    assert calibration.mean_abs_error("before", "peak") > 0.01


def test_unknown_constant_names_the_closest(measured):
    with pytest.raises(InputError, match=r"no constant named 'gemm_peak' \(did you mean "
                                         r"'gemm_peak_fraction'\?\)"):
        fit.calibrate(load_cluster("dgx-h100"), measured, ("gemm_peak",))


def test_a_memory_constant_needs_a_measured_peak(measured):
    with pytest.raises(InputError, match="no run measured peak_gib"):
        fit.calibrate(load_cluster("dgx-h100"), measured, ("framework_gib",))


def test_constants_data_is_within_physics():
    settings = fit.settings()
    assert 0 < settings.measurement_noise < 0.1
    for name, c in settings.constants.items():
        assert c.lower < c.upper and c.measures in ("step", "peak") and c.needs
        assert name == c.path.split(".")[1]
    # Every preset's own values are inside the bounds: a fit starts from a possible cluster.
    from planner.inputs import presets
    for preset in presets.names():
        cluster = load_cluster(preset)
        for c in settings.constants.values():
            assert c.lower <= c.value(cluster) <= c.upper, (preset, c.name)
    assert not math.isnan(settings.determined_range_fraction)


def test_without_names_the_fit_picks_what_made_the_runs(measured):
    # Forward selection with the Akaike price: the four constants the runs were made with,
    # none of the four they were not.
    calibration = fit.calibrate(load_cluster("dgx-h100"), measured)
    got = {c.constant.path: c.after for c in calibration.constants}
    assert got == pytest.approx(TRUE_CONSTANTS, abs=1e-3)
    assert len(calibration.not_fitted) == 4


def test_runs_the_cluster_already_prices_fit_nothing():
    preset = load_cluster("dgx-h100")
    runs = synthetic_runs({"efficiency.gemm_peak_fraction": preset.efficiency.gemm_peak_fraction})
    calibration = fit.calibrate(preset, runs)
    assert calibration.constants == [] and calibration.cluster == preset
    assert calibration.mean_abs_error("after") == calibration.mean_abs_error("before") < 1e-12
    assert any("need no other gemm_peak_fraction" in why for _, why in calibration.not_fitted)
