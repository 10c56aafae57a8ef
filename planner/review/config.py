"""A second opinion on a user's own config: every rule it breaks, what the framework itself
would get wrong, its memory, time and throughput, and how far it is from the best plan.

The config may be any file `planner.frameworks.read_config` reads; the rules are `planner.rules.gate`
(the search uses the same ones), with the rules of the config's framework added.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cost_models.enums import ZeroStage
from planner.costing.layout import explicit_counts
from planner.search.candidates import SearchSpace
from planner.frameworks import ParsedConfig, read_config
from planner.errors import InfeasibleError, InputError
from planner.core.problem import Problem
from planner.inputs.batch import sequences_for_tokens
from planner.inputs.loader import (RECIPE_PRECISIONS, compile_notes, framework_name,
                                   load_framework, resolve_strategy, resolve_training,
                                   validate_file)
from planner.search.rebalance import layout_advice
from planner.rules.ineffective import ineffective_settings
from planner.rules.gate import RuleOptions, balanced_layouts_allowed
from planner.schemas.model import TrainingSpec
from planner.schemas.report import PlanReport, Violation
from planner.schemas.strategy import LaunchTarget, Strategy, strategy_label
from planner.search.solver import SolverSettings, search
from planner.rules.validate import margin_note, uneven_chunks_note, validate


@dataclass(frozen=True)
class Review:
    problem: Problem
    file: str
    strategy: Strategy
    target: LaunchTarget | None
    violations: list[Violation]
    report: PlanReport | None
    """None when the strategy cannot be laid out on the model."""
    best: PlanReport | None
    best_note: str | None
    """Why there is no best plan to compare with (nothing fits under the same rules)."""
    advice: str | None = None
    """How to balance its pipeline stages, when that saves time."""
    notes: tuple[str, ...] = ()
    """Settings the file does not hold (they live in model code) and what was assumed, and
    the ones it holds that have no effect (`ineffective_settings`)."""

    @property
    def valid(self) -> bool:
        return not self.violations and self.report is not None and self.report.memory.fits

    @property
    def speedup(self) -> float | None:
        if self.best is None or self.report is None:
            return None
        return self.report.time.step_s / self.best.time.step_s


TRAINING_FLAGS = {"seq_len": "--seq-len", "global_batch": "--global-batch",
                  "precision": "--precision", "fp8_recipe": "--fp8-recipe",
                  "optimizer": "--optimizer", "attention": "--attention",
                  "compile": "--compile", "compile_loss": "--compile-loss",
                  "fp8_attention": "--fp8-attention", "fp8_output_layer": "--fp8-output-layer",
                  "bf16_first_layers": "--bf16-first-layers",
                  "bf16_last_layers": "--bf16-last-layers"}
"""The training settings a config file may state, and the command-line flag that wins over
the file's value."""


@dataclass(frozen=True)
class Given:
    """Training settings the command line gave: they win over a config file's, which win over
    the model's defaults (the problem already holds the command line's values)."""

    names: frozenset[str] = frozenset()
    """Keys of `TRAINING_FLAGS` the command line set (--global-batch-tokens sets global_batch,
    --precision mxfp8 sets fp8_recipe too)."""
    global_batch_tokens: float | None = None
    """--global-batch-tokens: turned into sequences at the seq_len the run ends up with."""
    fp8_recipe: str | None = None
    """--fp8-recipe without --precision: the problem cannot hold it before the file says
    whether it trains in FP8."""
    low_precision: tuple[tuple[str, object], ...] = ()
    """--fp8-attention, --fp8-output-layer, --bf16-first-layers, --bf16-last-layers as
    (setting, value): like --fp8-recipe, they wait for the file's precision."""

    @classmethod
    def from_options(cls, *, seq_len=None, global_batch=None, global_batch_tokens=None,
                     precision=None, fp8_recipe=None, optimizer=None, attention=None,
                     compile=None, compile_loss=None, fp8_attention=None,
                     fp8_output_layer=None,
                     bf16_first_layers=None, bf16_last_layers=None, **_) -> Given:
        """From the options of `planner.cli.commands.problem_options` (the others ignored)."""
        names = {name for name, value in (("seq_len", seq_len), ("precision", precision),
                                          ("fp8_recipe", fp8_recipe), ("optimizer", optimizer),
                                          ("attention", attention), ("compile", compile),
                                          ("compile_loss", compile_loss),
                                          ("fp8_attention", fp8_attention),
                                          ("fp8_output_layer", fp8_output_layer),
                                          ("bf16_first_layers", bf16_first_layers),
                                          ("bf16_last_layers", bf16_last_layers))
                 if value is not None}
        if global_batch is not None or global_batch_tokens is not None:
            names.add("global_batch")
        if precision in RECIPE_PRECISIONS:     # a low-precision recipe (loader.make_problem)
            names.add("fp8_recipe")
        low = tuple((name, value) for name, value in (
            ("fp8_attention", fp8_attention), ("fp8_output_layer", fp8_output_layer),
            ("bf16_first_layers", bf16_first_layers), ("bf16_last_layers", bf16_last_layers))
            if value is not None)
        return cls(frozenset(names), global_batch_tokens,
                   fp8_recipe if precision is None else None, low)

    def flag(self, name: str) -> str:
        if name == "global_batch" and self.global_batch_tokens is not None:
            return "--global-batch-tokens"
        return TRAINING_FLAGS[name]


def _shown(value) -> str:
    return str(getattr(value, "value", value))


def _configured(problem: Problem, parsed: ParsedConfig, *, file: str,
                gpus_given: int | None, given: Given = Given()) -> Problem:
    """The problem as the config describes it: its GPU count and training settings (global
    batch, seq_len, precision and FP8 recipe, optimizer, attention kernel), the command
    line's winning where it gave them, the model's where neither says."""
    s = parsed.strategy
    num_gpus = gpus_given or parsed.world_size
    if gpus_given and parsed.world_size and gpus_given != parsed.world_size:
        launched = f" ({parsed.world_size_source})" if parsed.world_size_source else ""
        parsed.notes.append(f"--gpus {gpus_given} overrides the {parsed.world_size} GPUs "
                            f"{file} launches{launched}: priced on {gpus_given}")
    if num_gpus is None and all(k in s for k in ("dp", "tp", "pp")):
        num_gpus = s["dp"] * s["tp"] * s.get("cp", 1) * s["pp"]
    num_gpus = num_gpus or problem.num_gpus
    cluster = problem.cluster
    if num_gpus > cluster.num_gpus:
        raise InputError(f"{file}: launches {num_gpus} GPUs but {cluster.name} has "
                         f"{cluster.num_gpus}; pass --nodes to describe a larger cluster")
    training, notes = _training(problem, parsed, file=file, given=given)
    return replace(problem, num_gpus=num_gpus, training=training, notes=notes)


def _training(problem: Problem, parsed: ParsedConfig, *, file: str,
              given: Given) -> tuple[TrainingSpec, tuple[str, ...]]:
    """The training settings the file states (its global batch among them), the command
    line's where it gave them; and the problem's notes, the --global-batch-tokens one
    restated at the file's seq_len. Adds a note to `parsed` for every file value the command
    line replaces."""
    training, notes = problem.training, problem.notes
    stated = dict(parsed.training)
    if "global_batch" in parsed.strategy:
        stated["global_batch"] = parsed.strategy["global_batch"]
    kept = {k: v for k, v in stated.items() if k not in given.names}
    if kept or given.names:
        values = {**training.model_dump(), **kept}
        if "fp8_recipe" not in kept and "fp8_recipe" not in given.names \
                and ("precision" in kept or "precision" in given.names):
            values["fp8_recipe"] = None      # the default recipe of the file's framework
        if given.fp8_recipe is not None:
            values["fp8_recipe"] = given.fp8_recipe
        values.update(given.low_precision)
        if "fp8_recipe" in given.names and values["precision"] != "fp8":
            raise InputError(f"--fp8-recipe: {file} trains in {_shown(values['precision'])}, "
                             f"not fp8; give --precision fp8 too")
        tokens = given.global_batch_tokens
        if tokens is not None and values["seq_len"] != training.seq_len:
            values["global_batch"], note = sequences_for_tokens(tokens, values["seq_len"])
            notes = tuple(n for n in notes if not n.startswith("--global-batch-tokens "))
            notes += (note,) if note else ()
        if "global_batch" in kept:      # the file's batch, not the model's kept in tokens
            notes = tuple(n for n in notes if not n.startswith("--seq-len "))
        training = resolve_training(validate_file(TrainingSpec, values, file), problem.cluster,
                                    problem.framework, file=file)
    for name in sorted(given.names & stated.keys()):
        value = getattr(training, name)
        if stated[name] != value:
            shown = (f"{given.global_batch_tokens:,.0f} ({value} sequences)"
                     if given.flag(name) == "--global-batch-tokens" else _shown(value))
            parsed.notes.append(f"{given.flag(name)} {shown} replaces the file's {name} "
                                f"{_shown(stated[name])}")
    return training, notes


def _strategy(problem: Problem, parsed: ParsedConfig, file: str,
              given: Given = Given()) -> tuple[Problem, Strategy]:
    """The file's strategy, resolved, and the problem at the global batch it runs (the
    command line's if it gave one), so that a search compares like with like."""
    fields = dict(parsed.strategy)
    tp, pp, cp = fields.get("tp", 1), fields.get("pp", 1), fields.get("cp", 1)
    if "dp" not in fields:
        fields["dp"] = max(1, problem.num_gpus // (tp * cp * pp))  # gpu_count says if it is off
    if "global_batch" in given.names:
        fields["global_batch"] = problem.training.global_batch
    elif "global_batch" not in fields:
        # Megatron-LM's default is one micro-batch per data-parallel rank.
        fields["global_batch"] = (fields.get("micro_batch", 1) * fields["dp"]
                                  if parsed.target is LaunchTarget.MEGATRON
                                  else problem.training.global_batch)
    strategy = resolve_strategy(validate_file(Strategy, fields, file), problem, file=file)
    if strategy.global_batch != problem.training.global_batch:
        problem = replace(problem, training=problem.training.model_copy(
            update={"global_batch": strategy.global_batch}))
    return problem, strategy


def strategy_of(report: PlanReport) -> Strategy:
    """The strategy of a ranked plan, its pipeline layout spelled out."""
    fields = report.strategy.model_dump(exclude={"num_micro_batches", "layers_per_stage"})
    return Strategy(**fields, layers_per_stage=explicit_counts(report.strategy.layers_per_stage))


def _price_searched(problem: Problem, parsed: ParsedConfig, options: RuleOptions,
                    settings: SolverSettings, num_tokens: float | None) -> None:
    """Degrees the framework's own search picks at compile time are unknowable here: take the
    planner's best plan under what the file fixes (pipeline stages, micro-batch size, the
    parallel optimizer), and say so in the notes."""
    fixed = parsed.strategy
    pins = {k: fixed[k] for k in ("pp", "micro_batch") if k in fixed}
    zero = (fixed["zero_stage"],) if "zero_stage" in fixed else tuple(ZeroStage)
    space = SearchSpace(**pins, zero_stages=zero, cross_node_tp=options.cross_node_tp,
                        targets=options.targets)
    pinned = ", ".join([f"{k} {v}" for k, v in pins.items()]
                       + ([f"zero {int(zero[0])}"] if len(zero) == 1 else []))
    try:
        best = search(problem, space, settings, num_tokens=num_tokens).plans[0]
    except InfeasibleError:
        parsed.notes.append(f"{parsed.searched_by}: no plan of the planner fits with what the "
                            f"file fixes ({pinned}); priced with tp 1, dp = the devices left")
        return
    parsed.strategy = strategy_of(best).model_dump(exclude_defaults=True)
    parsed.notes.append(f"priced as the planner's best plan with what the file fixes "
                        f"({pinned}): {strategy_label(best.strategy)}; "
                        f"{parsed.searched_by} may pick another")


def read_strategy(problem: Problem, path: str, *, gpus_given: int | None,
                  options: RuleOptions = RuleOptions(),
                  settings: SolverSettings = SolverSettings(top_k=1),
                  num_tokens: float | None = None, framework: str | None = None,
                  parsed: ParsedConfig | None = None, given: Given = Given()
                  ) -> tuple[Problem, Strategy, ParsedConfig, RuleOptions]:
    """The problem and strategy a config file describes (`parsed`: the file already read,
    e.g. a Megatron-LM log's arguments), priced by its framework's profile unless `framework`
    is given (a strategy.yaml with --target uses the target's; else Megatron-LM's), and the
    rule options with the file's framework among the targets. The problem holds the file's
    GPU count, global batch, seq_len, precision and optimizer, except where the command line
    `given` its own."""
    if parsed is None:
        parsed = read_config(path, problem, gpus_given)
    if parsed.target is LaunchTarget.TORCHRUN:
        raise InputError(f"{path}: a torchrun launcher carries only its world size "
                         f"({parsed.world_size} GPUs), not a strategy; validate the training "
                         f"config it launches")
    runs_on = framework_name(framework, (parsed.target,) if parsed.target else options.targets,
                             fallback=problem.framework.name)
    # The file's framework prices it: the notes on settings it ignores are its own.
    profile = load_framework(runs_on)
    if parsed.framework and framework is None:
        profile = profile.model_copy(update=parsed.framework)
    stale = compile_notes(problem.training, problem.framework)
    problem = replace(problem, framework=profile, notes=tuple(
        n for n in problem.notes if n not in stale) + tuple(
        compile_notes(problem.training, profile)))
    problem = _configured(problem, parsed, file=path, gpus_given=gpus_given, given=given)
    targets = tuple(dict.fromkeys(options.targets + ((parsed.target,) if parsed.target else ())))
    options = replace(options, targets=targets)
    if parsed.searched_by is not None:
        _price_searched(problem, parsed, options, settings, num_tokens)
    problem, strategy = _strategy(problem, parsed, path, given)
    parsed.notes.extend(note for note in [*ineffective_settings(problem, strategy),
                                          *filter(None, [uneven_chunks_note(strategy)])]
                        if note not in parsed.notes)
    return problem, strategy, parsed, options


def review_config(problem: Problem, path: str, *, gpus_given: int | None,
                  options: RuleOptions = RuleOptions(), compare: bool = True,
                  num_tokens: float | None = None,
                  settings: SolverSettings = SolverSettings(top_k=1),
                  framework: str | None = None, given: Given = Given(),
                  parsed: ParsedConfig | None = None) -> Review:
    """Check a config file (`parsed`: already read, `path` then only names it). Its
    framework's profile prices it unless `framework` is given (a strategy.yaml with --target
    uses the target's; else Megatron-LM's). The best plan it is compared with is searched for
    the same problem: the file's GPU count, global batch, seq_len and precision (the command
    line's where `given`)."""
    problem, strategy, parsed, options = read_strategy(
        problem, path, gpus_given=gpus_given, options=options, settings=settings,
        num_tokens=num_tokens, framework=framework, given=given, parsed=parsed)
    targets = options.targets
    check = validate(problem, strategy, options=options, num_tokens=num_tokens)
    best = best_note = None
    notes = list(parsed.notes)
    if compare:
        space = SearchSpace(cross_node_tp=options.cross_node_tp, targets=targets)
        try:
            result = search(problem, space, settings, num_tokens=num_tokens)
            best = result.plans[0]
            if result.search.note:   # pp widened, or what keeping pp to powers of two costs
                notes.append(f"the search for a faster plan: {result.search.note}")
        except InfeasibleError as e:
            best_note = str(e)
    if check.report is not None and (margin := margin_note(problem, check.report)):
        notes.append(margin)
    advice = None
    if check.report is not None and balanced_layouts_allowed(problem, options):
        advice = layout_advice(problem, strategy, check.report)
    return Review(problem, path, strategy, parsed.target, parsed.findings + check.violations,
                  check.report, best, best_note, advice, tuple(notes))
