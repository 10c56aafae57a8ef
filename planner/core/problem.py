"""What a plan is for: a model with its training settings, on some GPUs of a cluster, run by a
framework."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cost_models.enums import AttentionKind
from cost_models.units import GiB

DEFAULT_MIN_FREE_GIB = 2.0
"""Least memory the default margin keeps free per GPU, GiB: what the model leaves out and
grows with the job, not with the GPU (NCCL communicators created lazily, cuBLAS and cuDNN
workspaces per stream), beside the CUDA context its reserve already counts."""

DEFAULT_MIN_FREE_FRACTION = 0.03
"""Share of a GPU's memory the default margin keeps free on large GPUs: allocator spikes (the
caching allocator rounds and splits its largest blocks) beyond the mean fragmentation the
reserve counts (`ReserveSpec.fragmentation_fraction`), and the model's own error on measured
peaks (4.3% mean on BLOOM's 93 runs, tests/golden/test_published_runs.py)."""


def default_min_free_bytes(capacity_bytes: float) -> float:
    """Bytes the default margin keeps free on a GPU of `capacity_bytes`: max(2 GiB, 3%)."""
    return max(DEFAULT_MIN_FREE_GIB * GiB, DEFAULT_MIN_FREE_FRACTION * capacity_bytes)


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
    min_free_bytes: float | None = None
    """Memory every GPU keeps free (--min-free): a safety margin under the allocator's peaks
    that the model does not see (NCCL buffers grown at scale, fragmentation spikes). None: the
    default margin (`default_min_free_bytes`), which the search keeps wherever a plan can
    (`with_margin`) and which `validate` and `memory` warn about but do not fail on."""

    def __post_init__(self) -> None:
        # The layers the run keeps out of FP8 are priced as their own block types: mark them
        # on the chain (`ModelSpec.with_bf16_layers`), again whenever the training changes.
        t = self.training
        object.__setattr__(self, "model", self.model.with_bf16_layers(t.bf16_first_layers,
                                                                      t.bf16_last_layers))

    @property
    def attention(self) -> AttentionKind:
        """The attention kernel of the run's transformer layers: the training setting's, else
        the framework's default (a run setting, not the model's: `TrainingSpec.attention`)."""
        return self.training.attention_kernel(self.framework,
                                              sinks=self.model.has_attention_sinks)

    @property
    def eager_elementwise(self) -> bool:
        """The layers' memory-bound ops run as eager PyTorch ops (training.compile false, or
        the framework's default; `TrainingSpec.eager_elementwise`)."""
        return self.training.eager_elementwise(self.framework)

    @property
    def eager_loss(self) -> bool:
        """The loss runs as PyTorch's eager cross entropy (`TrainingSpec.eager_loss`)."""
        return self.training.eager_loss(self.framework)

    @property
    def tp_overlap_runs(self) -> bool:
        """The framework overlaps TP collectives with GEMMs in this run: it has the overlap,
        and the model is compiled where its overlap needs that (torchtitan's async TP)."""
        fw = self.framework
        return fw.tp_comm_overlap and not (fw.tp_comm_overlap_needs_compile
                                           and self.eager_elementwise)

    @property
    def job(self) -> str:
        """The job in a headline: the model on the GPUs (with their memory)."""
        gpu = self.cluster.gpu
        return f"{self.model.name} on {self.num_gpus} x {gpu.name} ({gpu.memory_gib:g} GiB)"

    @property
    def usable_bytes(self) -> float:
        """GPU memory a plan may fill: the capacity less the margin the user asked to keep
        free (all of it under the default margin, which only warns)."""
        return float(self.cluster.capacity_bytes) - (self.min_free_bytes or 0.0)

    @property
    def margin_bytes(self) -> float:
        """The margin in effect: --min-free as given, else the default one."""
        if self.min_free_bytes is not None:
            return self.min_free_bytes
        return default_min_free_bytes(float(self.cluster.capacity_bytes))

    @property
    def default_margin(self) -> bool:
        """No --min-free given: the default margin applies."""
        return self.min_free_bytes is None

    def with_margin(self) -> Problem:
        """The problem with its margin made hard (what the search plans under)."""
        return replace(self, min_free_bytes=self.margin_bytes)
