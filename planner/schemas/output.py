"""The whole outputs of `planner plan --json` and `planner validate --json`, which the Python
API (`planner.plan`, `planner.validate`) returns as these objects.

`--json` is `json.dumps(output.model_dump(mode="json"), indent=2)` of them (with two keys left
out where they do not apply, see `PlanOutput`); `planner schema report` prints their JSON
Schema.
"""

from __future__ import annotations

from pydantic import BaseModel

from planner.schemas.report import (OUTPUT_CONFIG, MemoryReport, PlanReport, SearchReport,
                                    ThroughputReport, TimeReport, Violation)
from planner.schemas.strategy import Strategy


class ParamCounts(BaseModel):
    model_config = OUTPUT_CONFIG
    total: int
    """Parameters of the model (without multi-token-prediction modules)."""
    active: int
    """Parameters one token's forward pass uses (total for a dense model)."""


class RunHead(BaseModel):
    """What was planned, on what: the keys every --json output starts with."""

    model_config = OUTPUT_CONFIG
    model: str
    params: ParamCounts
    cluster: str
    num_gpus: int
    framework: str
    """The framework whose profile priced the job."""
    global_batch: int
    """Sequences per step."""
    seq_len: int
    precision: str
    fp8_recipe: str | None
    attention: str
    """The attention kernel: flash (fused) or unfused."""
    eager: bool = False
    """The layers' memory-bound ops run as eager PyTorch ops (training.compile false on
    torchtitan): priced per op, not fused."""
    eager_loss: bool = False
    """The loss runs as PyTorch's eager cross entropy, more fp32 copies of the logits at its
    peak (torchtitan with the loss not compiled; `TrainingSpec.eager_loss`)."""
    fp8_attention: bool
    fp8_output_layer: bool
    bf16_first_layers: int
    bf16_last_layers: int
    notes: list[str]
    """What the planner assumed or would have you know (also printed as `note:` lines)."""


class DpCommError(BaseModel):
    model_config = OUTPUT_CONFIG
    error: str
    """Why no plan uses this data-parallel exchange."""


class TargetOut(BaseModel):
    """The plan one launch target's files (`--emit`) were written from."""

    model_config = OUTPUT_CONFIG
    target: str
    framework: str
    rank: int
    plan: PlanReport
    files: list[str]


class PlanOutput(RunHead):
    """`planner plan`: the ranked plans and how the search went.

    `targets` is left out of --json unless there are several --emit targets' plans, and
    `dp_comm` unless --dp-comm both."""

    plans: list[PlanReport]
    """The fastest plans, ranked (`--top`)."""
    search: SearchReport
    emitted: list[str] = []
    """Files --emit wrote."""
    targets: list[TargetOut] | None = None
    dp_comm: dict[str, PlanReport | DpCommError] | None = None
    """With --dp-comm both: the best plan of each data-parallel exchange, or why none."""

    @property
    def best(self) -> PlanReport:
        return self.plans[0]


class ValidateOutput(RunHead):
    """`planner validate`: a config's problems, memory, time and distance to the best plan."""

    file: str
    """The config file, as given (or `<strategy>` for a strategy passed as an object)."""
    target: str | None
    """The framework the file is written for (None: a strategy.yaml)."""
    valid: bool
    """No rule broken and it fits."""
    violations: list[Violation]
    strategy: Strategy
    """The strategy the file describes, every degree resolved."""
    memory: MemoryReport | None
    time: TimeReport | None
    throughput: ThroughputReport | None
    """None (all three) when the strategy cannot be laid out on the model."""
    best: PlanReport | None
    """The best plan of the search under the same rules (None: not compared, or none fits)."""
    best_note: str | None
    speedup: float | None
    """The config's step over the best plan's."""
    layout_advice: str | None


REPORTS = (PlanOutput, ValidateOutput)
"""The outputs `planner schema report` describes."""
