"""The `planner` command line: parse, load, call one function, render.

Only this module imports click. Errors from the library become exit codes here: bad input 2,
nothing fits (or a violated rule) 1, our own bugs 3 (with --debug for the traceback).
"""

from __future__ import annotations

import json
import math
import sys

import click

from cost_models.enums import AttentionKind, Fp8Recipe
from planner.cli.pictures import check_paths, picture_options
from planner.errors import ExitCode, InfeasibleError, InputError, clipped, one_line
from planner.schemas.bounds import MAX_COUNT

INTERNAL_ERROR = 3


def _stderr(line: str) -> None:
    click.echo(one_line(line), err=True)     # a newline in a file name stays one line


class _Aliased(click.Option):
    """An option with Megatron-LM's name as a second one (--tp, --tensor-model-parallel-size):
    errors name it by its first, as they did before it had two."""

    def get_error_hint(self, ctx: click.Context) -> str:
        return f"'{self.opts[0]}'"


def problem_options(function, *, gpus: bool = True):
    """Options shared by every command that loads a model and a cluster (`gpus`: with --gpus
    as one count)."""
    options = [
        *([click.option("--gpus", type=int, help="GPUs to use (default: the whole cluster).")]
          if gpus else []),
        click.option("--nodes", type=int, help="Override the cluster's node count."),
        click.option("--seq-len", "--seq-length", "seq_len", cls=_Aliased, type=int,
                     help="Override training.seq_len. Without --global-batch or "
                          "--global-batch-tokens, the model's batch keeps its tokens per step "
                          "(fewer, longer sequences; a power of two of them where the division "
                          "is not whole), with a note."),
        click.option("--global-batch", "--global-batch-size", "global_batch", cls=_Aliased,
                     type=int,
                     help="Override training.global_batch (sequences)."),
        click.option("--global-batch-tokens", type=_Count(batch=True),
                     help="The global batch in tokens, as whole sequences of seq_len: 4M is "
                          "4 x 2^20 where that makes whole sequences (512 of 8192), as batch "
                          "sizes in tokens are meant, else 4,000,000 (the nearest whole number "
                          "of sequences); 4Mi is always 4 x 2^20, 4e6 always 4,000,000. A "
                          "note says how it was read."),
        click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16", "fp8", "mxfp8",
                                                       "nvfp4"]),
                     help="Override training.precision (fp8: linear layers in FP8; mxfp8: FP8 "
                          "with the MXFP8 recipe; nvfp4: linear layers in NVFP4 (FP4); "
                          "both Blackwell)."),
        click.option("--fp8-recipe", type=click.Choice([r.value for r in Fp8Recipe]),
                     help="FP8 scaling recipe (default: the framework's that the GPU runs)."),
        click.option("--optimizer", type=click.Choice(["adam", "sgd", "sgd_momentum"]),
                     help="Override training.optimizer."),
        click.option("--attention", type=click.Choice([a.value for a in AttentionKind]),
                     help="The attention kernel (training.attention; default: the framework's). "
                          "flash: the GPU's fastest fused kernel (cuDNN, FlashAttention-3); "
                          "flash2: FlashAttention-2 (PyTorch SDPA's flash backend; 0.6x on "
                          "Hopper); unfused keeps the s x s scores, as 2020-2022 runs did."),
        click.option("--compile/--no-compile", "compile", default=None,
                     help="torch.compile of the model (training.compile; torchtitan's "
                          "[compile] enable): fused norms, rotary embedding and activation; "
                          "--no-compile prices them as eager PyTorch ops. Default: the "
                          "framework's (torchtitan compiles); no effect on frameworks with "
                          "fused kernels of their own (Megatron-LM)."),
        click.option("--compile-loss/--no-compile-loss", "compile_loss", default=None,
                     help="torch.compile of the loss (training.compile_loss; torchtitan's "
                          "\"loss\" in [compile] components): --no-compile-loss prices "
                          "PyTorch's eager cross entropy, which holds 12 bytes per logit at "
                          "its peak (16 under loss_parallel). Default: compiled with the "
                          "model; no effect on frameworks with a fused loss of their own "
                          "(Megatron-LM)."),
        click.option("--fp8-attention/--no-fp8-attention", default=None,
                     help="With precision fp8: the attention core in FP8 too "
                          "(training.fp8_attention; Transformer Engine FP8 attention)."),
        click.option("--fp8-output-layer/--no-fp8-output-layer", default=None,
                     help="With precision fp8: the output layer in FP8 too "
                          "(training.fp8_output_layer; default bf16)."),
        click.option("--bf16-first-layers", type=click.IntRange(min=0), default=None,
                     metavar="N", help="With precision fp8: keep the first N transformer "
                     "layers in bf16 (Megatron-LM --first-last-layers-bf16)."),
        click.option("--bf16-last-layers", type=click.IntRange(min=0), default=None,
                     metavar="N", help="With precision fp8: keep the last N transformer layers "
                     "in bf16."),
        click.option("--min-free", "min_free", type=click.FloatRange(min=0), default=None,
                     metavar="GIB", help="Keep this much memory free on every GPU (GiB): a "
                     "safety margin under the predicted peak. Default: max(2 GiB, 3% of the "
                     "GPU), which the search keeps where it can and validate/memory warn "
                     "about; 0 plans without a margin."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def run_precision_options(options: dict) -> dict:
    """Take the options of `problem_options` that set what a low-precision run puts in FP8
    beyond the linear layers, or keeps out of it (`planner.api.RUN_PRECISION_OPTIONS`), and
    --compile and --compile-loss, out of a command's options."""
    from planner.api import RUN_PRECISION_OPTIONS

    return {name: options.pop(name, None)
            for name in (*RUN_PRECISION_OPTIONS, "compile", "compile_loss")}


FRAMEWORKS = ("megatron", "deepspeed", "torchtitan", "torchrun", "mindspore")


def framework_option(function):
    """--framework: whose profile prices the plan (its overlaps, buffers and constants)."""
    return click.option(
        "--framework", type=click.Choice(FRAMEWORKS), default=None,
        help="The framework that runs the job (default: the --emit/--target framework, or the "
             "one a config file is written for, else megatron).")(function)


class _Count(click.ParamType):
    """A positive number, with an optional K/M/B/T suffix (Ki/Mi/Gi/Ti: powers of 1024):
    300B, 1.5T, 2e12. `batch`: the value keeps how it was written
    (`inputs.batch.TokenCount`), for the reading of --global-batch-tokens."""

    name = "count"
    LIMIT = 1e18

    def __init__(self, *, batch: bool = False) -> None:
        self.batch = batch

    def convert(self, value, param, ctx):
        from planner.inputs.batch import parse_count

        try:
            number = parse_count(value)
        except ValueError:
            self.fail(f"{value!r} is not a number (examples: 300B, 1.5T, 2e12)", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"must be a positive number (got {value})", param, ctx)
        if number > self.LIMIT:     # Qwen3 trained on 36T tokens (arXiv:2505.09388)
            self.fail(f"{number:.3g} exceeds the largest accepted, {self.LIMIT:.0e} tokens "
                      f"(far above any real run)", param, ctx)
        return number if self.batch else float(number)


class _OutDir(click.Path):
    """--out: a directory; '' is refused (Path('') would be the current directory)."""

    def __init__(self) -> None:
        super().__init__(file_okay=False)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value:
            raise InputError("--out: empty path")
        return super().convert(value, param, ctx)


class _Targets(click.ParamType):
    """Launch targets, comma-separated: megatron,deepspeed."""

    name = "targets"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        from planner.schemas.strategy import LaunchTarget

        names = [v.strip() for v in str(value).split(",") if v.strip()]
        known = [t.value for t in LaunchTarget]
        for name in names:
            if name not in known:
                import difflib

                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                self.fail(f"unknown target '{name}'{hint}; targets: {', '.join(known)}",
                          param, ctx)
        if not names:
            self.fail("give at least one target", param, ctx)
        return tuple(LaunchTarget(n) for n in dict.fromkeys(names))


def search_options(function):
    """Pins and bounds on the strategy, and solver settings, for commands that search."""
    positive = click.IntRange(min=1, max=MAX_COUNT)   # a pin beyond it overflows int64
    options = [
        click.option("--tp", "--tensor-model-parallel-size", "tp", cls=_Aliased, type=positive,
                     help="Pin the tensor-parallel size."),
        click.option("--pp", "--pipeline-model-parallel-size", "pp", cls=_Aliased, type=positive,
                     help="Pin the pipeline-parallel size."),
        click.option("--dp", type=positive, help="Pin the data-parallel size."),
        click.option("--vpp", "--num-virtual-stages-per-pipeline-rank", "vpp", cls=_Aliased,
                     type=positive,
                     help="Pin the interleaved chunks per pipeline rank."),
        click.option("--micro-batch", "--micro-batch-size", "micro_batch", cls=_Aliased,
                     type=positive,
                     help="Pin the micro-batch size."),
        click.option("--dp-shard", type=positive,
                     help="Pin the ZeRO shard group (HSDP: shard over N data-parallel ranks, "
                          "replicate over the rest)."),
        click.option("--ep", "--expert-model-parallel-size", "ep", cls=_Aliased, type=positive,
                     help="Pin the expert-parallel size (MoE models)."),
        click.option("--etp", "--expert-tensor-parallel-size", "etp", cls=_Aliased, type=positive,
                     help="Pin the expert tensor-parallel size (MoE models)."),
        click.option("--max-ep", type=positive, help="Upper bound on ep."),
        click.option("--cp", "--context-parallel-size", "cp", cls=_Aliased, type=positive,
                     help="Pin the context-parallel size (ranks sharing each sequence)."),
        click.option("--max-cp", type=positive, help="Upper bound on cp."),
        click.option("--cp-comm", type=click.Choice(["p2p", "all_gather", "a2a", "a2a+p2p"]),
                     multiple=True,
                     help="Allowed K/V exchanges with cp > 1 (repeat; default: the "
                          "framework's)."),
        click.option("--max-tp", type=positive, help="Upper bound on tp."),
        click.option("--max-pp", type=positive, help="Upper bound on pp."),
        click.option("--max-micro-batch", type=positive, help="Upper bound on the micro-batch."),
        click.option("--zero", type=click.Choice(["0", "1", "2", "3"]), multiple=True,
                     help="Allowed ZeRO stages (repeat the flag; default: all)."),
        click.option("--recompute", type=click.Choice(["none", "selective", "full"]),
                     multiple=True, help="Allowed recomputation (repeat; default: all)."),
        click.option("--no-recompute", is_flag=True, help="Same as --recompute none."),
        click.option("--recompute-modules", "recompute_modules", multiple=True,
                     metavar="M[,M...]",
                     help="Module sets selective recompute may re-run (repeat for several "
                          "sets; Megatron-LM --recompute-modules: core_attn, layernorm, "
                          "mla_up_proj, mlp, moe, moe_act, shared_experts; default: core_attn and, "
                          "for an MoE model, one set of NVIDIA's recipes)."),
        click.option("--sp/--no-sp", "sequence_parallel", default=None,
                     help="Require or forbid sequence parallelism (default: either)."),
        click.option("--dp-comm", type=click.Choice(["all_reduce", "parameter_server", "both"]),
                     default="all_reduce", show_default=True,
                     help="Data-parallel gradient exchange to consider."),
        click.option("--any-pp", is_flag=True,
                     help="Also try pp that divide the layers but are not powers of two."),
        click.option("--cross-node-tp", is_flag=True,
                     help="Allow tensor parallelism across nodes."),
        click.option("--even-layouts", is_flag=True,
                     help="Split layers evenly over pipeline stages (no balanced layouts)."),
        click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=None,
                     help="Pin overlapping the gradient reduction with the backward pass "
                          "(default: the framework's)."),
        click.option("--overlap-param-gather/--no-overlap-param-gather", default=None,
                     help="Pin overlapping the parameter all-gather with the forward pass."),
        click.option("--tp-comm-overlap/--no-tp-comm-overlap", default=None,
                     help="Pin overlapping TP collectives with GEMMs (Megatron-LM "
                          "--tp-comm-overlap, torchtitan async TP; needs --sp)."),
        click.option("--moe-a2a-overlap/--no-moe-a2a-overlap", default=None,
                     help="Pin hiding one micro-batch's expert all-to-all behind another's "
                          "compute (Megatron-LM --overlap-moe-expert-parallel-comm "
                          "--delay-wgrad-compute; needs ep > 1, no full recompute, vpp "
                          "with pp > 1)."),
        click.option("--moe-dispatcher",
                     type=click.Choice(["alltoall", "flex-deepep", "flex-hybridep"]),
                     default=None,
                     help="Pin the MoE token dispatcher (Megatron-LM --moe-token-dispatcher-"
                          "type, flex with --moe-flex-dispatcher-backend deepep|hybridep; "
                          "default: the framework's)."),
        click.option("--rank-order", type=click.Choice(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]),
                     default=None,
                     help="Pin the order ranks are numbered in, which decides the groups "
                          "inside a node (default: the framework's; tp-cp-ep-pp-dp is "
                          "Megatron-LM's --use-tp-pp-dp-mapping)."),
        click.option("--pipeline-schedule",
                     type=click.Choice(["1f1b", "zero_bubble", "zbv", "dualpipev"]),
                     default=None,
                     help="The pipeline schedule of plans with pp > 1 (default: 1f1b, "
                          "interleaved with vpp > 1); zero_bubble, zbv and dualpipev are "
                          "torchtitan's InterleavedZeroBubble, ZBVZeroBubble and DualPipeV."),
        click.option("--nvls/--no-nvls", default=True, show_default=True,
                     help="Let NCCL use NVLink SHARP where the NVSwitch has it (--no-nvls: "
                          "NCCL_NVLS_ENABLE=0, as many recipes set)."),
        click.option("--offload", type=click.Choice(["optimizer", "params", "activations"]),
                     multiple=True,
                     help="Let the search keep these in host memory too, priced on the "
                          "cluster's host link (repeat; default: nothing offloaded)."),
        click.option("--top", "top_k", type=positive, default=5, show_default=True,
                     help="How many plans to rank."),
        click.option("--layout-work", type=click.FloatRange(min=0, min_open=True, max=1e6),
                     default=1.0, show_default=True, metavar="UNITS",
                     help="CP-SAT work (deterministic units, about a core-second each) the "
                          "stage-layout solves may use; more proves more layouts optimal. "
                          "Same input, same result, on any machine load."),
        click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=300.0,
                     show_default=True,
                     help="Wall-clock safety net for the whole search, seconds. Work budgets "
                          "decide results; when this fires the output says so."),
        click.option("--workers", type=click.IntRange(min=1, max=1024), default=1,
                     show_default=True, help="CP-SAT worker threads."),
        click.option("--seed", type=click.IntRange(min=0, max=2**31 - 1), default=0,
                     show_default=True,
                     help="CP-SAT random seed."),
        click.option("--export-model", type=click.Path(dir_okay=False),
                     help="Write the CP-SAT model (text proto) to this file."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _search_space(pins: dict, targets: tuple = ()):
    """SearchSpace and SolverSettings from the options of `search_options`
    (`planner.api.search_space`)."""
    from planner.api import search_space

    modules = tuple(_module_set(text) for text in pins.pop("recompute_modules")) or None
    return search_space(targets=targets, recompute_modules=modules, **pins)


def _module_set(text: str):
    """'moe_act,layernorm' -> the set of RecomputeModule it names (a usage error otherwise)."""
    from cost_models.enums import RecomputeModule

    names = [n.strip() for n in text.split(",") if n.strip()]
    known = [m.value for m in RecomputeModule]
    for name in names:
        if name not in known:
            raise click.BadParameter(f"'{name}' is not one of {', '.join(known)}",
                                     param_hint="'--recompute-modules'")
    if not names:
        raise click.BadParameter("name at least one module", param_hint="'--recompute-modules'")
    return frozenset(RecomputeModule(n) for n in names)


def _load_problem(model, cluster, *, quiet=False, **options):
    """`planner.api.load_problem`, its notes on stderr unless `quiet`."""
    from planner.api import load_problem

    problem = load_problem(model, cluster, **options)
    for note in () if quiet else problem.notes:
        click.echo(f"note: {note}", err=True)
    return problem


def _config_problem(model, cluster, gpus, overrides: dict):
    """The problem and the command line's training settings for a command that reads a config
    file (validate, emit, diff): `planner.api.config_problem`."""
    from planner.api import config_problem

    return config_problem(model, cluster, gpus, overrides)


def _problem_notes(*problems) -> None:
    """The `note:` lines of problems read from config files (`_config_problem` loads them
    quietly: a note on the batch waits for the file's seq_len)."""
    for note in dict.fromkeys(n for p in problems for n in p.notes):
        _stderr(f"note: {note}")


class _Interrupted(Exception):
    """Ctrl-C inside a command, carried past click (which would print a blank line and call
    it an abort) to `run`."""


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted() from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="planner")
@click.option("--debug", is_flag=True, help="Show the traceback of internal errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Plan data, tensor and pipeline parallelism for training a model on a GPU cluster.

    MODEL is a model.yaml, a Hugging Face config.json or a zoo name (`planner zoo`);
    CLUSTER is a cluster.yaml or a preset name (`planner clusters`).
    """
    ctx.obj = {"debug": debug}


@cli.command()
@click.argument("model")
@click.argument("cluster")
@click.argument("strategy")
@problem_options
@framework_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON (bytes) instead of a table.")
@picture_options
def memory(model, cluster, strategy, framework, as_json, timeline, memory_chart, **overrides):
    """Per-GPU memory of STRATEGY (a strategy.yaml), stage by stage. Exit 1 when it does not
    fit."""
    from pathlib import Path

    from planner.api import resolved_strategy
    from planner.costing.evaluate import evaluate_strategy
    from planner.inputs.loader import framework_name
    from planner.rules.ineffective import ineffective_settings
    from planner.rules.validate import margin_note, uneven_chunks_note

    check_paths(timeline, memory_chart)
    problem = _load_problem(model, cluster, framework=framework_name(framework), **overrides)
    plan = resolved_strategy(problem, strategy)
    report = evaluate_strategy(problem, plan)
    notes = _notes([*ineffective_settings(problem, plan),
                    *filter(None, [margin_note(problem, report), uneven_chunks_note(plan)])])
    _pictures(problem, [report], 1, {"timeline": timeline, "memory_chart": memory_chart},
              what=one_line(Path(strategy).name))
    code = ExitCode.OK if report.memory.fits else ExitCode.NOT_FEASIBLE
    if as_json:
        out = {**_json_head(problem, notes),
               "strategy": report.strategy.model_dump(mode="json"),
               **report.memory.model_dump(mode="json")}
        click.echo(json.dumps(out, indent=2))
        return code
    from planner.cli import render

    heading = (f"{problem.model.name} ({render.params_label(problem.model)}) on "
               f"{problem.num_gpus} x {problem.cluster.gpu.name}: {render.strategy_label(report)}")
    render.print_renderable(render.memory_view(report, heading=heading))
    return code


@cli.command()
@click.argument("model")
@click.argument("cluster")
@problem_options
@search_options
@click.option("--tokens", type=_Count(), help="Training tokens (e.g. 300B): adds time to train "
              "and GPU-hours.")
@click.option("--emit", "targets", type=_Targets(), default=(),
              help="Write launch configs for the plan: megatron, deepspeed, torchrun, "
                   "torchtitan, mindspore, mindformers (comma-separated). The search then "
                   "keeps to what the framework runs; with several, each target's files come "
                   "from its own best plan, and the ranking shown is the first's.")
@click.option("--out", "out_dir", type=_OutDir(), default=".",
              show_default=True, help="Directory for --emit.")
@click.option("--plan", "plan_rank", type=click.IntRange(min=1), default=1, show_default=True,
              help="Which ranked plan --emit writes.")
@click.option("--force", is_flag=True, help="Let --emit overwrite existing files.")
@click.option("--emit-trials", "num_trials", type=click.IntRange(min=1), metavar="K",
              help="Write a short Megatron-LM benchmark run (torchtitan with --emit "
                   "torchtitan) of each of the top K plans under --out (trial-1/, ...), "
                   "run_trials.sh to run them all, and the runs.yaml that `planner calibrate` "
                   "reads their logs from.")
@framework_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--gpu-hour-price", type=click.FloatRange(min=0, min_open=True, max=1e6),
              metavar="USD", help="Price of one GPU-hour: adds the cost to train --tokens.")
@click.option("--timings", is_flag=True, help="Also show how long the search took (the output "
              "then differs from run to run).")
@picture_options
def plan(model, cluster, tokens, targets, out_dir, plan_rank, force, num_trials, framework,
         as_json, gpus, nodes, seq_len, global_batch, global_batch_tokens, precision, optimizer,
         fp8_recipe, attention, min_free, **pins):
    """The fastest strategies that fit MODEL on CLUSTER, ranked."""
    from planner.api import check_price, plan_problem
    from planner.inputs.loader import framework_name

    timings = pins.pop("timings")
    price = pins.pop("gpu_hour_price")
    pictures = {"timeline": pins.pop("timeline"), "memory_chart": pins.pop("memory_chart")}
    check_paths(**pictures)
    if num_trials:
        _check_trial_targets(targets)
    check_price(tokens, price)
    # Several targets: the ranking shown is the first's; each target's files come from its
    # own best plan (cli.targets), as `--emit TARGET` alone would write them.
    framework_given = framework
    options = dict(gpus=gpus, nodes=nodes, seq_len=seq_len, global_batch=global_batch,
                   global_batch_tokens=global_batch_tokens, precision=precision,
                   optimizer=optimizer, fp8_recipe=fp8_recipe, attention=attention,
                   min_free=min_free, **run_precision_options(pins))
    search_targets = targets[:1] or _trial_targets(num_trials, pins)
    framework = framework_name(framework, search_targets)
    problem = _load_problem(model, cluster, framework=framework, **options)
    if targets:
        from planner.frameworks import check_launch
        check_launch(targets, problem.num_gpus, problem.cluster.gpus_per_node)
    # The rules of the framework that prices the plans apply too (rules.rule_targets).
    space, settings = _search_space(pins, search_targets)
    with _working(f"searching strategies for {problem.model.name} on {problem.num_gpus} "
                  f"GPUs", quiet=as_json):
        out = plan_problem(problem, space, settings, tokens=tokens, gpu_hour_price=price,
                           timings=timings)
    notes = _notes(out.notes[len(problem.notes):])
    chosen = []
    if targets:
        from dataclasses import replace

        from planner.cli.targets import plans_per_target, target_out
        from planner.search.solver import search

        def load(target):
            return _load_problem(model, cluster, quiet=True, **options,
                                 framework=framework_name(framework_given, (target,)))

        def search_one(priced, target):
            found = search(priced, replace(space, targets=(target,)),
                           replace(settings, export_path=None), num_tokens=tokens)
            return [p.priced(price) for p in found.plans]

        with _working("searching each target's best plan", quiet=as_json or len(targets) < 2):
            chosen = plans_per_target(targets, (problem, out.plans), load, search_one,
                                      plan_rank)
        for c in chosen:
            notes += _notes(_emit_notes(c.problem, c.plan))
        chosen = _emit(chosen, out_dir, force, tokens, describe=len(targets) > 1)
        out = out.model_copy(update={
            "notes": list(problem.notes) + notes,
            "emitted": [str(path) for c in chosen for path in c.files],
            "targets": [target_out(c, plan_rank) for c in chosen]})
    if num_trials:
        trials = _emit_trials(problem, out.plans[:num_trials], num_trials, model, cluster,
                              out_dir, force, search_targets[0])
        out = out.model_copy(update={"emitted": out.emitted + [str(p) for p in trials]})
    _pictures(problem, out.plans, plan_rank, pictures)
    if as_json:
        # The wall time differs run to run: only with --timings, so that output is reproducible.
        click.echo(json.dumps(out.model_dump(mode="json", exclude=_absent(out, timings)),
                              indent=2))
        return
    from planner.cli import render

    t = problem.training
    heading = (f"{problem.model.name} ({render.params_label(problem.model)}) on "
               f"{problem.num_gpus} x {problem.cluster.gpu.name}: batch {t.global_batch} x "
               f"{t.seq_len} tokens, {render.run_label(problem)}, {problem.framework.name}")
    render.print_renderable(render.plan_view(heading=heading, plans=out.plans,
                                             search=out.search))
    if out.dp_comm:
        render.print_renderable(render.dp_comm_table(
            {comm: getattr(best, "error", best) for comm, best in out.dp_comm.items()}))
    if len(chosen) > 1:
        from planner.cli.targets import targets_view

        render.print_renderable(targets_view(chosen, plan_rank))


def _check_trial_targets(targets: tuple) -> None:
    """--emit-trials runs one target a trial can run on: Megatron-LM (the default) or
    torchtitan."""
    from planner.calibrate.trials import NOT_RUNNABLE, TARGETS

    if len(targets) > 1:
        raise InputError(f"--emit-trials: trials run on one target at a time (got "
                         f"{', '.join(t.value for t in targets)}); write each target's trials "
                         f"with its own --emit and --out")
    if targets and targets[0] not in TARGETS:
        target = targets[0]
        why = NOT_RUNNABLE.get(target, f"the planner writes no trial run for {target.value}")
        raise InputError(f"--emit-trials: no trials for {target.value}: {why}; trials run on "
                         f"{' or '.join(t.value for t in TARGETS)}")


def _trial_targets(num_trials: int | None, pins: dict) -> tuple:
    """--emit-trials alone: the search keeps to what Megatron-LM runs, and ranks at least K
    plans (--top)."""
    from planner.schemas.strategy import LaunchTarget

    if not num_trials:
        return ()
    pins["top_k"] = max(pins["top_k"], num_trials)
    return (LaunchTarget.MEGATRON,)


def _emit_trials(problem, plans: list, num_trials: int, model: str, cluster: str, out_dir,
                 force, target) -> list:
    """--emit-trials: a trial run of each plan, the launcher and runs.yaml, all or none."""
    from pathlib import Path

    from planner.calibrate.trials import LAUNCHER, RUNS_FILE, trial_files
    from planner.frameworks import write_files
    from planner.review.config import strategy_of

    files = trial_files(problem, [(p, strategy_of(p)) for p in plans], model, out_dir, target)
    paths = write_files(files, out_dir, force=force)
    for path in paths:
        _stderr(f"wrote {path}")
    out = Path(out_dir)
    if len(plans) < num_trials:
        _stderr(f"note: --emit-trials {num_trials}: the search ranked {len(plans)} plan(s); "
                f"wrote a trial of each")
    _stderr(f"note: {len(plans)} trial run(s) of the top plans: run `bash {out / LAUNCHER}` on "
            f"every node (MASTER_ADDR=<first node>), then `planner calibrate {cluster} "
            f"{out / RUNS_FILE}` fits the cluster's constants to their logs")
    return paths


def _absent(out, timings: bool) -> dict:
    """What `plan --json` leaves out: the search's wall time without --timings, the targets
    without --emit, the per-exchange plans without --dp-comm both."""
    exclude: dict = {} if timings else {"search": {"seconds"}}
    for key in ("targets", "dp_comm"):
        if not getattr(out, key):
            exclude[key] = True
    return exclude


def _pictures(problem, plans: list, rank: int, pictures: dict, *, what: str | None = None
              ) -> None:
    """--timeline and --memory-chart of the plan at --plan's rank (`what`: how the heading
    names it; default 'plan #rank')."""
    from planner.cli import render
    from planner.cli.pictures import write_pictures

    if not any(pictures.values()):
        return
    if not plans:          # validate: a strategy that cannot be laid out on the model
        _stderr("note: no picture drawn: the strategy has no stage layout to draw")
        return
    if rank > len(plans):
        raise InputError(f"--plan {rank}: the search ranked {len(plans)} plan(s)")
    chosen = plans[rank - 1]
    schedule = chosen.strategy.pipeline_schedule
    if pictures.get("timeline") and chosen.strategy.pp > 1 and schedule.value != "1f1b":
        # The timeline simulates Megatron-LM's 1F1B order only (`costing.schedule`).
        _stderr(f"note: --timeline draws the passes in 1F1B's order, fitted to the "
                f"{schedule.value} step; that schedule's own order (weight gradients run in "
                f"the bubble) is not drawn")
    heading = (f"{problem.model.name} ({render.params_label(problem.model)}) on "
               f"{problem.num_gpus} x {problem.cluster.gpu.name}: {what or f'plan #{rank}'}, "
               f"{render.strategy_label(chosen)}")
    for path in write_pictures(chosen, heading, **pictures):
        _stderr(f"wrote {path}")


def _notes(notes: list[str]) -> list[str]:
    """Print `notes` on stderr, one `note:` line each (as the problem's own), and return them."""
    for note in notes:
        _stderr(f"note: {note}")
    return notes


def _json_head(problem, notes: list[str] = ()) -> dict:
    """The keys every --json output starts with: what was planned, on what, and the notes
    (the problem's, then `notes`): `planner.api.run_head`."""
    from planner.api import run_head

    return run_head(problem, notes).model_dump(mode="json")


def low_precision_json(training) -> dict:
    """What the run puts in FP8 beyond the linear layers, or keeps out of it, for --json."""
    return {"fp8_attention": training.fp8_attention,
            "fp8_output_layer": training.fp8_output_layer,
            "bf16_first_layers": training.bf16_first_layers,
            "bf16_last_layers": training.bf16_last_layers}


def _emit_notes(problem, report) -> list[str]:
    """What to say before writing `report`'s plan: that it breaks the default memory margin
    (after --min-free 0, or a pinned plan that cannot keep it)."""
    from planner.rules.validate import margin_note

    note = margin_note(problem, report, what="the plan written")
    return [note] if note else []


def _emit(chosen: list, out_dir, force, tokens, *, describe: bool = False) -> list:
    """Write each target's launch configs from its plan (`cli.targets.write_targets`) and
    say so on stderr (`describe`: with the plan each target got)."""
    from planner.cli.targets import write_targets, wrote_line

    chosen = write_targets(chosen, out_dir, force=force, num_tokens=tokens)
    for c in chosen:
        for path in c.files:
            _stderr(wrote_line(path, c) if describe else f"wrote {path}")
    return chosen


@cli.command()
@click.argument("model")
@click.argument("cluster")
@click.argument("strategy")
@problem_options
@click.option("--target", "targets", type=_Targets(), default=(),
              help="Also check the rules of these frameworks (a strategy.yaml meant for one).")
@click.option("--cross-node-tp", is_flag=True, help="Allow tensor parallelism across nodes.")
@click.option("--no-compare", is_flag=True, help="Skip the search for the best plan.")
@click.option("--tokens", type=_Count(), help="Training tokens: adds time to train.")
@framework_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@picture_options
def validate(model, cluster, strategy, targets, cross_node_tp, no_compare, tokens, framework,
             as_json, gpus, timeline, memory_chart, **overrides):
    """Check STRATEGY: a strategy.yaml, DeepSpeed JSON, Megatron-LM script or argument file,
    torchtitan recipe or TOML, MindSpore setup or MindFormers run YAML. Exit 1 when a rule is
    broken or it does not fit."""
    from pathlib import Path

    from planner.api import review_source, validate_output

    check_paths(timeline, memory_chart)
    problem, given = _config_problem(model, cluster, gpus, overrides)
    with _working(f"checking {strategy}" + ("" if no_compare else " and searching for the "
                                            "best plan"), quiet=as_json):
        review = review_source(problem, strategy, gpus=gpus, tokens=tokens,
                               framework=framework, targets=targets,
                               cross_node_tp=cross_node_tp, compare=not no_compare,
                               given=given)
    _problem_notes(review.problem)
    _pictures(review.problem, [review.report] if review.report else [], 1,
              {"timeline": timeline, "memory_chart": memory_chart},
              what=one_line(Path(strategy).name))
    if as_json:
        click.echo(json.dumps(validate_output(review).model_dump(mode="json"), indent=2))
    else:
        from planner.cli import render

        render.print_renderable(render.review_view(review))
    return ExitCode.OK if review.valid else ExitCode.NOT_FEASIBLE


@cli.command()
@click.argument("model")
@click.argument("cluster")
@click.argument("strategy")
@problem_options
@click.option("--target", "targets", type=_Targets(), required=True,
              help="Frameworks to write configs for (comma-separated).")
@click.option("--out", "out_dir", type=_OutDir(), default=".",
              show_default=True, help="Directory for the files.")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
@click.option("--cross-node-tp", is_flag=True, help="Allow tensor parallelism across nodes.")
@click.option("--tokens", type=_Count(), help="Training tokens: sets the iteration count.")
def emit(model, cluster, strategy, targets, out_dir, force, cross_node_tp, tokens, gpus,
         **overrides):
    """Write launch configs for STRATEGY (any file `planner validate` reads), e.g. a
    Megatron-LM script from a DeepSpeed config. Refused, exit 1, when it breaks a rule."""
    from planner.cli import render
    from planner.review.config import review_config
    from planner.rules.gate import RuleOptions

    problem, given = _config_problem(model, cluster, gpus, overrides)
    review = review_config(problem, strategy, gpus_given=gpus,
                           options=RuleOptions(cross_node_tp=cross_node_tp, targets=targets),
                           compare=False, num_tokens=tokens, given=given)
    _problem_notes(review.problem)
    if review.violations or review.report is None:
        render.print_renderable(render.violations_text(review.violations), stderr=True)
        raise InfeasibleError(f"{strategy}: not written: fix the problems above first")
    from planner.frameworks import check_launch
    check_launch(targets, review.problem.num_gpus, review.problem.cluster.gpus_per_node)
    _notes(_emit_notes(review.problem, review.report))
    from planner.cli.targets import TargetPlan

    _emit([TargetPlan(t, review.problem, review.report) for t in targets], out_dir, force,
          tokens)


@cli.command()
def zoo():
    """List the built-in models."""
    import model_zoo
    from planner.cli import render
    from planner.inputs.loader import load_model

    for name in model_zoo.names():
        model, training = load_model(name)
        click.echo(f"{name:24s} {render.count(model.num_params):>10s} params  "
                   f"{model.num_layers:4d} layers  seq {training.seq_len}")


@cli.command()
@click.option("--show", metavar="NAME", help="Print the preset NAME as a cluster.yaml (its "
              "file, with the sources of its numbers) to save, edit and pass as CLUSTER.")
def clusters(show):
    """List the cluster presets."""
    from planner.costing.uncertainty import cluster_calibrated
    from planner.inputs import presets
    from planner.inputs.loader import load_cluster, preset_text

    if show is not None:
        click.echo(preset_text(show), nl=False)
        return
    for name in presets.names():
        c = load_cluster(name)
        domain = f", NVLink domains of {c.nvlink_domain}" if c.nvlink_domain else ""
        kind = "calibrated" if cluster_calibrated(c) else "efficiencies assumed"
        click.echo(f"{name:16s} {c.num_nodes:5d} nodes x {c.gpus_per_node} {c.gpu.name} "
                   f"({c.gpu.memory_gib:g} GiB{domain}); {kind}")


@cli.command()
@click.argument("file", type=click.Choice(["model", "cluster", "strategy",  # file_schema.FILES
                                           "report"]))                    # and .OUTPUTS
@click.option("--out", "out_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the schema to FILE (replacing it) instead of printing it.")
def schema(file, out_file):
    """Print the JSON Schema of a model.yaml, cluster.yaml or strategy.yaml, made from the
    models the planner validates that file with, or of the report `plan --json` and
    `validate --json` print."""
    from pathlib import Path

    from planner.frameworks import write_files
    from planner.inputs.file_schema import schema_text

    text = schema_text(file)
    if out_file is None:
        click.echo(text, nl=False)
        return
    if not out_file:
        raise InputError("--out: empty path")
    path = Path(out_file)
    write_files({path.name: text}, path.parent, force=True)
    _stderr(f"wrote {path}")


def _interrupted() -> ExitCode:
    """Ctrl-C, wherever it landed: one line and 130 (the files being written are left as
    they were: `frameworks.write_files` renames only whole files)."""
    if sys.stderr.isatty():
        click.echo(err=True)            # past the ^C the terminal echoed
    _stderr("Error: interrupted")
    return ExitCode.INTERRUPTED


def _working(message: str, *, quiet: bool = False):
    """A spinner with `message` on stderr while a long step runs, erased when it ends: only
    where stderr is a terminal (never into a pipe, a file or a test) and not under --json
    (`quiet`). It redirects nothing, so stdout's bytes are the same with it or without."""
    import contextlib

    if quiet or not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

    return Live(Spinner("dots", text=message), console=Console(stderr=True), transient=True,
                redirect_stdout=False, redirect_stderr=False)


def _usage_error(error: click.exceptions.UsageError) -> None:
    """Click's message for a usage error, on one stderr line; a missing argument with choices
    keeps click's list of them, a line each (click writes those lines, never the user)."""
    hint = f"(see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
    message = error.format_message()
    if isinstance(error, click.exceptions.MissingParameter) and "\n" in message:
        first, *choices = message.splitlines()
        for line in [f"Error: {first}", *(c.replace("\t", "  ") for c in choices), hint]:
            if line:
                _stderr(line)
        return
    _stderr(f"Error: {message} {hint}".rstrip())


def run(args: list[str]) -> int:
    """Run the CLI on `args`; every failure becomes one stderr line and an exit code."""
    debug = "--debug" in args
    try:
        code = cli.main(args=args, prog_name="planner", standalone_mode=False)
    except InputError as e:
        _stderr(f"Error: {e}")
        code = ExitCode.BAD_INPUT
    except InfeasibleError as e:
        _stderr(f"Error: {e}")
        for line in e.details:
            _stderr(f"  {line}")
        code = ExitCode.NOT_FEASIBLE
    except click.exceptions.NoArgsIsHelpError as e:
        click.echo(e.ctx.get_help(), err=True)     # `planner` alone: the help, as click shows it
        code = ExitCode.BAD_INPUT
    except click.exceptions.UsageError as e:
        _usage_error(e)
        code = ExitCode.BAD_INPUT
    except (_Interrupted, KeyboardInterrupt):
        code = _interrupted()
    except click.exceptions.Abort as e:
        if isinstance(e.__cause__, KeyboardInterrupt):   # click's wrapping of Ctrl-C
            code = _interrupted()
        else:
            _stderr("Aborted.")
            code = ExitCode.NOT_FEASIBLE
    except click.exceptions.ClickException as e:
        _stderr(f"Error: {e.format_message()}")
        code = e.exit_code
    except Exception as e:  # noqa: BLE001 - our bug: say so in one line unless --debug
        if debug:
            raise
        _stderr(f"Error: internal error ({type(e).__name__}: {clipped(str(e))}); rerun with "
                f"--debug and report the traceback")
        code = INTERNAL_ERROR
    return int(code or 0)


def main() -> None:
    sys.exit(run(sys.argv[1:]))
