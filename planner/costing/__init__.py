"""Costing: place a model's blocks on pipeline stages and add up the cost_models per strategy."""
