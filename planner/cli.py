"""The `planner` command line: parse, load, call one function, render.

Only this module imports click. Errors from the library become exit codes here: bad input 2,
nothing fits (or a violated rule) 1, our own bugs 3 (with --debug for the traceback).
"""

from __future__ import annotations

import json
import sys

import click

from planner.errors import ExitCode, InfeasibleError, InputError

INTERNAL_ERROR = 3


def _stderr(line: str) -> None:
    click.echo(line, err=True)


def problem_options(function):
    """Options shared by every command that loads a model and a cluster."""
    options = [
        click.option("--gpus", type=int, help="GPUs to use (default: the whole cluster)."),
        click.option("--nodes", type=int, help="Override the cluster's node count."),
        click.option("--seq-len", type=int, help="Override training.seq_len."),
        click.option("--global-batch", type=int, help="Override training.global_batch."),
        click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]),
                     help="Override training.precision."),
        click.option("--optimizer", type=click.Choice(["adam", "sgd", "sgd_momentum"]),
                     help="Override training.optimizer."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


class _Count(click.ParamType):
    """A positive number, with an optional K/M/B/T suffix: 300B, 1.5T, 2e12."""

    name = "count"
    _SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}

    def convert(self, value, param, ctx):
        text = str(value).strip()
        scale = self._SCALE.get(text[-1:].lower(), 1.0)
        try:
            number = float(text[:-1] if scale != 1.0 else text) * scale
        except ValueError:
            self.fail(f"{value!r} is not a number (examples: 300B, 1.5T, 2e12)", param, ctx)
        if number <= 0:
            self.fail(f"must be positive (got {value})", param, ctx)
        return number


def search_options(function):
    """Pins and bounds on the strategy, and solver settings, for commands that search."""
    positive = click.IntRange(min=1)
    options = [
        click.option("--tp", type=positive, help="Pin the tensor-parallel size."),
        click.option("--pp", type=positive, help="Pin the pipeline-parallel size."),
        click.option("--dp", type=positive, help="Pin the data-parallel size."),
        click.option("--vpp", type=positive, help="Pin the interleaved chunks per pipeline rank."),
        click.option("--micro-batch", type=positive, help="Pin the micro-batch size."),
        click.option("--max-tp", type=positive, help="Upper bound on tp."),
        click.option("--max-pp", type=positive, help="Upper bound on pp."),
        click.option("--max-micro-batch", type=positive, help="Upper bound on the micro-batch."),
        click.option("--zero", type=click.Choice(["0", "1", "2", "3"]), multiple=True,
                     help="Allowed ZeRO stages (repeat the flag; default: all)."),
        click.option("--recompute", type=click.Choice(["none", "selective", "full"]),
                     multiple=True, help="Allowed recomputation (repeat; default: all)."),
        click.option("--no-recompute", is_flag=True, help="Same as --recompute none."),
        click.option("--sp/--no-sp", "sequence_parallel", default=None,
                     help="Require or forbid sequence parallelism (default: either)."),
        click.option("--dp-comm", type=click.Choice(["all_reduce", "parameter_server", "both"]),
                     default="all_reduce", show_default=True,
                     help="Data-parallel gradient exchange to consider."),
        click.option("--any-pp", is_flag=True,
                     help="Also try pp that divide the layers but are not powers of two."),
        click.option("--cross-node-tp", is_flag=True,
                     help="Allow tensor parallelism across nodes."),
        click.option("--top", "top_k", type=positive, default=5, show_default=True,
                     help="How many plans to rank."),
        click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=10.0,
                     show_default=True, help="CP-SAT time limit per solve, seconds."),
        click.option("--workers", type=positive, default=1, show_default=True,
                     help="CP-SAT worker threads."),
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                     help="CP-SAT random seed."),
        click.option("--export-model", type=click.Path(dir_okay=False),
                     help="Write the CP-SAT model (text proto) to this file."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _search_space(pins: dict):
    """SearchSpace and SolverSettings from the options of `search_options`."""
    from cost_models.enums import Recompute, ZeroStage
    from planner.candidates import SearchSpace
    from planner.schemas.strategy import DpComm
    from planner.search import SolverSettings

    recompute = tuple(Recompute(r) for r in pins.pop("recompute")) or tuple(Recompute)
    if pins.pop("no_recompute"):
        recompute = (Recompute.NONE,)
    zero = tuple(ZeroStage(int(z)) for z in pins.pop("zero")) or tuple(ZeroStage)
    sp = pins.pop("sequence_parallel")
    dp_comm = pins.pop("dp_comm")
    comms = (tuple(DpComm) if dp_comm == "both" else (DpComm(dp_comm),))
    settings = SolverSettings(top_k=pins.pop("top_k"), time_limit_s=pins.pop("time_limit"),
                              num_workers=pins.pop("workers"), random_seed=pins.pop("seed"),
                              export_path=pins.pop("export_model"))
    space = SearchSpace(zero_stages=zero, recompute=recompute,
                        sequence_parallel=(False, True) if sp is None else (sp,),
                        dp_comm=comms, **pins)
    return space, settings


def _load_problem(model, cluster, *, gpus, nodes, seq_len, global_batch, precision, optimizer):
    from planner.loader import make_problem

    for flag, value in (("--seq-len", seq_len), ("--global-batch", global_batch),
                        ("--nodes", nodes)):
        if value is not None and value < 1:
            raise InputError(f"{flag}: must be at least 1 (got {value})")
    return make_problem(model, cluster, gpus=gpus, nodes=nodes, seq_len=seq_len,
                        global_batch=global_batch, precision=precision, optimizer=optimizer)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--json", "as_json", is_flag=True, help="Print JSON (bytes) instead of a table.")
def memory(model, cluster, strategy, as_json, **overrides):
    """Per-GPU memory of STRATEGY (a strategy.yaml), stage by stage."""
    from planner.costing import evaluate_strategy
    from planner.loader import load_strategy, resolve_strategy

    problem = _load_problem(model, cluster, **overrides)
    plan = resolve_strategy(load_strategy(strategy), problem, file=strategy)
    report = evaluate_strategy(problem, plan)
    if as_json:
        out = {"model": problem.model.name, "cluster": problem.cluster.name,
               "num_gpus": problem.num_gpus,
               "strategy": report.strategy.model_dump(mode="json"),
               **report.memory.model_dump(mode="json")}
        click.echo(json.dumps(out, indent=2))
        return
    from planner import render

    heading = (f"{problem.model.name} on {problem.num_gpus} x {problem.cluster.gpu.name}: "
               f"{render.strategy_label(report)}")
    render.print_renderable(render.memory_view(report, heading=heading))


@cli.command()
@click.argument("model")
@click.argument("cluster")
@problem_options
@search_options
@click.option("--tokens", type=_Count(), help="Training tokens (e.g. 300B): adds time to train "
              "and GPU-hours.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def plan(model, cluster, tokens, as_json, gpus, nodes, seq_len, global_batch, precision,
         optimizer, **pins):
    """The fastest strategies that fit MODEL on CLUSTER, ranked."""
    from planner.search import search

    problem = _load_problem(model, cluster, gpus=gpus, nodes=nodes, seq_len=seq_len,
                            global_batch=global_batch, precision=precision, optimizer=optimizer)
    space, settings = _search_space(pins)
    result = search(problem, space, settings, num_tokens=tokens)
    if as_json:
        out = {"model": problem.model.name, "cluster": problem.cluster.name,
               "num_gpus": problem.num_gpus,
               "plans": [p.model_dump(mode="json") for p in result.plans],
               "search": result.search.model_dump(mode="json")}
        click.echo(json.dumps(out, indent=2))
        return
    from planner import render

    t = problem.training
    heading = (f"{problem.model.name} on {problem.num_gpus} x {problem.cluster.gpu.name}: "
               f"global batch {t.global_batch} x {t.seq_len} tokens, {t.precision.value}")
    render.print_renderable(render.plan_view(heading=heading, plans=result.plans,
                                             search=result.search))


@cli.command()
def zoo():
    """List the built-in models."""
    import model_zoo
    from planner import render
    from planner.loader import load_model

    for name in model_zoo.names():
        model, training = load_model(name)
        click.echo(f"{name:24s} {render.count(model.num_params):>10s} params  "
                   f"{model.num_layers:4d} layers  seq {training.seq_len}")


@cli.command()
def clusters():
    """List the cluster presets."""
    from planner import presets
    from planner.loader import load_cluster

    for name in presets.names():
        c = load_cluster(name)
        click.echo(f"{name:16s} {c.num_nodes:5d} nodes x {c.gpus_per_node} {c.gpu.name} "
                   f"({c.gpu.memory_gib:g} GiB)")


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
    except click.exceptions.UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        _stderr(f"Error: {e.format_message()}{hint}")
        code = ExitCode.BAD_INPUT
    except click.exceptions.Abort:
        _stderr("Aborted.")
        code = ExitCode.NOT_FEASIBLE
    except click.exceptions.ClickException as e:
        _stderr(f"Error: {e.format_message()}")
        code = e.exit_code
    except Exception as e:  # noqa: BLE001 - our bug: say so in one line unless --debug
        if debug:
            raise
        _stderr(f"Error: internal error ({type(e).__name__}: {e}); rerun with --debug and "
                f"report the traceback")
        code = INTERNAL_ERROR
    return int(code or 0)


def main() -> None:
    sys.exit(run(sys.argv[1:]))
