"""`planner calibrate` for the terminal: the fitted constants, then the error of every run
before and after, 80 columns wide."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from cost_models.units import GiB
from planner.cli.render import percent, seconds


def _signed(value: float | None) -> str:
    return "" if value is None else f"{100 * value:+.1f}%"


def _value(value: float) -> str:
    return f"{value:.4g}"


def constants_table(calibration) -> Table:
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for name in ("constant", "before", "fitted", "+- 1 sd", "bounds"):
        table.add_column(name, justify="left" if name == "constant" else "right", no_wrap=True)
    for c in calibration.constants:
        k = c.constant
        mark = " (at bound)" if c.at_bound else ""
        table.add_row(k.name, _value(c.before), _value(c.after) + mark,
                      f"{c.standard_error:.2g}", f"{k.lower:g}-{k.upper:g}")
    return table


LOGGED_KIND = {"max allocated": "alloc", "max reserved": "resv"}
"""How the runs table labels a log's peak: PyTorch's max allocated or max reserved bytes."""


def runs_table(calibration) -> Table:
    peaks = any(r.run.peak_bytes is not None for r in calibration.runs)
    logged = any(r.logged_memory is not None for r in calibration.runs)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    columns = ["run", "step", "before", "after"] + (["peak", "before", "after"] if peaks else [])
    columns += ["log GiB", "predicted"] if logged else []
    for name in columns:
        table.add_column(name, justify="left" if name == "run" else "right",
                         no_wrap=name != "run", max_width=24 if name == "run" else None)
    for r in calibration.runs:
        cells = [r.run.name]
        if r.run.step_s is None:
            cells += ["", "", ""]
        else:
            cells += [seconds(r.run.step_s), _signed(r.error("before")), _signed(r.error("after"))]
        if peaks:
            if r.run.peak_bytes is None:
                cells += ["", "", ""]
            else:
                cells += [f"{r.run.peak_bytes / GiB:.1f} GiB", _signed(r.error("before", "peak")),
                          _signed(r.error("after", "peak"))]
        if logged:
            m = r.logged_memory
            cells += ["", ""] if m is None else [
                f"{m.measured_bytes / GiB:.1f} {LOGGED_KIND[m.kind]}",
                f"{m.predicted_bytes / GiB:.1f} {_signed(m.error)}"]
        table.add_row(*cells)
    return table


def calibrate_view(heading: str, calibration, *, written: str | None) -> Group:
    parts = [Text(heading, style="bold"),
             constants_table(calibration) if calibration.constants else
             Text("nothing fitted: the cluster's constants price these runs within their "
                  "noise")]
    if calibration.not_fitted:
        parts.append(Text("not fitted, kept at the cluster's values (--fit NAMES to insist):\n"
                          + "\n".join(f"  {why}" for _, why in calibration.not_fitted),
                          style="dim"))
    parts.append(runs_table(calibration))
    summary = []
    for kind, what in (("step", "step time"), ("peak", "peak memory")):
        before = calibration.mean_abs_error("before", kind)
        if before is not None:
            summary.append(f"mean |error| of the {what}: {percent(before)} with the cluster's "
                           f"constants, {percent(calibration.mean_abs_error('after', kind))} "
                           f"fitted")
    logged = calibration.mean_abs_logged_memory_error()
    if logged is not None:
        summary.append(f"mean |error| of the logged peak memory: {percent(logged)} with the "
                       f"cluster's constants (reported, not fitted)")
    parts.append(Text("\n".join(summary)))
    bounded = [c.constant.name for c in calibration.constants if c.at_bound]
    if bounded:
        parts.append(Text(f"at a physical bound: {', '.join(bounded)}: the runs push it past what "
                          f"the hardware can do, so the planner's model of them misses a cost "
                          f"or an overlap (or a run's strategy is not what ran)",
                          style="yellow"))
    parts.append(Text("before/after: predicted / measured - 1; +- 1 sd: the fitted value's "
                      "standard error (from the runs' scatter, never below the assumed "
                      "run-to-run noise)", style="dim"))
    if logged is not None:
        parts.append(Text("log GiB: the fullest GPU's peak the log prints, PyTorch's max "
                          "allocated (alloc, Megatron-LM) or max reserved (resv, torchtitan); "
                          "predicted: the planner's peak less its reserve (CUDA context, "
                          "buffers; and, for alloc, fragmentation)", style="dim"))
    if not written:
        parts.append(Text("pass --out FILE to write the calibrated cluster.yaml", style="dim"))
    return Group(*parts)
