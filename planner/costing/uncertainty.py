"""How far off a predicted step time may be: the model's measured error on that kind of run.

The numbers live in `error_bands.yaml` beside this module, written by `python
bench/error_bands.py --write` from the published runs of bench/data that no constant was
fitted on (held out). Two quantities, for two different questions:

* **The band** of one plan's step time: where the measured step of a run of this kind landed,
  as the 10th and 90th percentile of `measured / predicted - 1` over the held-out runs of that
  kind. A run is of the base kind of its framework (dense, 16-bit, no context parallelism, on a
  preset calibrated to measured runs), or of one or more of the kinds the model is known to
  miss more: a mixture of experts, FP8, context parallelism, a preset whose efficiencies are
  assumed. The band is the widest of the kinds that apply (the lowest low, the highest high).
  Not their sum, nor a root-sum-square: the kinds share runs (the MoE runs are mostly FP8 runs
  on presets with assumed efficiencies), so their errors are far from independent, and adding
  them would count the same runs twice; each kind's band is measured on whole runs, not as an
  increment over the base.
* **The ranking tolerance**: how wrong the model is about the *ratio* of two strategies' step
  times for one job. Errors shared by both (the GPU's GEMM rate, an unpriced per-layer cost)
  cancel in that ratio, so it is much smaller than the band, and it is measured directly: on
  pairs of held-out runs of one job (same model, GPUs, batch, sequence, precision, framework)
  with different strategies, the median |log(measured ratio / predicted ratio)|. Plans whose
  predicted step lies within it of the fastest are tied: beyond it the model orders a pair
  right at least three times in four (an error as large as the gap, in the wrong direction,
  happens in under half of half the pairs); within it, a coin with a thumb on it.
"""

from __future__ import annotations

from enum import Enum
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from cost_models.enums import Precision
from planner.core.problem import Problem
from planner.inputs.safe_parse import load_yaml

BANDS_FILE = "error_bands.yaml"

_DATA = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class RunKind(str, Enum):
    """The kinds of run the model is known to miss more than its base kind."""

    MOE = "moe"
    """A mixture of experts (any expert block)."""
    FP8 = "fp8"
    """Linear layers in FP8 (any scaling recipe)."""
    CONTEXT_PARALLEL = "context_parallel"
    """Sequences split over cp > 1 ranks."""
    ASSUMED_PRESET = "assumed_preset"
    """A cluster whose efficiency fractions no measured run calibrated (its `source` names no
    `calibration`): copied from another GPU, or assumed outright."""


class Band(BaseModel):
    """The measured relative error of the predicted step time on held-out runs of one kind."""

    model_config = _DATA
    runs: int = Field(ge=1)
    low: float
    """10th percentile of measured / predicted - 1 (negative: the runs were faster)."""
    high: float
    """90th percentile of the same."""
    mean_abs: float = Field(ge=0)
    """Mean |measured / predicted - 1|."""
    sources: list[str] = Field(min_length=1)
    """bench/data source keys of the runs."""


class Ranking(BaseModel):
    """The measured error of the predicted ratio of two strategies' step times for one job."""

    model_config = _DATA
    tolerance: float = Field(gt=0, lt=1)
    """exp(median |log(measured ratio / predicted ratio)|) - 1."""
    pairs: int = Field(ge=1)
    jobs: int = Field(ge=1)
    sources: list[str] = Field(min_length=1)


class ErrorBands(BaseModel):
    """The contents of error_bands.yaml."""

    model_config = _DATA
    generated_by: str
    generated_on: str
    """The date the bench was run (ISO 8601)."""
    error: str
    """What `low` and `high` measure, in words."""
    quantiles: tuple[float, float]
    min_runs: int = Field(ge=1)
    """A framework with fewer base runs uses the base band of all frameworks (`any`)."""
    held_out: str
    """Which runs count, and which were left out because a constant was fitted on them."""
    fitted_on: list[str]
    """source/framework pairs whose runs set a constant: not counted."""
    base: dict[str, Band]
    """Runs of none of the RunKinds, per framework that ran them, and `any`."""
    kinds: dict[RunKind, Band]
    ranking: dict[str, Ranking]
    """Per model kind, `dense` and `moe`, where measured (a kind without a pair of strategies
    measured under one software release is ranked with `dense`'s)."""


@lru_cache(maxsize=1)
def error_bands() -> ErrorBands:
    """error_bands.yaml, read once."""
    text = (resources.files("planner.costing") / BANDS_FILE).read_text(encoding="utf-8")
    return ErrorBands.model_validate(load_yaml(text, f"planner/costing/{BANDS_FILE}"))


def preset_calibrated(problem: Problem) -> bool:
    """Whether the cluster's efficiencies were calibrated to measured runs (its source says)."""
    return cluster_calibrated(problem.cluster)


def cluster_calibrated(cluster) -> bool:
    """Whether a cluster's efficiencies were calibrated to measured runs (`source.calibration`
    names them), rather than copied from another GPU or assumed."""
    return cluster.source is not None and cluster.source.calibration is not None


def run_kinds(problem: Problem, cp: int) -> list[RunKind]:
    """The RunKinds a plan of `problem` with `cp` context-parallel ranks is of, in enum order."""
    is_kind = {RunKind.MOE: problem.model.is_moe,
               RunKind.FP8: problem.training.precision is Precision.FP8,
               RunKind.CONTEXT_PARALLEL: cp > 1,
               RunKind.ASSUMED_PRESET: not preset_calibrated(problem)}
    return [kind for kind in RunKind if is_kind[kind]]


def base_band(framework: str) -> tuple[str, Band]:
    """(the key it is filed under, the band) of the framework's base runs, else all frameworks'."""
    bands = error_bands()
    key = framework if framework in bands.base else "any"
    return key, bands.base[key]


def applicable_bands(problem: Problem, cp: int) -> list[tuple[str, Band]]:
    """(name, band) of the base kind and every RunKind that applies, in that order."""
    bands = error_bands()
    return [base_band(problem.framework.name),
            *((kind.value, bands.kinds[kind]) for kind in run_kinds(problem, cp)
              if kind in bands.kinds)]


def relative_band(problem: Problem, cp: int) -> tuple[float, float]:
    """(low, high) relative error of the step time: the widest of the kinds that apply."""
    applied = [band for _, band in applicable_bands(problem, cp)]
    return min(b.low for b in applied), max(b.high for b in applied)


def step_band(problem: Problem, cp: int, step_s: float) -> tuple[float, float]:
    """Seconds: where the measured step of this plan likely lands (module docstring)."""
    low, high = relative_band(problem, cp)
    return step_s * (1 + low), step_s * (1 + high)


def ranking_tolerance(problem: Problem) -> float:
    """Relative gap in predicted step time within which two plans of `problem` are tied."""
    ranking = error_bands().ranking
    kind = "moe" if problem.model.is_moe and "moe" in ranking else "dense"
    return ranking[kind].tolerance


def tie_limit_s(best_step_s, tolerance: float):
    """The slowest predicted step still tied with `best_step_s` (within `tolerance`, relative)."""
    return best_step_s * (1 + tolerance)


NOTED_KINDS = (RunKind.MOE, RunKind.ASSUMED_PRESET)
"""Kinds a plan's notes name: a whole model family, or a whole cluster, the model has not been
fitted to. FP8 and CP widen the band alone: their measured error comes mostly from runs that
are also MoE, or long-context (attention at 32K-1M tokens), and would mislead on a plain run."""


def uncertainty_notes(problem: Problem, cp: int, step_s: float) -> list[str]:
    """One line naming the NOTED_KINDS that apply, each with its measured error, and the band
    this step gets (from every kind that applies); none when no noted kind applies."""
    bands = error_bands()
    kinds = [k for k in run_kinds(problem, cp) if k in NOTED_KINDS and k in bands.kinds]
    if not kinds:
        return []
    low, high = step_band(problem, cp, step_s)
    rel_low, rel_high = relative_band(problem, cp)
    what = {RunKind.MOE: "mixture-of-experts runs",
            RunKind.ASSUMED_PRESET: f"{problem.cluster.name}'s efficiencies are assumed, not "
                                    f"calibrated; runs on such presets"}
    why = [f"{what[kind]} measured {_pct(bands.kinds[kind].low)} to "
           f"{_pct(bands.kinds[kind].high)} ({bands.kinds[kind].runs} held-out published runs)"
           for kind in kinds]
    return [f"{'; '.join(why)}: the best plan's {step_s:.3g} s step likely takes "
            f"{low:.3g}-{high:.3g} s ({_pct(rel_low)} to {_pct(rel_high)})"]


def _pct(value: float) -> str:
    return f"{100 * value:+.0f}%"
