"""Fit a cluster's constants to measured runs: bounded least squares on log errors, with the
uncertainty of each constant and a refusal when the runs cannot determine what is asked.

The fit minimises sum_i (log predicted_i - log measured_i)^2 over the chosen constants, each
scaled to its physical range (u = (value - lower) / (upper - lower), 0..1), by Levenberg-
Marquardt with a forward-difference Jacobian, every step clipped into the range (Nocedal &
Wright 2006, Sec. 10.3; Marquardt 1963). Log errors weigh a 10% miss on a 1 s step as on a
100 s one.

The uncertainty is the linearised one (Nocedal & Wright Sec. 10.3; Press et al., Numerical
Recipes 3rd ed., Sec. 15.5, Eq. 15.5.15): cov(u) = sigma^2 (J^T J)^-1, with sigma^2 the
residual variance RSS / (n - p), never below the assumed run-to-run noise squared. A constant
whose standard error exceeds `determined_range_fraction` of its range is not determined by
the runs: alone (no run depends on it) or together with others it cannot be told apart from
(J^T J nearly singular along their combination). A fit of named constants the runs do not
determine is refused before it starts; without names, `select` picks the constants to fit.
"""

from __future__ import annotations

import difflib
import functools
import math
from dataclasses import dataclass, field, replace
from importlib import resources

import numpy as np

from cost_models.memory import allocator_bytes_of_total
from cost_models.units import GiB
from planner.calibrate.runs import MeasuredRun
from planner.costing.evaluate import evaluate_strategy
from planner.errors import InfeasibleError, InputError
from planner.inputs.safe_parse import load_yaml
from planner.schemas.cluster import ClusterSpec

STEP, PEAK = "step", "peak"
_DIFF_STEP = 1e-3
"""Forward-difference step in range units (0.1% of a constant's physical range)."""
_MAX_ITERATIONS = 100


@dataclass(frozen=True)
class Constant:
    """A cluster constant the fit can move: where it lives, its bounds, what it moves."""

    path: str
    """section.field in cluster.yaml (efficiency.gemm_peak_fraction)."""
    lower: float
    upper: float
    measures: str
    """'step' (it changes step times) or 'peak' (peak memory)."""
    needs: str
    """The kind of run that determines it."""

    @property
    def name(self) -> str:
        return self.path.split(".")[-1]

    def value(self, cluster: ClusterSpec) -> float:
        section, key = self.path.split(".")
        return float(getattr(getattr(cluster, section), key))


@dataclass(frozen=True)
class FitSettings:
    constants: dict[str, Constant]
    measurement_noise: float
    determined_range_fraction: float


@functools.cache
def settings() -> FitSettings:
    """The constants and thresholds of calibrate/constants.yaml."""
    text = (resources.files("planner.calibrate") / "constants.yaml").read_text(encoding="utf-8")
    data = load_yaml(text, "planner/calibrate/constants.yaml")
    constants = {}
    for path, spec in data["constants"].items():
        c = Constant(path, float(spec["bounds"][0]), float(spec["bounds"][1]), spec["measures"],
                     spec["needs"])
        constants[c.name] = c
    return FitSettings(constants, float(data["measurement_noise"]),
                       float(data["determined_range_fraction"]))


def choose_constants(names: tuple[str, ...] | None, runs: list[MeasuredRun]) -> list[Constant]:
    """The constants named (short names, e.g. gemm_peak_fraction), or by default every one
    the runs' measurements speak to (memory constants only when a run measured its peak)."""
    known = settings().constants
    if names is None:
        kinds = {STEP} if any(r.step_s for r in runs) else set()
        if any(r.peak_bytes for r in runs):
            kinds.add(PEAK)
        return [c for c in known.values() if c.measures in kinds]
    chosen = []
    for name in names:
        key = name.split(".")[-1]
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise InputError(f"--fit: no constant named '{name}'{hint}; constants: "
                             f"{', '.join(known)}")
        if known[key] not in chosen:
            chosen.append(known[key])
    missing = [c for c in chosen if not any(_measures(r, c.measures) for r in runs)]
    if missing:
        c = missing[0]
        what = "step_s" if c.measures == STEP else "peak_gib"
        raise InputError(f"--fit {c.name}: no run measured {what}, which it changes")
    return chosen


def _measures(run: MeasuredRun, kind: str) -> bool:
    return (run.step_s if kind == STEP else run.peak_bytes) is not None


def with_values(cluster: ClusterSpec, values: dict[str, float]) -> ClusterSpec:
    """The cluster with some constants replaced ({section.field: value})."""
    sections: dict[str, dict[str, float]] = {}
    for path, value in values.items():
        section, key = path.split(".")
        sections.setdefault(section, {})[key] = value
    update = {s: getattr(cluster, s).model_copy(update=keys) for s, keys in sections.items()}
    return cluster.model_copy(update=update)


# --------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class Predicted:
    step_s: float
    peak_bytes: float
    """The fullest GPU's total, as nvidia-smi shows it (reserve included)."""
    allocated_bytes: float = 0.0
    """That GPU's peak as PyTorch's max_memory_allocated shows it: the total less the reserve."""
    reserved_bytes: float = 0.0
    """As max_memory_reserved shows it: allocated plus fragmentation."""


def predict(runs: list[MeasuredRun], values: dict[str, float]) -> list[Predicted]:
    """Each run priced on its own cluster with some constants replaced ({path: value})."""
    out = []
    for run in runs:
        cluster = with_values(run.problem.cluster, values)
        report = evaluate_strategy(replace(run.problem, cluster=cluster), run.strategy)
        allocated, reserved = allocator_bytes_of_total(
            total_bytes=report.memory.peak_bytes,
            framework_bytes=cluster.reserve.framework_gib * GiB,
            fragmentation_fraction=cluster.reserve.fragmentation_fraction)
        out.append(Predicted(report.time.step_s, report.memory.peak_bytes, float(allocated),
                             float(reserved)))
    return out


class _Problem:
    """The runs and constants of one fit: residuals as a function of u (0..1 per constant)."""

    def __init__(self, runs: list[MeasuredRun], constants: list[Constant]) -> None:
        self.runs, self.constants = runs, constants
        kinds = {c.measures for c in constants}
        self.rows = [(i, k) for k in (STEP, PEAK) if k in kinds
                     for i, r in enumerate(runs) if _measures(r, k)]
        self.lower = np.array([c.lower for c in constants])
        self.width = np.array([c.upper - c.lower for c in constants])

    def values(self, u: np.ndarray) -> dict[str, float]:
        return {c.path: float(v) for c, v in zip(self.constants, self.lower + u * self.width)}

    def predict(self, u: np.ndarray) -> list[Predicted]:
        return predict(self.runs, self.values(u))

    def residuals(self, u: np.ndarray) -> np.ndarray:
        predicted = self.predict(u)
        return np.array([math.log(predicted[i].step_s / self.runs[i].step_s) if k == STEP else
                         math.log(predicted[i].peak_bytes / self.runs[i].peak_bytes)
                         for i, k in self.rows])

    def jacobian(self, u: np.ndarray, r: np.ndarray) -> np.ndarray:
        """d residual / d u by forward differences (backward at the upper bound)."""
        J = np.empty((len(r), len(u)))
        for j in range(len(u)):
            h = _DIFF_STEP if u[j] + _DIFF_STEP <= 1 else -_DIFF_STEP
            shifted = u.copy()
            shifted[j] += h
            J[:, j] = (self.residuals(shifted) - r) / h
        return J


def standard_errors(J: np.ndarray, sigma: float) -> np.ndarray:
    """Standard error of each u: sqrt(diag(sigma^2 (J^T J)^-1)), through the SVD so that a
    direction the runs do not constrain gives an enormous error, not a solver failure."""
    _, s, vt = np.linalg.svd(J, full_matrices=True)
    s = np.concatenate([s, np.zeros(vt.shape[0] - len(s))])
    floor = 1e-12 * max(float(s.max(initial=0)), 1e-12)
    return sigma * np.sqrt((vt ** 2 / np.maximum(s, floor)[:, None] ** 2).sum(axis=0))


# --------------------------------------------------------------------------- identifiability

def _determined(J: np.ndarray, columns: list[int]) -> bool:
    fit = settings()
    return bool(standard_errors(J[:, columns], fit.measurement_noise).max()
                <= fit.determined_range_fraction)


def _linear_rss(J: np.ndarray, r: np.ndarray, u: np.ndarray) -> float:
    """The squared error a Gauss-Newton step on these columns would leave, the step clipped
    into the bounds (a constant at its bound cannot go further)."""
    step = np.linalg.lstsq(J, -r, rcond=None)[0]
    step = np.clip(u + step, 0.0, 1.0) - u
    rest = r + J @ step
    return float(rest @ rest)


def determined_subset(J: np.ndarray) -> list[int]:
    """A set of constants (column indices) the runs determine together, in the order of
    constants.yaml, each kept when the set stays determined."""
    chosen: list[int] = []
    for j in range(J.shape[1]):
        if _determined(J, chosen + [j]):
            chosen.append(j)
    return chosen


def select(J: np.ndarray, r: np.ndarray, u: np.ndarray) -> list[int]:
    """The constants (column indices) to fit: forward stepwise selection on the linearised
    fit. Each round adds the constant that lowers the squared log error most among those
    the runs still determine together, while the gain beats twice the noise variance (the
    Akaike criterion's price of a parameter: Akaike 1974; Burnham & Anderson 2002, Sec. 2.2),
    so that no constant is fitted to the runs' noise."""
    penalty = 2 * settings().measurement_noise ** 2
    chosen: list[int] = []
    rss = float(r @ r)
    while True:
        gains = [(rss - _linear_rss(J[:, chosen + [j]], r, u[chosen + [j]]), j)
                 for j in range(J.shape[1]) if j not in chosen and _determined(J, chosen + [j])]
        if not gains:
            break
        top = max(g for g, _ in gains)
        if top <= penalty:
            break
        # Near-ties (within 1%) go to the constant earlier in constants.yaml.
        gain, best = next((g, j) for g, j in gains if g >= 0.99 * top)
        chosen.append(best)
        rss -= gain
    return sorted(chosen)


def why_not_fitted(J: np.ndarray, constants: list[Constant], subset: list[int]
                   ) -> list[tuple[str, str]]:
    """(name, one line) for each constant outside `subset`: it moves no run enough on its
    own, the runs cannot tell it apart from one (or a combination) of the subset, or they
    need no change of it."""
    lines = []
    for j, c in enumerate(constants):
        if j in subset:
            continue
        if not _determined(J, [j]):
            effect = float(np.abs(J[:, j]).max())
            lines.append((c.name, f"no run depends on {c.name} enough: across its whole range "
                                  f"({c.lower:g}-{c.upper:g}) it moves the runs by at most "
                                  f"{100 * effect:.1f}%; a run that would: {c.needs}"))
            continue
        if _determined(J, subset + [j]):
            lines.append((c.name, f"the runs need no other {c.name}: fitting it too would "
                                  f"lower their error by less than their noise"))
            continue
        partners = [k for k in subset if not _determined(J, [j, k])]
        if not partners:        # a combination of several: the weakest direction's members
            columns = subset + [j]
            scaled = J[:, columns] / np.linalg.norm(J[:, columns], axis=0)
            weakest = np.linalg.svd(scaled)[2][-1]
            partners = [columns[i] for i in np.argsort(-np.abs(weakest))[:3] if columns[i] != j]
        names = [constants[k].name for k in partners]
        lines.append((c.name, f"the runs cannot tell {c.name} apart from {_and(names)}; a "
                              f"run that would: {c.needs}"))
    return lines


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# --------------------------------------------------------------------------- the fit

@dataclass(frozen=True)
class FittedConstant:
    constant: Constant
    before: float
    after: float
    standard_error: float
    at_bound: bool
    """The runs push it onto its physical bound: a cost the model lacks, most likely."""


@dataclass(frozen=True)
class RunFit:
    run: MeasuredRun
    before: Predicted
    after: Predicted

    def error(self, which: str, kind: str = STEP) -> float | None:
        """Signed relative error of the prediction (predicted / measured - 1)."""
        predicted = getattr(self, which)
        if kind == STEP:
            return None if self.run.step_s is None else predicted.step_s / self.run.step_s - 1
        return None if self.run.peak_bytes is None else \
            predicted.peak_bytes / self.run.peak_bytes - 1

    @property
    def logged_memory(self) -> LoggedPeak | None:
        """The log's peak memory against the prediction with the cluster's own constants
        (reported, never fitted)."""
        logged = self.run.logged_memory
        if logged is None:
            return None
        if logged.allocated_bytes is not None:
            return LoggedPeak("max allocated", logged.allocated_bytes,
                              self.before.allocated_bytes)
        return LoggedPeak("max reserved", logged.reserved_bytes, self.before.reserved_bytes)


@dataclass(frozen=True)
class LoggedPeak:
    """A log's peak memory and the planner's prediction of the same quantity."""

    kind: str
    """'max allocated' (Megatron-LM prints it) or 'max reserved' (torchtitan prints only it)."""
    measured_bytes: float
    predicted_bytes: float

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_bytes / self.measured_bytes - 1


@dataclass(frozen=True)
class Calibration:
    cluster: ClusterSpec
    """The input cluster with the fitted constants."""
    constants: list[FittedConstant]
    runs: list[RunFit]
    iterations: int
    not_fitted: list[tuple[str, str]] = field(default_factory=list)
    """(name, why) of the constants a default fit left at the cluster's values."""

    def mean_abs_error(self, which: str, kind: str = STEP) -> float | None:
        errors = [abs(e) for r in self.runs if (e := r.error(which, kind)) is not None]
        return sum(errors) / len(errors) if errors else None

    def mean_abs_logged_memory_error(self) -> float | None:
        errors = [abs(m.error) for r in self.runs if (m := r.logged_memory) is not None]
        return sum(errors) / len(errors) if errors else None


def _start(cluster: ClusterSpec, runs: list[MeasuredRun], names: tuple[str, ...] | None):
    """The fit's problem, the cluster's values in range units (as given, then clipped into
    the bounds), and the residuals and Jacobian there."""
    constants = choose_constants(names, runs)
    if not constants:
        raise InputError("no run measured step_s or peak_gib: nothing to fit")
    fit = _Problem(runs, constants)
    start = np.array([(c.value(cluster) - c.lower) / (c.upper - c.lower) for c in constants])
    u = np.clip(start, 0.0, 1.0)
    r = fit.residuals(u)
    return fit, start, u, r, fit.jacobian(u, r)


def calibrate(cluster: ClusterSpec, runs: list[MeasuredRun],
              names: tuple[str, ...] | None = None) -> Calibration:
    """Fit `names` to the runs, starting from the cluster's own values. Refuses
    (InfeasibleError) when the runs cannot determine the constants named, saying why and
    naming those they can. Without `names`: the constants the runs determine together and
    need (`select`); the others keep the cluster's values, each with why
    (`Calibration.not_fitted`); refused only when the runs determine none."""
    fit, start, u, r, J = _start(cluster, runs, names)
    constants = fit.constants
    everything = list(range(len(constants)))
    if names is not None and _determined(J, everything):
        subset = everything     # as named
    else:                       # what the runs determine and need (named when refused)
        subset = select(J, r, u)
        if names is not None and not subset:
            subset = determined_subset(J)
    reasons = why_not_fitted(J, constants, subset)
    if names is not None and reasons or not determined_subset(J):
        n = len(fit.rows)
        fix = (f"these the runs do determine: --fit "
               f"{','.join(constants[j].name for j in subset)}"
               if subset else "no constant is determined by these runs alone")
        raise InfeasibleError(f"{n} measurement{'s' if n != 1 else ''} cannot determine "
                              f"{len(constants)} constant{'s' if len(constants) != 1 else ''}",
                              details=[why for _, why in reasons] + [fix])
    if not subset:              # the cluster already prices the runs within their noise
        predicted = fit.predict(start)
        return Calibration(cluster, [], [RunFit(run, p, p) for run, p in zip(runs, predicted)],
                           0, reasons)
    if reasons:
        fit, start, u, r, J = _start(cluster, runs, tuple(constants[j].name for j in subset))
        constants = fit.constants
    u, r, J, iterations = _levenberg_marquardt(fit, u, r, J)
    n, p = len(r), len(u)
    rss = float(r @ r)
    sigma = max(settings().measurement_noise, math.sqrt(rss / (n - p)) if n > p else 0.0)
    errors = standard_errors(J, sigma) * fit.width
    # Four significant digits: what the calibrated cluster.yaml says, and what it prices.
    after = {path: float(f"{v:.4g}") for path, v in fit.values(u).items()}
    fitted = [FittedConstant(c, c.value(cluster), after[c.path], float(e),
                             bool(u[j] <= 1e-6 or u[j] >= 1 - 1e-6))
              for j, (c, e) in enumerate(zip(constants, errors))]
    before_pred = fit.predict(start)       # the cluster's own values, even outside the bounds
    after_pred = fit.predict((np.array(list(after.values())) - fit.lower) / fit.width)
    return Calibration(with_values(cluster, after), fitted,
                       [RunFit(run, b, a) for run, b, a in zip(runs, before_pred, after_pred)],
                       iterations, reasons)


def _levenberg_marquardt(fit: _Problem, u: np.ndarray, r: np.ndarray, J: np.ndarray):
    """Minimise |r(u)|^2 for u in [0, 1]^p (projected Levenberg-Marquardt, Marquardt 1963:
    (J^T J + lambda diag(J^T J)) du = -J^T r, the step clipped into the box)."""
    cost, damping = float(r @ r), 1e-3
    iterations = 0
    for iterations in range(1, _MAX_ITERATIONS + 1):
        A, g = J.T @ J, J.T @ r
        scale = np.diag(A) + 1e-12
        accepted = False
        while damping < 1e10:
            step = np.linalg.solve(A + damping * np.diag(scale), -g)
            trial = np.clip(u + step, 0.0, 1.0)
            r_trial = fit.residuals(trial)
            trial_cost = float(r_trial @ r_trial)
            if trial_cost < cost:
                accepted = True
                damping = max(damping / 3, 1e-9)
                break
            damping *= 4
        if not accepted:
            break
        gain, moved = cost - trial_cost, float(np.abs(trial - u).max())
        u, r, cost = trial, r_trial, trial_cost
        J = fit.jacobian(u, r)
        # Converged: the error no longer falls by a millionth, or the constants move by less
        # than a millionth of their ranges (far below what the file's four digits show).
        if gain <= 1e-6 * cost or moved < 1e-6 or cost < 1e-20:
            break
    return u, r, J, iterations
