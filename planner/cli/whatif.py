"""The what-if commands: `planner diff` (two strategies side by side), `planner sweep` (the
best plan per GPU count, and its cost) and `planner calibrate` (a cluster's constants fitted
to its measured runs). Registered on the `planner` group of planner.cli.commands."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click

from planner.cli.commands import (_Count, _config_problem, _json_head, _load_problem, _notes,
                                  _problem_notes, _search_space, _stderr, cli, framework_option,
                                  low_precision_json, problem_options, run_precision_options,
                                  search_options)
from planner.errors import ExitCode, InfeasibleError, InputError, shown


@cli.command()
@click.argument("model")
@click.argument("cluster")
@click.argument("a")
@click.argument("b")
@problem_options
@click.option("--cross-node-tp", is_flag=True, help="Allow tensor parallelism across nodes.")
@framework_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def diff(model, cluster, a, b, cross_node_tp, framework, as_json, gpus, **overrides):
    """Compare two strategies, A and B (any files `planner validate` reads): memory at the
    peak stage and time per step term by term, and the terms that explain the gap. Each file
    runs on its own GPU count unless --gpus. Exit 1 when either breaks a rule or does not
    fit."""
    from planner.cli import render, render_diff
    from planner.costing.diff import diff_plans
    from planner.review.config import review_config
    from planner.rules.gate import RuleOptions

    problem, given = _config_problem(model, cluster, gpus, overrides)
    reviews = [review_config(problem, path, gpus_given=gpus,
                             options=RuleOptions(cross_node_tp=cross_node_tp), compare=False,
                             framework=framework, given=given) for path in (a, b)]
    _problem_notes(*(r.problem for r in reviews))
    for review in reviews:
        if review.report is None:
            render.print_renderable(render.violations_text(review.violations), stderr=True)
            raise InfeasibleError(f"{review.file}: not evaluated: its layout does not match "
                                  f"the model; nothing to compare")
    review_a, review_b = reviews
    result = diff_plans(review_a.problem, review_a.report, review_b.problem, review_b.report)
    labels = render_diff.diff_labels(a, b)
    code = ExitCode.OK if all(r.valid for r in reviews) else ExitCode.NOT_FEASIBLE
    if as_json:
        heads = [_json_head(r.problem) for r in reviews]
        # What both share; null where they differ (each side says its own).
        head = {k: (v if heads[1][k] == v else None) for k, v in heads[0].items()}
        head["notes"] = list(dict.fromkeys(heads[0]["notes"] + heads[1]["notes"]))
        out = {**head,
               **{key: _diff_side(r, label) for key, r, label in zip("ab", reviews, labels)},
               "terms": [{"name": t.name, "a": t.a, "b": t.b, "delta": t.delta}
                         for t in result.terms],
               "explaining": [{"name": r.term.name, "delta": r.term.delta, "why": r.why}
                              for r in result.explaining],
               "speedup": result.speedup, "same_work": result.same_work,
               "summary": render_diff.diff_summary(result, labels),
               "memory_summary": render_diff.diff_memory_summary(result, labels)}
        click.echo(json.dumps(out, indent=2))
        return code
    p = review_a.problem
    gpus_label = (f"{p.num_gpus}" if p.num_gpus == review_b.problem.num_gpus
                  else f"{p.num_gpus} (A) and {review_b.problem.num_gpus} (B)")
    heading = (f"{p.model.name} ({render.params_label(p.model)}) on {gpus_label} x "
               f"{p.cluster.gpu.name}")
    render.print_renderable(render_diff.diff_view(heading, result, reviews, labels))
    return code


def _diff_side(review, label: str) -> dict:
    """One side of `planner diff --json`: the file, its verdict and its evaluated plan."""
    p, report = review.problem, review.report
    return {"file": review.file, "label": label,
            "target": review.target.value if review.target else None,
            "num_gpus": p.num_gpus, "framework": p.framework.name,
            "global_batch": review.strategy.global_batch, "seq_len": p.training.seq_len,
            "precision": p.training.precision.value, "attention": p.attention.value,
            **low_precision_json(p.training), "valid": review.valid, "fits": report.memory.fits,
            "violations": [v.model_dump(mode="json") for v in review.violations],
            **report.model_dump(mode="json"), "step_s": report.time.step_s,
            "notes": list(review.notes)}


class _Counts(click.ParamType):
    """GPU counts, comma-separated: 64,128,256."""

    name = "counts"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            counts = tuple(int(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"{value!r} is not a list of GPU counts (example: 64,128,256)", param, ctx)
        if not counts or min(counts) < 1:
            self.fail(f"give GPU counts of at least 1 (got {value})", param, ctx)
        return tuple(sorted(set(counts)))


@cli.command()
@click.argument("model")
@click.argument("cluster")
@click.option("--gpus", "counts", type=_Counts(), required=True,
              help="GPU counts to plan, comma-separated (e.g. 64,128,256,512).")
@functools.partial(problem_options, gpus=False)
@search_options
@click.option("--tokens", type=_Count(), help="Training tokens (e.g. 2T): adds time to train "
              "and GPU-hours.")
@click.option("--gpu-hour-price", type=click.FloatRange(min=0, min_open=True, max=1e6),
              metavar="USD", help="Price of one GPU-hour: adds the cost to train --tokens.")
@click.option("--plot", type=click.Path(dir_okay=False), help="Write throughput (log-log, with "
              "ideal scaling), scaling efficiency, and with --tokens time to train (and cost) "
              "against GPU count to this .svg (and a PNG beside it where matplotlib is "
              "installed), or to this .png (needs matplotlib).")
@framework_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def sweep(model, cluster, counts, tokens, gpu_hour_price, plot, framework, as_json, nodes,
          seq_len, global_batch, global_batch_tokens, precision, optimizer, fp8_recipe,
          attention, min_free, **pins):
    """The best plan of MODEL on CLUSTER for each GPU count: step time, throughput, MFU,
    scaling efficiency, and with --tokens time to train, GPU-hours and cost."""
    from planner.inputs.loader import framework_name
    from planner.search import sweep as sweeping

    if gpu_hour_price is not None and tokens is None:
        raise InputError("--gpu-hour-price: give --tokens too (the cost is that of training "
                         "them)")
    if plot is not None:
        _plot_format(plot)
    pins.pop("timings", None)
    run_precision = run_precision_options(pins)
    framework = framework_name(framework)
    space, settings = _search_space(pins)

    def load(n: int):
        return _load_problem(model, cluster, gpus=n, nodes=nodes, seq_len=seq_len,
                             global_batch=global_batch,
                             global_batch_tokens=global_batch_tokens, precision=precision,
                             optimizer=optimizer, framework=framework, fp8_recipe=fp8_recipe,
                             attention=attention, min_free=min_free, quiet=True,
                             **run_precision)

    first = load(counts[0])
    for note in first.notes:            # once, not once per count
        if "node count is only a default" not in note:
            _stderr(f"note: {note}")
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True,
                  disable=as_json or not sys.stderr.isatty()) as progress:
        task = progress.add_task("planning", total=len(counts))
        rows = sweeping.sweep(load, counts, space, settings, num_tokens=tokens,
                              gpu_hour_price=gpu_hour_price,
                              step=lambda n: progress.advance(task))
    from planner.search.pin_notes import pinned_settings

    planned = [r for r in rows if r.plan is not None]
    notes = _notes(pinned_settings(first, space, [r.plan for r in planned],
                                   [f"{r.gpus} GPUs" for r in planned])
                   + [f"{r.gpus} GPUs: {r.note}" for r in planned if r.note])
    if plot:
        _write_plot(plot, first, rows)
    if as_json:
        out = {**_json_head(first, notes), "num_gpus": list(counts),
               "rows": [{"gpus": r.gpus,
                         "plan": r.plan.model_dump(mode="json") if r.plan else None,
                         "error": r.error, "scaling_efficiency": r.scaling_efficiency,
                         "note": r.note}
                        for r in rows]}
        click.echo(json.dumps(out, indent=2))
        return
    from planner.cli import render

    t = first.training
    heading = (f"{first.model.name} ({render.params_label(first.model)}) on "
               f"{first.cluster.gpu.name}: batch {t.global_batch} x {t.seq_len} tokens, "
               f"{render.run_label(first)}, {first.framework.name}")
    render.print_renderable(render.sweep_view(heading, rows))


def _plot_format(path: str) -> str:
    """'svg' or 'png', from --plot's suffix; refused before the sweep runs when the name asks
    for a format the planner cannot write (a PNG needs matplotlib)."""
    import importlib.util

    if not path.strip():
        raise InputError("--plot: empty path")
    suffix = Path(path).suffix.lower()
    if suffix == ".png" and importlib.util.find_spec("matplotlib") is None:
        raise InputError(f"--plot {shown(path)}: PNG needs matplotlib (pip install "
                         f"matplotlib); use a .svg name")
    if suffix not in (".svg", ".png"):
        raise InputError(f"--plot {shown(path)}: the plot is an SVG (or a PNG with "
                         f"matplotlib); use a .svg or .png name")
    return suffix[1:]


def _write_plot(path: str, problem, rows) -> None:
    """The sweep's plot, written whole or not at all: to a .svg name the SVG (and a PNG
    beside it where matplotlib is), to a .png name the PNG alone."""
    from planner.cli import plot
    from planner.frameworks import write_files

    xs = [r.gpus for r in rows]
    panels = plot.sweep_panels(rows)
    t = problem.training
    title = (f"{problem.model.name} on {problem.cluster.gpu.name}: batch {t.global_batch} x "
             f"{t.seq_len} tokens (fixed), best plan per GPU count")
    target = Path(path)
    written, png = [], target
    if _plot_format(path) == "svg":
        written = write_files({target.name: plot.sweep_svg(title, xs, panels)}, target.parent,
                              force=True)
        png = target.with_suffix(".png")
    partial = png.with_name(f".{png.name}.tmp.png")
    try:
        if plot.sweep_png(str(partial), title, xs, panels):
            partial.replace(png)
            written.append(png)
        elif not written:
            raise InputError(f"--plot {shown(path)}: PNG needs matplotlib, which did not "
                             f"load; use a .svg name")
    finally:
        partial.unlink(missing_ok=True)
    for p in written:
        _stderr(f"wrote {p}")


@cli.command()
@click.argument("cluster")
@click.argument("runs_file", metavar="RUNS")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the calibrated cluster.yaml to FILE (replacing it).")
@click.option("--fit", "names", metavar="NAMES", help="Comma-separated constants to fit, "
              "e.g. gemm_peak_fraction,step_overhead_s; refused unless the runs determine "
              "them (default: every one the runs determine).")
@click.option("--nodes", type=int, help="Override the cluster's node count.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def calibrate(cluster, runs_file, out_file, names, nodes, as_json):
    """Fit CLUSTER's efficiency constants to the measured runs of RUNS (a runs.yaml whose
    runs give a strategy, a config file or a Megatron-LM log, and the step time measured; a
    config with its run's Megatron-LM or torchtitan log gives both, and the logged peak memory
    is reported beside the planner's):
    error per run before and after, each fitted constant with its uncertainty, and with --out
    a cluster.yaml to plan with. Without --fit, the constants the runs determine are fitted
    and the others kept, each with why; exit 1 when the runs cannot determine the constants
    --fit names (or none at all)."""
    from pathlib import Path

    from planner.calibrate import fit, output
    from planner.calibrate.runs import load_runs
    from planner.frameworks import write_files
    from planner.inputs.loader import is_preset, load_cluster, preset_text
    from planner.inputs.safe_parse import read_text

    if out_file is not None and not out_file.strip():
        raise InputError("--out: empty path")
    chosen = None
    if names is not None:
        chosen = tuple(n.strip() for n in names.split(",") if n.strip())
        if not chosen:
            raise InputError("--fit: name at least one constant")
    base = load_cluster(cluster, nodes=nodes)
    runs = load_runs(runs_file, cluster, nodes=nodes)
    calibration = fit.calibrate(base, runs, chosen)
    written = None
    if out_file is not None:
        source = preset_text(cluster) if is_preset(cluster) else read_text(Path(cluster))
        text = output.calibrated_text(source, calibration, Path(runs_file).name)
        path = Path(out_file)
        written = str(write_files({path.name: text}, path.parent, force=True)[0])
        _stderr(f"wrote {written}")
    if as_json:
        click.echo(json.dumps(_calibration_json(calibration, base, runs_file, written),
                              indent=2))
        return
    from planner.cli.render import print_renderable
    from planner.cli.render_calibrate import calibrate_view

    n = len(runs)
    heading = (f"{base.name} ({base.gpu.name}) calibrated on {n} run{'s' if n != 1 else ''} "
               f"of {runs_file}: {len(calibration.constants)} constants, "
               f"{calibration.iterations} iterations")
    print_renderable(calibrate_view(heading, calibration, written=written))


def _calibration_json(calibration, cluster, runs_file: str, written: str | None) -> dict:
    from cost_models.units import GiB

    def gib(value):
        return None if value is None else value / GiB

    return {
        "cluster": cluster.name, "runs_file": runs_file, "out": written,
        "iterations": calibration.iterations,
        "constants": [{"name": c.constant.name, "path": c.constant.path, "before": c.before,
                       "after": c.after, "standard_error": c.standard_error,
                       "bounds": [c.constant.lower, c.constant.upper], "at_bound": c.at_bound}
                      for c in calibration.constants],
        "runs": [{"name": r.run.name, "num_gpus": r.run.problem.num_gpus,
                  "strategy": r.run.strategy.model_dump(mode="json"),
                  "measured_step_s": r.run.step_s,
                  "before_step_s": r.before.step_s, "after_step_s": r.after.step_s,
                  "before_error": r.error("before"), "after_error": r.error("after"),
                  "measured_peak_gib": gib(r.run.peak_bytes),
                  "before_peak_gib": gib(r.before.peak_bytes),
                  "after_peak_gib": gib(r.after.peak_bytes),
                  "logged_memory": _logged_memory_json(r.logged_memory)}
                 for r in calibration.runs],
        "not_fitted": [{"name": name, "why": why} for name, why in calibration.not_fitted],
        "mean_abs_error": {"before": calibration.mean_abs_error("before"),
                           "after": calibration.mean_abs_error("after"),
                           "logged_memory": calibration.mean_abs_logged_memory_error()},
    }


def _logged_memory_json(peak) -> dict | None:
    """A log's peak memory against the planner's (GiB): reported, not fitted."""
    from cost_models.units import GiB

    if peak is None:
        return None
    return {"kind": peak.kind, "measured_gib": peak.measured_bytes / GiB,
            "predicted_gib": peak.predicted_bytes / GiB, "error": peak.error}
