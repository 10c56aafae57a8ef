"""Measured runs for `planner calibrate`: a RUNS.yaml, whose runs give their strategy inline,
as any config file `planner validate` reads, or as a Megatron-LM training log; a config file
may come with a training log (Megatron-LM's or torchtitan's) that gives the measurements.

A run is one configuration on the user's cluster and what it measured: the step time (seconds
per optimizer step, steady state) and, optionally, the peak memory per GPU (GiB as nvidia-smi
shows it: the allocator's reserved bytes plus the CUDA context and communication buffers).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, model_validator

from cost_models.enums import AttentionKind, Fp8Recipe
from cost_models.units import GiB
from planner.calibrate.logs import LoggedMemory, MegatronLog, TorchtitanLog, read_log
from planner.errors import InputError, shown
from planner.core.problem import Problem
from planner.rules.validate import check_layout
from planner.inputs.loader import make_problem, read_mapping, resolve_strategy, validate_file
from planner.schemas.bounds import GlobalBatch, Gpus, NonNegativeInt, SeqLen
from planner.schemas.strategy import Strategy

MAX_RUNS = 1000
"""More runs than any cluster's history holds: a bound on the file, not on the fit."""

_FORBID = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True,
                     allow_inf_nan=False)


class Measured(BaseModel):
    model_config = _FORBID
    step_s: PositiveFloat | None = None
    """Seconds per optimizer step in steady state (not the first iterations)."""
    peak_gib: PositiveFloat | None = None
    """Peak memory of the fullest GPU, GiB, as nvidia-smi shows it."""

    @model_validator(mode="after")
    def _something(self):
        if self.step_s is None and self.peak_gib is None:
            raise ValueError("give step_s, peak_gib or both")
        return self


class RunEntry(BaseModel):
    """One measured run: a model, a strategy and what it measured."""

    model_config = _FORBID
    name: str | None = Field(default=None, max_length=200)
    model: str = Field(max_length=4096)
    """A model.yaml, a Hugging Face config.json (relative to RUNS.yaml) or a zoo name."""
    gpus: Gpus | None = None
    """GPUs the run used (default: the strategy's dp x tp x cp x pp, or the file's)."""
    seq_len: SeqLen | None = None
    global_batch: GlobalBatch | None = None
    precision: Literal["fp32", "fp16", "bf16", "fp8", "mxfp8"] | None = None
    fp8_recipe: Fp8Recipe | None = None
    attention: AttentionKind | None = None
    """The attention kernel the run used (default: its framework's, fused flash)."""
    fp8_attention: bool | None = None
    """With fp8: the run's attention core in FP8 too (Megatron-Bridge
    mixed_precision.fp8_dot_product_attention)."""
    fp8_output_layer: bool | None = None
    bf16_first_layers: NonNegativeInt | None = None
    bf16_last_layers: NonNegativeInt | None = None
    framework: Literal["megatron", "deepspeed", "torchtitan", "torchrun", "mindspore"] | None = None
    """Whose profile prices the run (default: the config's framework, else megatron)."""
    strategy: Strategy | None = None
    """The strategy, as in a strategy.yaml."""
    config: str | None = Field(default=None, max_length=4096)
    """Or a config file `planner validate` reads (Megatron-LM script, DeepSpeed JSON, ...)."""
    log: str | None = Field(default=None, max_length=4096)
    """Or a Megatron-LM training log: its arguments, iteration times and memory reports. With
    `config`: the log of that config's run (Megatron-LM or torchtitan), which gives the step
    time and the logged peak memory; torchtitan does not print its config, so its log needs
    the config beside it."""
    measured: Measured | None = None

    @model_validator(mode="after")
    def _one_strategy(self):
        given = [k for k in ("strategy", "config", "log") if getattr(self, k) is not None]
        if len(given) != 1 and given != ["config", "log"]:
            raise ValueError("give exactly one of strategy, config and log, or a config with "
                             f"its run's log (got {', '.join(given) or 'none'})")
        if self.log is None and (self.measured is None or self.measured.step_s is None
                                 and self.measured.peak_gib is None):
            raise ValueError("measured: required (step_s, peak_gib or both) unless the run "
                             "is a log")
        return self


class RunsFile(BaseModel):
    model_config = _FORBID
    runs: list[RunEntry] = Field(min_length=1, max_length=MAX_RUNS)


@dataclass(frozen=True)
class MeasuredRun:
    """A run as the fit sees it: the problem and strategy it priced, what it measured."""

    name: str
    problem: Problem
    strategy: Strategy
    step_s: float | None
    peak_bytes: float | None = None
    """Peak memory as nvidia-smi shows it (measured.peak_gib): fitted."""
    logged_memory: LoggedMemory | None = None
    """Peak memory the run's log prints (allocator bytes): reported, not fitted."""


def load_runs(path: str, cluster_ref: str, *, nodes: int | None = None) -> list[MeasuredRun]:
    """Every run of a RUNS.yaml on the cluster `cluster_ref`."""
    file = shown(path)
    spec = validate_file(RunsFile, read_mapping(Path(path)), file)
    base = Path(path).parent
    runs = []
    for i, entry in enumerate(spec.runs):
        where = f"{file}: runs[{i}]"
        runs.append(_run(entry, where, base, cluster_ref, nodes, default_name=f"run {i + 1}"))
    names = [r.name for r in runs]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise InputError(f"{file}: runs: the name '{twice}' is given to two runs")
    return runs


def _beside(base: Path, ref: str) -> str:
    """A file named relative to RUNS.yaml, or `ref` as given (a zoo name, an absolute path)."""
    candidate = base / ref
    return str(candidate) if not Path(ref).is_absolute() and candidate.exists() else ref


def _run(entry: RunEntry, where: str, base: Path, cluster_ref: str, nodes: int | None,
         default_name: str) -> MeasuredRun:
    from planner.review.config import read_strategy

    try:
        log = read_log(_beside(base, entry.log)) if entry.log else None
    except InputError as e:
        raise InputError(f"{where}.log: {e}") from None
    if isinstance(log, TorchtitanLog) and entry.config is None:
        raise InputError(f"{where}: {shown(entry.log)} is a torchtitan log, which does not "
                         f"hold the run's config (torchtitan prints it only with "
                         f"debug.print_config): name the config too, e.g. config: "
                         f"torchtitan_recipe.py")
    gpus = entry.gpus
    if gpus is None and isinstance(log, MegatronLog):
        gpus = log.world_size
    if gpus is None and entry.strategy is not None:
        s = entry.strategy
        if s.dp is None:
            raise InputError(f"{where}: gpus: required when the strategy gives no dp")
        gpus = s.dp * s.tp * s.cp * s.pp
    try:
        problem = make_problem(_beside(base, entry.model), cluster_ref, gpus=gpus, nodes=nodes,
                               seq_len=entry.seq_len, global_batch=entry.global_batch,
                               precision=entry.precision, framework=entry.framework or "megatron",
                               fp8_recipe=entry.fp8_recipe.value if entry.fp8_recipe else None,
                               attention=entry.attention.value if entry.attention else None,
                               fp8_attention=entry.fp8_attention,
                               fp8_output_layer=entry.fp8_output_layer,
                               bf16_first_layers=entry.bf16_first_layers,
                               bf16_last_layers=entry.bf16_last_layers)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    if entry.strategy is not None:
        strategy = resolve_strategy(entry.strategy, problem, file=where)
        check_layout(strategy, problem, file=where)
    else:
        ref = _beside(base, entry.config or entry.log)
        parsed = None
        if entry.config is None:        # a Megatron-LM log alone: its arguments
            from planner.frameworks import megatron

            parsed = megatron.parse(log.arguments, file=shown(ref), problem=problem,
                                    num_gpus=log.world_size)
        problem, strategy, _, _ = read_strategy(problem, ref, gpus_given=gpus,
                                                framework=entry.framework, parsed=parsed)
        check_layout(strategy, problem, file=shown(ref))
    logged_step_s = None
    if isinstance(log, MegatronLog):
        logged_step_s = log.step_s
    elif log is not None:
        logged_step_s = log.step_s(global_batch_tokens=strategy.global_batch
                                   * problem.training.seq_len, num_gpus=problem.num_gpus)
    measured = entry.measured or Measured(step_s=logged_step_s)
    step_s = measured.step_s if measured.step_s is not None else logged_step_s
    peak = measured.peak_gib * GiB if measured.peak_gib is not None else None
    return MeasuredRun(entry.name or default_name, problem, strategy, step_s, peak,
                       log.memory if log is not None else None)
