"""Built-in model descriptions: one YAML file per model, each with its `source:` block."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def names() -> list[str]:
    """Sorted names of the zoo's models (file names without .yaml)."""
    return sorted(p.name[: -len(".yaml")] for p in resources.files(__name__).iterdir()
                  if p.name.endswith(".yaml"))


def path(name: str) -> Path:
    """Path of a zoo model's YAML file."""
    return Path(str(resources.files(__name__) / f"{name}.yaml"))
