"""What a plan is for: a model with its training settings, on some GPUs of a cluster, run by a
framework."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.schemas.cluster import ClusterSpec
    from planner.schemas.framework import FrameworkProfile
    from planner.schemas.model import ModelSpec, TrainingSpec


@dataclass(frozen=True)
class Problem:
    """What a plan is for: a model with its training settings, on `num_gpus` GPUs of a cluster,
    run by a framework (whose profile sets which overlaps exist and its constants)."""

    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    num_gpus: int
    framework: FrameworkProfile
    """The framework that runs the job (its profile sets which overlaps exist)."""
    notes: tuple[str, ...] = ()
    """What the loader decided that the user should know (a batch rounded to whole sequences,
    a sequence longer than the model was built for)."""
    min_free_bytes: float = 0.0
    """Memory every GPU keeps free (--min-free): a safety margin under the allocator's peaks
    that the model does not see (NCCL buffers grown at scale, fragmentation spikes)."""

    @property
    def usable_bytes(self) -> float:
        """GPU memory a plan may fill: the capacity less the margin kept free."""
        return float(self.cluster.capacity_bytes) - self.min_free_bytes
