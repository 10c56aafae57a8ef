"""Two evaluated plans side by side: memory and time term by term, and the few terms that
explain the gap, each with the difference in the strategies that causes it.

The terms are the fields of `PlanReport`: memory at each plan's own peak stage (what decides
whether it fits), and the parts of the step time, which add up to `step_s`, so the time deltas
add up to the step-time delta exactly. `planner diff` renders this; no formatting here.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.problem import Problem
from planner.schemas.report import PlanReport, StrategyOut
from planner.schemas.strategy import offload_labels

MEMORY_TERMS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                "other_bytes")
"""StageMemory fields, at the peak stage; they add up to peak_bytes."""

TIME_TERMS = ("compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "ep_comm_s", "cp_comm_s",
              "host_wait_s", "pipeline_engine_s", "bubble_s", "optimizer_s", "offload_s",
              "grad_zero_s", "grad_norm_s", "loss_reduce_s", "overhead_s")
"""TimeReport fields; they add up to step_s."""

EQUAL_WITHIN = 0.01
"""Plans whose speed differs by at most this share are about equally fast."""

EXPLAINED_SHARE = 0.8
"""The explaining terms together account for at least this share of the step-time gap..."""

MAX_EXPLAINING = 3
"""...or are this many, the largest first, whichever comes first (one sentence)."""


@dataclass(frozen=True)
class Term:
    """One quantity of both plans: `name` is the report's field (its unit in the name)."""

    name: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a


@dataclass(frozen=True)
class Reason:
    """A term that explains part of a gap, and what differs in the strategies behind it:
    'pp 8 and 16 micro-batches vs pp 1' (B's setting, then A's), or, where both share it,
    'dp 64 in both'; empty where no setting of the strategy drives that term."""

    term: Term
    why: str


@dataclass(frozen=True)
class PlanDiff:
    memory: tuple[Term, ...]
    """MEMORY_TERMS at each plan's peak stage."""
    time: tuple[Term, ...]
    """TIME_TERMS."""
    peak: Term
    step: Term
    tokens_per_s: Term
    mfu: Term
    num_gpus: Term
    tokens_per_step: Term
    explaining: tuple[Reason, ...]
    """The time terms that explain the step-time gap, largest first; empty when the two steps
    are within EQUAL_WITHIN."""
    memory_driver: Reason | None
    """The memory term that moves the peak most; None when the peaks are equal."""

    @property
    def terms(self) -> tuple[Term, ...]:
        """Every term, in the order a table shows them."""
        return (*self.memory, self.peak, *self.time, self.step, self.tokens_per_s, self.mfu)

    @property
    def same_work(self) -> bool:
        """Same GPUs and tokens per step: step time compares the two. Otherwise tokens/s does."""
        return (self.num_gpus.a == self.num_gpus.b
                and self.tokens_per_step.a == self.tokens_per_step.b)

    @property
    def speedup(self) -> float:
        """How many times faster B is than A (below 1: slower), by step time for the same
        work, else by tokens/s."""
        if self.same_work:
            return self.step.a / self.step.b
        return self.tokens_per_s.b / self.tokens_per_s.a

    @property
    def equally_fast(self) -> bool:
        return abs(self.speedup - 1) <= EQUAL_WITHIN

    @property
    def unexplained_s(self) -> float:
        """The part of the step-time gap the explaining terms leave (0 when none are needed)."""
        if not self.explaining:
            return 0.0
        return self.step.delta - sum(r.term.delta for r in self.explaining)

    @property
    def others_s(self) -> float:
        """What the other terms add to the gap, where it is worth naming: more than
        1 - EXPLAINED_SHARE of it is left once MAX_EXPLAINING terms are named; else 0."""
        left = self.unexplained_s
        return left if abs(left) > (1 - EXPLAINED_SHARE) * abs(self.step.delta) else 0.0


def explaining_terms(time: tuple[Term, ...], gap_s: float) -> list[Term]:
    """The fewest time terms, largest |delta| first, whose deltas add up to within
    1 - EXPLAINED_SHARE of the gap, at most MAX_EXPLAINING. Terms against the gap count too: a
    bubble of +7 s offset by compute -5 s is the honest account of a +2 s gap."""
    chosen, total = [], 0.0
    for term in sorted((t for t in time if t.delta), key=lambda t: -abs(t.delta)):
        if len(chosen) == MAX_EXPLAINING:
            break
        chosen.append(term)
        total += term.delta
        if abs(gap_s - total) <= (1 - EXPLAINED_SHARE) * abs(gap_s):
            break
    return chosen


def diff_plans(problem_a: Problem, a: PlanReport, problem_b: Problem, b: PlanReport) -> PlanDiff:
    """Compare plan `a` (on `problem_a`) with plan `b`; deltas are b - a."""
    peak_a = a.memory.stages[a.memory.peak_stage]
    peak_b = b.memory.stages[b.memory.peak_stage]
    memory = tuple(Term(f, getattr(peak_a, f), getattr(peak_b, f)) for f in MEMORY_TERMS)
    time = tuple(Term(f, getattr(a.time, f), getattr(b.time, f)) for f in TIME_TERMS)
    step = Term("step_s", a.time.step_s, b.time.step_s)
    sides = _Sides(problem_a, a, problem_b, b)
    explaining = ()
    if abs(step.a / step.b - 1) > EQUAL_WITHIN:     # as `equally_fast` measures steps
        explaining = tuple(Reason(t, sides.why(t.name))
                           for t in explaining_terms(time, step.delta))
    peak = Term("peak_bytes", a.memory.peak_bytes, b.memory.peak_bytes)
    driver = None
    if peak.delta:
        biggest = max(memory, key=lambda t: abs(t.delta))
        driver = Reason(biggest, sides.why(biggest.name))
    return PlanDiff(
        memory=memory, time=time, peak=peak, step=step,
        tokens_per_s=Term("tokens_per_s", a.throughput.tokens_per_s,
                          b.throughput.tokens_per_s),
        mfu=Term("mfu", a.throughput.mfu, b.throughput.mfu),
        num_gpus=Term("num_gpus", problem_a.num_gpus, problem_b.num_gpus),
        tokens_per_step=Term("tokens_per_step", _tokens_per_step(problem_a, a.strategy),
                             _tokens_per_step(problem_b, b.strategy)),
        explaining=explaining, memory_driver=driver)


def _tokens_per_step(problem: Problem, s: StrategyOut) -> int:
    return s.global_batch * problem.training.seq_len


@dataclass(frozen=True)
class _Sides:
    """Both strategies, to name the settings behind a term."""

    problem_a: Problem
    a: PlanReport
    problem_b: Problem
    b: PlanReport

    def why(self, term: str) -> str:
        """'<B's settings> vs <A's>' for the first two settings that differ among those that
        drive `term`; '' when none differs (the term moved for a reason no setting names)."""
        pairs = [(f(self.problem_b, self.b), f(self.problem_a, self.a))
                 for f in _DRIVERS.get(term, ())]
        differ = [(b, a) for b, a in pairs if b != a][:2]     # the sentence stays short
        if not differ:
            return ""
        return f"{_join([b for b, _ in differ])} vs {_join([a for _, a in differ])}"


def _join(parts: list[str]) -> str:
    parts = [p for p in parts if p] or ["none"]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


# Each setting names itself for one plan ('' where it does not apply, e.g. vpp without pp).

def _pp(_, plan: PlanReport) -> str:
    return f"pp {plan.strategy.pp}"


def _vpp(_, plan: PlanReport) -> str:
    return f"vpp {plan.strategy.vpp}" if plan.strategy.pp > 1 else ""


def _schedule(_, plan: PlanReport) -> str:
    s = plan.strategy
    return f"schedule {s.pipeline_schedule.value}" if s.pp > 1 else ""


def _micro_batches(_, plan: PlanReport) -> str:
    s = plan.strategy
    return f"{s.num_micro_batches:g} micro-batches" if s.pp > 1 else ""


def _imbalance(_, plan: PlanReport) -> str:
    return f"stage imbalance {plan.time.imbalance:.2f}" if plan.strategy.pp > 1 else ""


def _tp(problem: Problem, plan: PlanReport) -> str:
    s, where = plan.strategy, ""
    if s.tp > problem.cluster.nvlink_gpus:
        where = (" across nodes" if problem.cluster.nvlink_domain is None
                 else " beyond an NVLink domain")
    return f"tp {s.tp}{where}"


def _sp(_, plan: PlanReport) -> str:
    return "sp" if plan.strategy.sequence_parallel else "no sp"


def _dp(_, plan: PlanReport) -> str:
    return f"dp {plan.strategy.dp}"


def _zero(_, plan: PlanReport) -> str:
    s = plan.strategy
    shard = f" over {s.dp_shard}" if s.zero_stage and s.dp_shard != s.dp else ""
    return f"zero {int(s.zero_stage)}{shard}"


def _overlap(_, plan: PlanReport) -> str:
    return ("gradient reduce overlapped" if plan.strategy.overlap_grad_reduce
            else "gradient reduce not overlapped")


def _recompute(_, plan: PlanReport) -> str:
    modules = plan.strategy.recompute_modules
    return f"recompute {plan.strategy.recompute.value}" + (
        "" if modules is None else f" ({', '.join(m.value for m in modules)})")


def _micro_batch(_, plan: PlanReport) -> str:
    return f"micro-batch {plan.strategy.micro_batch}"


def _precision(problem: Problem, _: PlanReport) -> str:
    return problem.training.precision_label


def _framework(problem: Problem, _: PlanReport) -> str:
    return problem.framework.name


def _gpus(problem: Problem, _: PlanReport) -> str:
    return f"{problem.num_gpus} GPUs"


def _cp(_, plan: PlanReport) -> str:
    s = plan.strategy
    return f"cp {s.cp}" + (f" ({s.cp_comm.value})" if s.cp > 1 else "")


def _ep(_, plan: PlanReport) -> str:
    return f"ep {plan.strategy.ep}"


def _dispatcher(problem, plan: PlanReport) -> str:
    dispatcher = plan.strategy.moe_dispatcher or problem.framework.defaults.moe_dispatcher
    return f"dispatcher {dispatcher.value}"


def _graphs(_, plan: PlanReport) -> str:
    graphs = plan.strategy.cuda_graphs
    return f"cuda_graphs {graphs.value}" if graphs is not None else "no CUDA graphs"


def _offload(_, plan: PlanReport) -> str:
    return ", ".join(offload_labels(plan.strategy)) or "no offload"


_DRIVERS = {
    # The slowest stage's compute: recomputation redoes forward passes; precision sets the
    # peak; the micro-batch and tp set the GEMM shapes; the GPU count splits the batch; pp
    # and the layout set the layers on the slowest stage.
    "compute_s": (_recompute, _precision, _micro_batch, _tp, _gpus, _pp, _imbalance),
    "tp_comm_s": (_tp, _sp),
    "pp_comm_s": (_pp, _micro_batches, _vpp),
    "dp_comm_s": (_dp, _zero, _overlap),
    "ep_comm_s": (_ep, _dispatcher),
    "cp_comm_s": (_cp,),
    "host_wait_s": (_ep, _micro_batch, _graphs),
    "pipeline_engine_s": (_micro_batches, _pp, _framework),
    "bubble_s": (_pp, _micro_batches, _vpp, _schedule),
    "optimizer_s": (_zero, _dp),
    "offload_s": (_offload,),
    "grad_zero_s": (_tp, _pp, _zero),
    "grad_norm_s": (_zero, _dp),
    "loss_reduce_s": (_dp,),
    "weights_bytes": (_tp, _pp, _zero),
    "gradients_bytes": (_tp, _pp, _zero),
    "optimizer_bytes": (_tp, _pp, _zero, _dp),
    "activations_bytes": (_recompute, _micro_batch, _tp, _sp, _pp, _vpp, _schedule),
    "other_bytes": (),
}
