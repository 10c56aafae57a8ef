"""Analytical cost models: pure math on plain numbers and enums.

This package depends on numpy only. Every formula lives in exactly one function here and
cites its source; `planner` evaluates these functions and never re-derives them.
"""
