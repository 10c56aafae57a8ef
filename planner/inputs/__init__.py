"""Inputs: models, clusters and strategies read from YAML, Hugging Face configs, zoo names and presets."""
