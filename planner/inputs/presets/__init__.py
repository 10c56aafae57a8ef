"""Cluster presets: one YAML file per system, with datasheet sources next to each number."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def names() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in resources.files(__name__).iterdir()
                  if p.name.endswith(".yaml"))


def path(name: str) -> Path:
    return Path(str(resources.files(__name__) / f"{name}.yaml"))
