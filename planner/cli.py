"""The `planner` command line: parse, load, call one function, render.

Only this module imports click. Errors from the library become exit codes here: bad input 2,
nothing fits (or a violated rule) 1, our own bugs 3 (with --debug for the traceback).
"""

from __future__ import annotations

import functools
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


def _load_problem(model, cluster, *, gpus, nodes, seq_len, global_batch, precision, optimizer):
    from planner.loader import make_problem

    for flag, value in (("--seq-len", seq_len), ("--global-batch", global_batch),
                        ("--nodes", nodes)):
        if value is not None and value < 1:
            raise InputError(f"{flag}: must be at least 1 (got {value})")
    problem = make_problem(model, cluster, gpus=gpus, nodes=nodes, seq_len=seq_len,
                           global_batch=global_batch)
    update = {k: v for k, v in (("precision", precision), ("optimizer", optimizer)) if v}
    if update:
        from dataclasses import replace
        problem = replace(problem, training=problem.training.model_copy(update=update))
    return problem


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
