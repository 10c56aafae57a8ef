"""Typed inputs (model, cluster, strategy) and outputs (reports)."""
