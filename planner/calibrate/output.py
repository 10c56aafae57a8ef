"""The calibrated cluster.yaml: the input file with the fitted values in place, each with a
comment giving its uncertainty and its value before, so that the sources of the other numbers
stay beside them. Read back and checked before it is written."""

from __future__ import annotations

import re

import yaml

from planner.calibrate.fit import Calibration
from planner.errors import InputError
from planner.inputs.loader import validate_file
from planner.inputs.safe_parse import load_yaml
from planner.schemas.cluster import ClusterSpec


def _number(value: float) -> str:
    return f"{value:.4g}"


def calibrated_text(source: str, calibration: Calibration, runs_file: str) -> str:
    """`source` (the cluster's own YAML) with the fitted constants replaced in their block
    lines; a plain dump of the calibrated cluster when the file lays them out otherwise
    (flow style, absent keys)."""
    n = len(calibration.runs)
    before = calibration.mean_abs_error("before")
    after = calibration.mean_abs_error("after")
    summary = (f"# Calibrated by `planner calibrate` on {n} run{'s' if n != 1 else ''} of "
               f"{runs_file}" + (f": mean |step error| {100 * before:.1f}% before, "
                                 f"{100 * after:.1f}% after" if before is not None else "")
               + ".\n")
    text = source
    for c in calibration.constants:
        text = _replace(text, c.constant.path, f"{_number(c.after)}",
                        f"calibrated: {_number(c.after)} +- {c.standard_error:.2g} on "
                        f"{n} runs of {runs_file} (was {_number(c.before)})")
        if text is None:
            break
    if text is None or not _reads_back(text, calibration.cluster):
        dump = yaml.safe_dump(calibration.cluster.model_dump(mode="json", exclude_none=True),
                              sort_keys=False)
        text = dump
    return summary + text


def _replace(text: str | None, path: str, value: str, comment: str) -> str | None:
    """Replace `section:` / `  field: value  # ...` in block style; None when not found."""
    if text is None:
        return None
    section, field = path.split(".")
    lines = text.splitlines(keepends=True)
    inside = False
    for i, line in enumerate(lines):
        if re.match(rf"^{section}:\s*(#.*)?$", line):
            inside = True
            continue
        if inside and line.strip() and not line[0].isspace() and not line.startswith("#"):
            return None                                  # left the section
        m = re.match(rf"^(\s+){field}:\s*[^#\n]*?(\s*#.*)?$", line) if inside else None
        if m:
            lines[i] = f"{m.group(1)}{field}: {value}  # {comment}\n"
            return "".join(lines)
    return None


def _reads_back(text: str, cluster: ClusterSpec) -> bool:
    try:
        read = validate_file(ClusterSpec, load_yaml(text, "calibrated cluster"), "calibrated")
    except InputError:
        return False
    # --nodes changes the node count for this run only: the file keeps its own.
    return read.model_copy(update={"num_nodes": cluster.num_nodes}) == cluster
