"""The planner as a library: plan, validate and evaluate, returning the objects whose JSON
`planner plan|validate|memory --json` print (`planner.schemas.output`, `PlanReport`).

The command line (`planner.cli`) parses its options and calls these functions; they take the
same options as keyword arguments, named as the long flags with dashes as underscores
(`--seq-len 4096` is `seq_len=4096`, `--zero 1 --zero 3` is `zero=(1, 3)`). Errors raise
`planner.errors.InputError` (bad input; the message names the flag or the file) and
`InfeasibleError` (nothing fits); nothing is printed. `planner/__init__.py` exposes `plan`,
`validate` and `evaluate` without importing this module until they are called.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cost_models.enums import (CpComm, MoeDispatcher, PipelineSchedule, RankOrder, Recompute,
                               RecomputeModule, ZeroStage)
from planner.core.problem import Problem
from planner.errors import InfeasibleError, InputError
from planner.inputs.loader import (framework_name, load_strategy, make_problem,
                                   resolve_strategy, validate_file)
from planner.rules.gate import RuleOptions
from planner.rules.validate import check_layout
from planner.schemas.output import (DpCommError, ParamCounts, PlanOutput, RunHead,
                                    ValidateOutput)
from planner.schemas.report import PlanReport
from planner.schemas.strategy import DpComm, LaunchTarget, Strategy
from planner.search.candidates import SearchSpace

if TYPE_CHECKING:        # the solver (and OR-Tools) load only where a function searches
    from planner.review.config import Given, Review
    from planner.search.solver import SolverSettings

PROBLEM_OPTIONS = ("nodes", "seq_len", "global_batch", "global_batch_tokens", "precision",
                   "optimizer", "fp8_recipe", "attention", "compile", "compile_loss",
                   "min_free",
                   "fp8_attention",
                   "fp8_output_layer", "bf16_first_layers", "bf16_last_layers")
"""Options of the problem (the CLI's common options, --gpus and --framework aside)."""

OBJECT_FILE = "<strategy>"
"""How messages and `ValidateOutput.file` name a strategy passed as an object."""


# --------------------------------------------------------------------------- the problem

def load_problem(model: str, cluster: str, *, gpus: int | None = None,
                 framework: str = "megatron", nodes: int | None = None,
                 seq_len: int | None = None, global_batch: int | None = None,
                 global_batch_tokens: float | None = None, precision: str | None = None,
                 optimizer: str | None = None, fp8_recipe: str | None = None,
                 attention: str | None = None, compile: bool | None = None,
                 compile_loss: bool | None = None, min_free: float | None = None,
                 **run_precision) -> Problem:
    """The model (a model.yaml, config.json or zoo name) on the cluster (a cluster.yaml or
    preset name) with the training settings given; `problem.notes` says what was assumed.
    `run_precision`: fp8_attention, fp8_output_layer, bf16_first_layers, bf16_last_layers."""
    for flag, value in (("--seq-len", seq_len), ("--global-batch", global_batch),
                        ("--nodes", nodes)):
        if value is not None and value < 1:
            raise InputError(f"{flag}: must be at least 1 (got {value})")
    return make_problem(model, cluster, gpus=gpus, nodes=nodes, seq_len=seq_len,
                        global_batch=global_batch, global_batch_tokens=global_batch_tokens,
                        precision=precision, optimizer=optimizer, framework=framework,
                        fp8_recipe=fp8_recipe, min_free_gib=min_free, attention=attention,
                        compile=compile, compile_loss=compile_loss, **run_precision)


RUN_PRECISION_OPTIONS = ("fp8_attention", "fp8_output_layer", "bf16_first_layers",
                         "bf16_last_layers")
"""The problem options that set what a low-precision run puts in FP8 beyond the linear
layers, or keeps out of it (training settings of the same names)."""


def config_problem(model: str, cluster: str, gpus: int | None,
                   options: Mapping[str, Any]) -> tuple[Problem, Given]:
    """The problem and the training settings given for a config file (validate, emit,
    diff): those win over the file's, the file's over the model's. fp8_recipe without
    precision waits for the file's precision, and so do the `RUN_PRECISION_OPTIONS`."""
    from planner.review.config import Given

    unknown = sorted(set(options) - set(PROBLEM_OPTIONS))
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
    options = {name: options.get(name) for name in PROBLEM_OPTIONS}
    given = Given.from_options(**options)
    if options.get("precision") is None:
        options = {**options, "fp8_recipe": None,
                   **{name: None for name in RUN_PRECISION_OPTIONS}}
    return load_problem(model, cluster, gpus=gpus, **options), given


def run_head(problem: Problem, notes: Iterable[str] = ()) -> RunHead:
    """What was planned, on what, and the notes (the problem's, then `notes`)."""
    t = problem.training
    return RunHead(
        model=problem.model.name,
        params=ParamCounts(total=problem.model.num_params,
                           active=problem.model.num_active_params),
        cluster=problem.cluster.name, num_gpus=problem.num_gpus,
        framework=problem.framework.name, global_batch=t.global_batch, seq_len=t.seq_len,
        precision=t.precision.value,
        fp8_recipe=t.fp8_recipe.value if t.fp8_recipe is not None else None,
        attention=problem.attention.value, eager=problem.eager_elementwise,
        eager_loss=problem.eager_loss,
        fp8_attention=t.fp8_attention,
        fp8_output_layer=t.fp8_output_layer, bf16_first_layers=t.bf16_first_layers,
        bf16_last_layers=t.bf16_last_layers, notes=[*problem.notes, *notes])


# --------------------------------------------------------------------------- plan

def search_space(*, targets: tuple = (), recompute: Iterable[str] = (),
                 no_recompute: bool = False,
                 recompute_modules: Iterable[Iterable[str] | str] | None = None,
                 zero: Iterable[int | str] = (), sequence_parallel: bool | None = None,
                 cp_comm: Iterable[str] = (), dp_comm: str = "all_reduce",
                 offload: Iterable[str] = (), moe_dispatcher: str | None = None,
                 rank_order: str | None = None, pipeline_schedule: str | None = None,
                 top_k: int = 5, time_limit: float = 300.0,
                 layout_work: float = 1.0, workers: int = 1, seed: int = 0,
                 export_model: str | None = None,
                 **pins) -> tuple[SearchSpace, SolverSettings]:
    """The search space and solver settings of the search options: `pins` are the degrees
    and bounds (tp, pp, dp, vpp, micro_batch, dp_shard, ep, etp, cp, max_tp, max_pp, max_ep,
    max_cp, max_micro_batch) and the flags of `SearchSpace` (any_pp, cross_node_tp,
    even_layouts, the overlaps, nvls); choices may be given by value ("selective", 1) or as
    the enums. `recompute_modules`: module sets, each a collection of names or a
    comma-separated string ("moe_act,layernorm")."""
    from planner.search.solver import SolverSettings

    allowed = tuple(Recompute(r) for r in recompute) or tuple(Recompute)
    if no_recompute:
        allowed = (Recompute.NONE,)
    module_sets = (tuple(_module_set(m) for m in recompute_modules)
                   if recompute_modules else None)
    comms = tuple(DpComm) if dp_comm == "both" else (DpComm(dp_comm),)
    settings = SolverSettings(top_k=top_k, time_limit_s=time_limit, layout_work=layout_work,
                              num_workers=workers, random_seed=seed, export_path=export_model,
                              rank_ties=True)
    space = SearchSpace(
        zero_stages=tuple(ZeroStage(int(z)) for z in zero) or tuple(ZeroStage),
        recompute=allowed, recompute_modules=module_sets,
        sequence_parallel=(False, True) if sequence_parallel is None else (sequence_parallel,),
        dp_comm=comms, targets=targets,
        cp_comm=tuple(CpComm(k) for k in cp_comm) or None,
        offload=tuple(dict.fromkeys(offload)),
        moe_dispatcher=MoeDispatcher(moe_dispatcher) if moe_dispatcher is not None else None,
        rank_order=RankOrder(rank_order) if rank_order is not None else None,
        pipeline_schedule=(PipelineSchedule(pipeline_schedule) if pipeline_schedule is not None
                           else None), **pins)
    return space, settings


def _module_set(names: Iterable[str] | str) -> frozenset[RecomputeModule]:
    """A set of RecomputeModule from names (or 'moe_act,layernorm')."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    known = [m.value for m in RecomputeModule]
    modules = []
    for name in names:
        if isinstance(name, RecomputeModule):
            modules.append(name)
        elif name in known:
            modules.append(RecomputeModule(name))
        else:
            raise InputError(f"--recompute-modules: '{name}' is not one of {', '.join(known)}")
    if not modules:
        raise InputError("--recompute-modules: name at least one module")
    return frozenset(modules)


def check_price(tokens: float | None, gpu_hour_price: float | None) -> None:
    """A price is of training --tokens: refuse one without them."""
    if gpu_hour_price is not None and tokens is None:
        raise InputError("--gpu-hour-price: give --tokens too (the cost is that of training "
                         "them)")


HOST_WAIT_NOTE_SHARE = 0.05
"""A plan whose GPUs wait on the host's MoE launches for more of its step than this gets a
note saying what removes the wait."""


def host_wait_notes(plan: PlanReport) -> list[str]:
    """What the best plan's eager MoE launches cost it, where that is a noticeable share."""
    t = plan.time
    if t.host_wait_s <= HOST_WAIT_NOTE_SHARE * t.step_s:
        return []
    return [f"the best plan's GPUs wait {t.host_wait_s:.3g} s of its {t.step_s:.3g} s step "
            f"({100 * t.host_wait_s / t.step_s:.0f}%) for the host to launch its MoE layers' "
            f"token paths eagerly (dispatch, one GEMM per local expert, combine); a "
            f"full-iteration CUDA graph (cuda_graphs: full_iteration in a strategy file, with "
            f"static expert shapes) removes it, fewer local experts or larger micro-batches "
            f"shrink it"]


def flex_dispatcher_notes(space: SearchSpace, plan: PlanReport) -> list[str]:
    """What the best plan's flex MoE dispatcher needs installed, where the search chose it (not
    a pin): Megatron-Core's flex dispatcher runs on the DeepEP or HybridEP package
    (megatron/core/transformer/moe/fused_a2a.py imports deep_ep; its README, "Token
    Dispatching")."""
    dispatcher = plan.strategy.moe_dispatcher
    if space.moe_dispatcher is not None or dispatcher not in FLEX_PACKAGES:
        return []
    package, where = FLEX_PACKAGES[dispatcher]
    return [f"the best plan dispatches its MoE tokens with Megatron-Core's flex dispatcher "
            f"(--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend "
            f"{dispatcher.flex_backend}), which "
            f"needs the {package} package installed ({where}); --moe-dispatcher alltoall plans "
            f"without it"]


FLEX_PACKAGES = {
    MoeDispatcher.FLEX_DEEPEP: ("DeepEP", "github.com/deepseek-ai/DeepEP, with NVSHMEM"),
    MoeDispatcher.FLEX_HYBRIDEP: ("HybridEP", "DeepEP's hybrid-ep branch")}
"""The package each flex backend needs, and where it comes from."""


EAGER_LOSS_NOTE_GIB = 1.0
"""An eager loss whose extra copies of the logits pass this many GiB gets a note."""


def eager_loss_notes(problem: Problem, plan: PlanReport) -> list[str]:
    """What the best plan's eager loss adds to its last stage's peak, where that is more than
    EAGER_LOSS_NOTE_GIB (`memory.eager_cross_entropy_working_bytes`)."""
    from cost_models.memory import eager_cross_entropy_working_bytes
    from cost_models.units import GiB

    head = next((b for b in problem.model.blocks if b.kind == "output"), None)
    if not problem.eager_loss or head is None:
        return []
    s = plan.strategy
    extra = float(eager_cross_entropy_working_bytes(
        seq_len=problem.training.seq_len / s.cp, micro_batch=s.micro_batch,
        vocab_size=head.vocab_size, tp=s.tp))
    if extra <= EAGER_LOSS_NOTE_GIB * GiB:
        return []
    return [f"the loss runs eager (PyTorch's cross entropy on fp32 logits): at the start of "
            f"the backward it holds {extra / GiB:.1f} GiB more on the last stage, counted in "
            f"the best plan's peak; compiling it (training.compile_loss, --compile-loss; "
            f"torchtitan: [compile] components with \"loss\") saves that"]


def plan_problem(problem: Problem, space: SearchSpace, settings: SolverSettings, *,
                 tokens: float | None = None, gpu_hour_price: float | None = None,
                 timings: bool = False) -> PlanOutput:
    """The fastest plans of `problem` in `space`, ranked and priced, with the notes on them
    (pins that do nothing, the best plan's error band) after the problem's. The search's
    wall time only with `timings` (it differs run to run)."""
    from planner.costing.uncertainty import uncertainty_notes
    from planner.search.pin_notes import pinned_settings
    from planner.search.solver import search

    check_price(tokens, gpu_hour_price)
    result = search(problem, space, settings, num_tokens=tokens)
    plans = [p.priced(gpu_hour_price) for p in result.plans]
    best = plans[0]
    notes = (pinned_settings(problem, space, plans)
             + uncertainty_notes(problem, best.strategy.cp, best.time.step_s)
             + host_wait_notes(best) + flex_dispatcher_notes(space, best)
             + eager_loss_notes(problem, best))
    stats = result.search if timings else result.search.model_copy(update={"seconds": None})
    return PlanOutput(**dict(run_head(problem, notes)), plans=plans, search=stats,
                      dp_comm=_best_per_dp_comm(problem, space, settings, tokens) or None)


def _best_per_dp_comm(problem: Problem, space: SearchSpace, settings: SolverSettings,
                      tokens: float | None) -> dict[str, PlanReport | DpCommError]:
    """With dp_comm both: the best plan of each data-parallel exchange on its own, by name
    (or why none fits); empty otherwise."""
    from planner.search.solver import search

    if len(space.dp_comm) < 2:
        return {}
    out: dict[str, PlanReport | DpCommError] = {}
    for comm in space.dp_comm:
        try:
            out[comm.value] = search(problem, replace(space, dp_comm=(comm,)),
                                     replace(settings, top_k=1, export_path=None),
                                     num_tokens=tokens).plans[0]
        except InfeasibleError as e:      # why, in one line: the first rule that says so
            out[comm.value] = DpCommError(error=(e.details[0] if e.details else str(e)).strip())
    return out


def _split(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(problem options, search options) of a call's keyword arguments."""
    problem = {k: options.pop(k) for k in PROBLEM_OPTIONS if k in options}
    return problem, options


def plan(model: str, cluster: str, *, gpus: int | None = None, tokens: float | None = None,
         gpu_hour_price: float | None = None, framework: str | None = None, top: int = 5,
         **options) -> PlanOutput:
    """The fastest strategies that fit `model` on `cluster`, ranked: `planner plan --json`.

    Example::

        import planner
        result = planner.plan("llama2-7b", "dgx-h100", gpus=64, tokens=1e12, tp=2)
        best = result.plans[0]
        print(best.strategy.pp, best.time.step_s, best.throughput.mfu)

    Args:
        model: a model.yaml, a Hugging Face config.json or a zoo name.
        cluster: a cluster.yaml or a preset name.
        gpus: GPUs to use (default: the whole cluster).
        tokens: training tokens (adds time to train and GPU-hours).
        top: how many plans to rank.
        **options: the problem options (seq_len, global_batch, precision, min_free, ...) and
            the search options (tp, pp, max_tp, zero, recompute, sequence_parallel, ...), as
            `planner plan`'s flags.

    Raises:
        InputError: bad input. InfeasibleError: nothing fits (`details` says why).
    """
    check_price(tokens, gpu_hour_price)
    problem_options, pins = _split(dict(options))
    problem = load_problem(model, cluster, gpus=gpus, framework=framework_name(framework),
                           **problem_options)
    space, settings = search_space(top_k=top, **pins)
    return plan_problem(problem, space, settings, tokens=tokens,
                        gpu_hour_price=gpu_hour_price)


# --------------------------------------------------------------------------- validate

def validate(model: str, cluster: str, strategy: str | Strategy | Mapping[str, Any], *,
             gpus: int | None = None, tokens: float | None = None,
             framework: str | None = None, targets: Iterable[str | LaunchTarget] = (),
             cross_node_tp: bool = False, compare: bool = True, **options) -> ValidateOutput:
    """Check a strategy: every rule it breaks, its memory, time and throughput, and how far
    it is from the best plan: `planner validate --json`. `valid` is False where a rule is
    broken or it does not fit (the CLI's exit 1); that is not an exception.

    Example::

        import planner
        report = planner.validate("gpt3-175b", "dgx-a100-80gb",
                                  {"tp": 8, "pp": 8, "micro_batch": 1}, gpus=1024)
        print(report.valid, report.memory.peak_bytes / 2**30, report.speedup)

    Args:
        strategy: any file `planner validate` reads (strategy.yaml, DeepSpeed JSON, a
            Megatron-LM script, ...), or a `Strategy` or a mapping of strategy.yaml's keys.
        targets: also check the rules of these frameworks.
        compare: search for the best plan to compare with (`speedup`, `best`).
        **options: the problem options (seq_len, global_batch, precision, ...).
    """
    problem, given = config_problem(model, cluster, gpus, options)
    review = review_source(problem, strategy, gpus=gpus, tokens=tokens, framework=framework,
                           targets=tuple(LaunchTarget(t) for t in targets),
                           cross_node_tp=cross_node_tp, compare=compare, given=given)
    return validate_output(review)


def review_source(problem: Problem, strategy: str | Strategy | Mapping[str, Any], *,
                  gpus: int | None, tokens: float | None = None, framework: str | None = None,
                  targets: tuple[LaunchTarget, ...] = (), cross_node_tp: bool = False,
                  compare: bool = True, given: Given | None = None) -> Review:
    """`review_config` of a config file, or of a strategy given as an object."""
    from planner.frameworks import ParsedConfig
    from planner.review.config import Given, review_config

    parsed, file = None, strategy
    if not isinstance(strategy, str):
        fields = (strategy.model_dump(exclude_unset=True) if isinstance(strategy, Strategy)
                  else validate_file(Strategy, dict(strategy),
                                     OBJECT_FILE).model_dump(exclude_unset=True))
        parsed, file = ParsedConfig(strategy=fields, target=None), OBJECT_FILE
    return review_config(problem, file, gpus_given=gpus,
                         options=RuleOptions(cross_node_tp=cross_node_tp, targets=targets),
                         compare=compare, num_tokens=tokens, framework=framework,
                         given=given or Given(), parsed=parsed)


def validate_output(review: Review) -> ValidateOutput:
    """The `ValidateOutput` of a review."""
    report = review.report
    return ValidateOutput(
        **dict(run_head(review.problem, review.notes)), file=review.file,
        target=review.target.value if review.target else None, valid=review.valid,
        violations=review.violations, strategy=review.strategy,
        memory=report.memory if report else None, time=report.time if report else None,
        throughput=report.throughput if report else None, best=review.best,
        best_note=review.best_note, speedup=review.speedup, layout_advice=review.advice)


# --------------------------------------------------------------------------- evaluate

def resolved_strategy(problem: Problem, strategy: str | Strategy | Mapping[str, Any]
                      ) -> Strategy:
    """A strategy.yaml (or a `Strategy`, or a mapping of its keys) with dp and the global
    batch filled in, its stage layout checked against the model."""
    if isinstance(strategy, str):
        file, loaded = strategy, load_strategy(strategy)
    elif isinstance(strategy, Strategy):
        file, loaded = OBJECT_FILE, strategy
    else:
        file, loaded = OBJECT_FILE, validate_file(Strategy, dict(strategy), OBJECT_FILE)
    resolved = resolve_strategy(loaded, problem, file=file)
    check_layout(resolved, problem, file=file)
    return resolved


def evaluate(model: str, cluster: str, strategy: str | Strategy | Mapping[str, Any], *,
             gpus: int | None = None, tokens: float | None = None,
             framework: str | None = None, **options) -> PlanReport:
    """Memory per stage, step time and throughput of one strategy, without the rules
    (`validate` checks those): the report `planner memory --json` prints the memory of.

    Example::

        import planner
        report = planner.evaluate("llama2-7b", "dgx-h100", {"tp": 2, "pp": 2}, gpus=16)
        print(report.memory.peak_bytes / 2**30, report.time.step_s)

    Args:
        strategy: a strategy.yaml, a `Strategy`, or a mapping of strategy.yaml's keys.
        **options: the problem options (seq_len, global_batch, precision, ...).
    """
    from planner.costing.evaluate import evaluate_strategy

    problem = load_problem(model, cluster, gpus=gpus, framework=framework_name(framework),
                           **options)
    return evaluate_strategy(problem, resolved_strategy(problem, strategy), num_tokens=tokens)
