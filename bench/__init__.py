"""Benchmarks and calibration scripts (run by hand, not by the test suite)."""
