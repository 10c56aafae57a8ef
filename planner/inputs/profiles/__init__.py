"""Framework profiles: one YAML file per framework, read into `FrameworkProfile`."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml

from planner.schemas.framework import FrameworkProfile


def names() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in resources.files(__name__).iterdir()
                  if p.name.endswith(".yaml"))


@lru_cache(maxsize=None)
def load(name: str) -> FrameworkProfile:
    """The profile of a framework (a LaunchTarget value); a packaged file, so it is valid."""
    text = (resources.files(__name__) / f"{name}.yaml").read_text(encoding="utf-8")
    return FrameworkProfile.model_validate(yaml.safe_load(text))
