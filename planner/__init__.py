"""The planner: choose data, tensor and pipeline parallelism for large-model training."""

__version__ = "0.1.0"
