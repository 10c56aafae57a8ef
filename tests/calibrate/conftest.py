import pytest

from tests.calibrate.calibration_cases import synthetic_runs


@pytest.fixture(scope="module")
def measured():
    """The synthetic runs of calibration_cases, made under TRUE_CONSTANTS."""
    return synthetic_runs()
