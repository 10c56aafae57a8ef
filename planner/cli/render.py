"""Rich tables for the terminal: the only place that formats bytes, seconds and FLOP/s."""

from __future__ import annotations

import os

from rich import box
from rich.console import Console, Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from cost_models.enums import AttentionKind, PipelineSchedule, RankOrder, RecomputeModule
from cost_models.units import GiB
from planner.core.problem import default_min_free_bytes
from planner.schemas.strategy import strategy_label as strategy_phrase
from planner.schemas.report import (MemoryReport, PlanReport, SearchReport, StageMemory,
                                    TimeReport)

MEMORY_ROWS = (
    ("weights", "weights_bytes"),
    ("gradients", "gradients_bytes"),
    ("optimizer states", "optimizer_bytes"),
    ("activations", "activations_bytes"),
    ("other (reserve)", "other_bytes"),
)


def gib(num_bytes: float) -> str:
    return f"{num_bytes / GiB:,.2f} GiB"


def seconds(value: float) -> str:
    if value >= 100:
        return f"{value:,.1f} s"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} us"


def duration(value: float) -> str:
    days = value / 86_400
    return f"{days:,.1f} days" if days >= 1 else f"{value / 3600:,.1f} hours"


def usd(value: float) -> str:
    """'$1.23M': dollars, three significant digits."""
    return "$" + (count(value) if value >= 1e3 else f"{value:,.2f}")


def count(value: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if value >= scale:
            return f"{value / scale:,.2f}{suffix}"
    return f"{value:,.0f}"


def _stage_columns(memory: MemoryReport) -> list[tuple[str, StageMemory]]:
    """First, middle (the largest of the middle stages) and last stage."""
    stages = memory.stages
    if len(stages) == 1:
        return [("all layers", stages[0])]
    columns = [("stage 0 (first)", stages[0])]
    middle = stages[1:-1]
    if middle:
        biggest = max(middle, key=lambda s: s.total_bytes)
        label = (f"stage {biggest.stage}" if len(middle) == 1
                 else f"stages 1-{len(stages) - 2} (max: {biggest.stage})")
        columns.append((label, biggest))
    columns.append((f"stage {stages[-1].stage} (last)", stages[-1]))
    return columns


def memory_table(memory: MemoryReport, *, title: str | None = None) -> Table:
    columns = _stage_columns(memory)
    table = Table(title=title, title_justify="left")
    table.add_column("per GPU", no_wrap=True)
    for label, _ in columns:
        table.add_column(label, justify="right")
    for name, field in MEMORY_ROWS:
        table.add_row(name, *(gib(getattr(stage, field)) for _, stage in columns))
    table.add_section()
    table.add_row("total", *(gib(stage.total_bytes) for _, stage in columns), style="bold")
    table.add_row("layers", *(str(stage.num_layers) for _, stage in columns))
    table.add_row("micro-batches in flight", *(f"{stage.in_flight_micro_batches:.3g}"
                                               for _, stage in columns))
    return table


def default_margin(memory: MemoryReport) -> float:
    """Bytes the default margin keeps free on this report's GPU (`--min-free` unset)."""
    return default_min_free_bytes(memory.capacity_bytes)


def under_margin(memory: MemoryReport) -> bool:
    """It fits, with less free than the default margin (which --min-free set lower)."""
    return memory.fits and memory.headroom_bytes < default_margin(memory)


def fit_line(memory: MemoryReport) -> Text:
    headroom = memory.capacity_bytes - memory.peak_bytes
    margin = default_margin(memory)
    verdict = "fits" if memory.fits else "does NOT fit"
    if under_margin(memory):
        verdict = f"fits, but under the default margin of {gib(margin)} free"
    which = "the default margin" if memory.min_free_bytes == margin else "--min-free"
    kept = (f" keeping {gib(memory.min_free_bytes)} free ({which})"
            if memory.min_free_bytes else "")
    text = Text(f"peak {gib(memory.peak_bytes)} on stage {memory.peak_stage} of "
                f"{gib(memory.capacity_bytes)}{kept}: {verdict}, ")
    over = memory.peak_bytes + memory.min_free_bytes - memory.capacity_bytes
    style = ("yellow" if under_margin(memory) else "green") if memory.fits else "bold red"
    text.append(f"headroom {gib(headroom)}" if memory.fits else f"over by {gib(over)}",
                style=style)
    if memory.host_bytes:
        room = ("" if memory.host_capacity_bytes is None
                else f" of the {gib(memory.host_capacity_bytes)} per GPU its node has")
        text.append(f"\nhost memory (CPU offload): {gib(memory.host_bytes)} per GPU{room}")
    return text


def strategy_label(plan: PlanReport) -> str:
    return strategy_phrase(plan.strategy)


def memory_view(plan: PlanReport, *, heading: str) -> Group:
    # The heading on a line of its own: a table title would wrap at the table's width.
    return Group(Text(heading, style="bold"), memory_table(plan.memory), fit_line(plan.memory))


TIME_ROWS = (
    ("compute (fwd + bwd + recompute)", "compute_s"),
    ("tensor-parallel comm. (exposed)", "tp_comm_s"),
    ("pipeline comm. (exposed)", "pp_comm_s"),
    ("pipeline engine (fitted)", "pipeline_engine_s"),
    ("data-parallel comm. (exposed)", "dp_comm_s"),
    ("expert-parallel comm. (exposed)", "ep_comm_s"),
    ("context-parallel comm. (exposed)", "cp_comm_s"),
    ("MoE host launch wait (eager)", "host_wait_s"),
    ("pipeline bubble", "bubble_s"),
    ("optimizer step", "optimizer_s"),
    ("CPU offload (exposed)", "offload_s"),
    ("gradient buffer zeroing", "grad_zero_s"),
    ("gradient norm + clipping", "grad_norm_s"),
    ("loss all-reduce", "loss_reduce_s"),
    ("host + sync per step (fitted)", "overhead_s"),
)


OPTIONAL_TIME_ROWS = ("ep_comm_s", "cp_comm_s", "host_wait_s", "pipeline_engine_s", "offload_s",
                      "grad_zero_s", "grad_norm_s", "loss_reduce_s")
"""Rows shown only where the plan has them (an MoE model's experts, a split sequence)."""


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def rate(value: float) -> str:
    """Three significant digits with a decimal suffix: 161K, 2.05M."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if value >= scale * ROLLOVER:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


ROLLOVER = 0.9995
"""A value that rounds to 1,000 at three significant digits shows in the next unit (1M, not
1e+03K)."""


def run_label(problem) -> str:
    """'bf16', 'fp8 (tensorwise)', with ', unfused attention' or ', FlashAttention-2' where the
    run's attention kernel is not the fastest fused one, and ', eager' where its memory-bound
    ops run uncompiled (`Problem.eager_elementwise`)."""
    kernel = {AttentionKind.UNFUSED: ", unfused attention",
              AttentionKind.FLASH2: ", FlashAttention-2"}.get(problem.attention, "")
    eager = ", eager (no torch.compile)" if problem.eager_elementwise else ""
    if problem.eager_loss and not problem.eager_elementwise:
        eager = ", eager loss"
    return problem.training.precision_label + kernel + eager


def params_label(model) -> str:
    """'6.74B params', or for a mixture of experts '671B params, 37.6B active'."""
    def count(n: float) -> str:      # parameter counts in decimal units, as papers give them
        for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
            if n >= scale * ROLLOVER:
                return f"{n / scale:.3g}{suffix}"
        return f"{n:,.0f}"

    total = f"{count(model.num_params)} params"
    if model.is_moe:
        return f"{total}, {count(model.num_active_params)} active"
    return total


def compact_strategy(plan: PlanReport) -> tuple[str, str]:
    """('32x4x8 vpp6 mb1', 'sp sel z1'): degrees dp x tp x pp, then options."""
    s = plan.strategy
    degrees = f"{s.dp}x{s.tp}x{s.pp}" + (f" vpp{s.vpp}" if s.vpp > 1 else "")
    if s.cp > 1:
        degrees += f" cp{s.cp}" + {"p2p": "", "all_gather": "/ag", "a2a": "/a2a",
                                   "a2a+p2p": f"/h{s.cp_a2a}"}[s.cp_comm.value]
    if s.ep > 1:
        backend = s.moe_dispatcher.flex_backend if s.moe_dispatcher is not None else None
        degrees += f" ep{s.ep}" + (f"/{backend}" if backend else "")
    if s.etp != (1 if s.ep > 1 else s.tp):     # with ep, experts are whole unless shown
        degrees += f" etp{s.etp}"
    degrees += f" mb{s.micro_batch}"
    recompute = {"none": "", "selective": "sel", "full": "full"}[s.recompute.value]
    if s.recompute_modules is not None:
        recompute += ":" + "".join(MODULE_ABBREVIATIONS[m] for m in s.recompute_modules)
    options = [o for o in ("sp" if s.sequence_parallel else "", recompute,
                           f"z{int(s.zero_stage)}" if s.zero_stage else "") if o]
    if s.zero_stage and s.dp_shard != s.dp:
        options.append(f"h{s.dp_shard}")
    if s.dp_comm.value == "parameter_server":
        options.append("ps")
    if len(set(s.layers_per_stage)) > 1:
        options.append("bal")
    if s.optimizer_offload:
        options.append("oo" if s.optimizer_offload == 1 else f"oo{s.optimizer_offload:.0%}")
    if s.param_offload:
        options.append("op")
    if s.activation_offload_layers:
        options.append(f"oa{s.activation_offload_layers}")
    if s.rank_order is RankOrder.TP_CP_EP_PP_DP:
        options.append("tpd")
    if not s.nvls:
        options.append("nonvls")
    if s.pipeline_schedule is not PipelineSchedule.ONE_F_ONE_B:
        options.append(SCHEDULE_ABBREVIATIONS[s.pipeline_schedule])
    return degrees, " ".join(options) or "-"


SCHEDULE_ABBREVIATIONS = {PipelineSchedule.ZERO_BUBBLE: "zb", PipelineSchedule.ZBV: "zbv",
                          PipelineSchedule.DUALPIPEV: "dpv"}
"""The plans table's tag of each zero-bubble pipeline schedule (`SCHEDULES_LEGEND`)."""
SCHEDULES_LEGEND = ("; zb/zbv/dpv pipeline schedule InterleavedZeroBubble, ZBVZeroBubble, "
                    "DualPipeV")


MODULE_ABBREVIATIONS = {RecomputeModule.CORE_ATTN: "a", RecomputeModule.LAYERNORM: "n",
                        RecomputeModule.MLA_UP_PROJ: "u", RecomputeModule.MLP: "m",
                        RecomputeModule.MOE: "e", RecomputeModule.MOE_ACT: "x",
                        RecomputeModule.SHARED_EXPERTS: "s"}
"""One letter per recompute module, for the plans table (`MODULES_LEGEND`)."""
MODULES_LEGEND = ("; sel:... recompute modules: a core_attn, n layernorm, u mla_up_proj, m mlp, "
                  "e moe, x moe_act, s shared_experts")

PLANS_LEGEND = ("strategy: dp x tp x pp, interleaved chunks (vpp), context parallel (cp: ring; "
                "/ag all-gather, /a2a all-to-all, /hN all-to-all over N and ring), expert "
                "parallel (ep; experts whole unless etp; /deepep, /hybridep: the flex token "
                "dispatcher with that backend), micro-batch (mb); options: "
                "sp sequence parallel, sel/full recompute, zN ZeRO stage, hN ZeRO sharded over N "
                "ranks and replicated (HSDP), ps parameter server, "
                "bal balanced uneven layout, oo/op/oaN optimizer, parameters, N layers' "
                "activations offloaded to host memory, tpd rank order tp-pp-dp, nonvls NCCL "
                "NVLS off; "
                "peak and free memory per GPU in GiB")


def low_free_warning(plans: list[PlanReport]) -> Text | None:
    """One line naming the plans with less free than the default margin (marked !): the
    predicted peak leaves no room for what the model leaves out (allocator spikes, NCCL
    buffers that grow with the job), which real runs at this margin rarely survive."""
    tight = [str(rank) for rank, p in enumerate(plans, start=1) if under_margin(p.memory)]
    if not tight:
        return None
    which = f"plan {tight[0]} leaves" if len(tight) == 1 else \
        f"plans {', '.join(tight)} leave"
    margin = default_margin(plans[0].memory) / GiB
    return Text(f"warning: {which} under the default margin of {margin:.1f} GiB free per GPU "
                f"(marked !): they may run out of memory", style="yellow")


def plans_table(plans: list[PlanReport]) -> Table:
    """One row per plan, narrow enough for 80 columns (the heading is printed above it)."""
    legend = PLANS_LEGEND
    if any(p.strategy.recompute_modules is not None for p in plans):
        legend = legend.replace("; peak and free", MODULES_LEGEND + "; peak and free")
    if any(p.strategy.pipeline_schedule in SCHEDULE_ABBREVIATIONS for p in plans):
        legend = legend.replace("; peak and free", SCHEDULES_LEGEND + "; peak and free")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0),
                  pad_edge=False, caption=legend, caption_justify="left")
    for name in ("#", "strategy", "options", "peak", "free", "step", "tok/s", "MFU",
                 "bound by"):
        table.add_column(name, justify="left" if name in ("strategy", "options", "bound by")
                         else "right", no_wrap=name not in ("options", "bound by"))
    ties = sum(bool(p.tied_with_best) for p in plans) > 1
    for rank, plan in enumerate(plans, start=1):
        m, t = plan.memory, plan.time
        degrees, options = compact_strategy(plan)
        free = f"{m.headroom_bytes / GiB:.1f}" + ("!" if under_margin(m) else "")
        table.add_row(str(rank), degrees, options, f"{m.peak_bytes / GiB:.1f}", free,
                      (TIED_MARK if ties and plan.tied_with_best else "") + seconds(t.step_s),
                      rate(plan.throughput.tokens_per_s), percent(plan.throughput.mfu),
                      plan.dominant_cost.replace("_", " "))
    return table


TIED_MARK = "\u2248"
"""Marks the step of plans tied with the fastest (`PlanReport.tied_with_best`)."""


def ties_line(plans: list[PlanReport], search: SearchReport) -> Text | None:
    """The footer that explains the tied mark, when two plans or more are tied."""
    tied = [str(rank) for rank, p in enumerate(plans, start=1) if p.tied_with_best]
    if len(tied) < 2:
        return None
    fastest = min(range(len(plans)), key=lambda r: plans[r].time.step_s) + 1
    return Text(f"{TIED_MARK} tied: plans {', '.join(tied)} are within "
                f"{percent(search.tie_tolerance)} of plan {fastest}'s step (the fastest found), "
                f"the model's median error on the gap between two strategies of one published "
                f"job, so their order is not to be trusted; they are listed conventional first "
                f"(fewer exotic features and parallel axes, the default memory margin kept), "
                f"then fastest first", style="dim")


def band_line(time: TimeReport) -> Text | None:
    """Where the measured step likely lands (`TimeReport.step_s_band`)."""
    if time.step_s_band is None:
        return None
    low, high = time.step_s_band
    return Text(f"step {seconds(time.step_s)}, likely {seconds(low)} to {seconds(high)}: the "
                f"model's error on held-out published runs of this kind (10th to 90th "
                f"percentile)", style="dim")


def dp_comm_table(by_comm: dict) -> Group:
    """--dp-comm both: the best plan of each data-parallel exchange, side by side."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for name in ("exchange", "best plan", "options", "peak", "step", "dp comm", "tok/s"):
        table.add_column(name, justify="left" if name in ("exchange", "best plan", "options")
                         else "right", no_wrap=True)
    steps = {c: p.time.step_s for c, p in by_comm.items() if not isinstance(p, str)}
    fastest = min(steps.values(), default=None)
    missing = []
    for comm, plan in by_comm.items():
        label = comm.replace("_", " ")
        if isinstance(plan, str):
            missing.append(Text(f"{label}: no plan: {plan}", style="dim"))
            continue
        degrees, options = compact_strategy(plan)
        step = seconds(plan.time.step_s) + (f" ({plan.time.step_s / fastest:.2f}x)"
                                            if plan.time.step_s > fastest else "")
        table.add_row(label, degrees, options, f"{plan.memory.peak_bytes / GiB:.1f}", step,
                      seconds(plan.time.dp_comm_s), rate(plan.throughput.tokens_per_s))
    return Group(Text(""), Text("--dp-comm both: the best plan of each data-parallel exchange",
                                style="bold"), table, *missing)


def sweep_view(heading: str, rows) -> Group:
    """`planner sweep`: one row per GPU count, 80 columns wide."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    costs = any(r.plan is not None and r.plan.throughput.cost_usd is not None for r in rows)
    trains = any(r.plan is not None and r.plan.throughput.time_to_train_s is not None
                 for r in rows)
    columns = ["GPUs", "best plan", "step", "tok/s", "MFU", "scale"]
    columns += ["train", "GPU-h"] if trains else []
    columns += ["cost"] if costs else []
    for name in columns:     # the plan wraps, the numbers never do
        table.add_column(name, justify="left" if name == "best plan" else "right",
                         no_wrap=name != "best plan")
    missing = []
    for r in rows:
        if r.plan is None:
            table.add_row(str(r.gpus), "none fits", *[""] * (len(columns) - 2))
            missing.append(Text(f"{r.gpus} GPUs: {r.error.splitlines()[0]}", style="dim"))
            continue
        t = r.plan.throughput
        degrees, _ = compact_strategy(r.plan)
        cells = [str(r.gpus), degrees, seconds(r.plan.time.step_s), rate(t.tokens_per_s),
                 percent(t.mfu), percent(r.scaling_efficiency)]
        if trains:
            cells += [duration(t.time_to_train_s), count(t.gpu_hours)]
        if costs:
            cells.append(usd(t.cost_usd))
        table.add_row(*cells)
    legend = Text("scale: tokens/s per GPU over that of the smallest count with a plan "
                  "(strong scaling, batch fixed); best plan: dp x tp x pp; train: time to "
                  "train --tokens, GPU-h its GPU-hours", style="dim")
    return Group(Text(heading, style="bold"), table, legend, *missing)


def time_table(time: TimeReport, *, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("per step")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    for name, field in TIME_ROWS:
        value = getattr(time, field)
        if field in OPTIONAL_TIME_ROWS and value == 0:
            continue
        table.add_row(name, seconds(value), percent(value / time.step_s))
    table.add_section()
    table.add_row("step", seconds(time.step_s), "100.0%", style="bold")
    return table


def throughput_line(plan: PlanReport) -> Text:
    t = plan.throughput
    text = Text(f"{rate(t.tokens_per_s)} tokens/s, {t.model_tflops_per_gpu:.1f} model TFLOP/s "
                f"per GPU by Megatron-LM's formula ({t.hardware_tflops_per_gpu:.1f} with "
                f"recomputation), MFU {percent(t.mfu)} (causal attention as run); slowest "
                f"stage {plan.time.slowest_stage}, imbalance {plan.time.imbalance:.2f}")
    if t.time_to_train_s is not None and t.gpu_hours is not None:
        cost = "" if t.cost_usd is None else f", {usd(t.cost_usd)}"
        text.append(f"\ntime to train: {duration(t.time_to_train_s)}, "
                    f"{count(t.gpu_hours)} GPU-hours{cost}", style="bold")
    return text


def search_line(search: SearchReport) -> Text:
    verdict = "optimal" if search.proven_optimal else "best found, not proven optimal"
    took = "" if search.seconds is None else f", {seconds(search.seconds)}"
    text = Text(f"CP-SAT: {verdict}{took}: "
                f"{search.num_candidates:,} candidates, {search.num_valid:,} pass the rules and "
                f"pins, {search.num_evaluated:,} priced (the rest cannot reach the plans), "
                f"{search.num_in_model:,} in the model", style="dim")
    if search.unproven:
        text.append(f"\nnot proven optimal: {search.unproven}", style="dim")
    if search.num_layouts_balanced:
        text.append(f"\nstage layouts: {search.num_layouts_balanced} balanced by CP-SAT, "
                    f"{search.num_layouts_improved} better than the even split", style="dim")
    if search.heuristic_step_s is not None:
        text.append(f"\nrule of thumb (tp up to a node, then the fewest stages that fit): "
                    f"{search.heuristic_strategy} at {seconds(search.heuristic_step_s)} per "
                    f"step", style="dim")
    return text


STAGES_SHOWN = 16
"""Pipelines longer than this show their first and last stages, and the slowest and fullest."""


def stages_table(plan: PlanReport, *, title: str) -> Table:
    """One row per pipeline stage: layers, time per micro-batch, peak memory."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0),
                  pad_edge=False)
    for name in ("stage", "layers", "time / micro-batch", "vs mean", "memory", "in flight"):
        table.add_column(name, justify="right")
    times = [st.total_s for st in plan.time.stages]
    mean = sum(times) / len(times)
    p = len(times)
    shown = set(range(p)) if p <= STAGES_SHOWN else (
        set(range(4)) | set(range(p - 4, p))
        | {plan.time.slowest_stage, plan.memory.peak_stage})
    previous = -1
    for r in sorted(shown):
        if r != previous + 1:
            table.add_row("...", "", "", "", "", "")
        memory, marks = plan.memory.stages[r], []
        if r == plan.time.slowest_stage:
            marks.append("slowest")
        if r == plan.memory.peak_stage:
            marks.append("fullest")
        label = f"{r}" + (f" ({', '.join(marks)})" if marks else "")
        table.add_row(label, str(memory.num_layers), seconds(times[r]),
                      f"{times[r] / mean:.2f}x", gib(memory.total_bytes),
                      f"{memory.in_flight_micro_batches:.3g}")
        previous = r
    return table


def layout_line(plan: PlanReport) -> Text:
    counts = plan.strategy.layers_per_stage
    kind = "even" if len(set(counts)) == 1 else "balanced"
    shown = ", ".join(str(c) for c in counts) if len(counts) <= 32 else \
        ", ".join(str(c) for c in counts[:16]) + ", ..."
    return Text(f"{kind} layout, layers per chunk in pipeline order: [{shown}]; imbalance "
                f"(slowest / mean stage) {plan.time.imbalance:.3f}", style="dim")


def plan_view(*, heading: str, plans: list[PlanReport], search: SearchReport) -> Group:
    best = plans[0]
    parts = [
        Text(heading, style="bold"),     # a line of its own: a table title wraps at its width
        *([Text(f"note: {search.note}", style="bold")] if search.note else []),
        plans_table(plans),
        *([warning] if (warning := low_free_warning(plans)) else []),
        *([tied] if (tied := ties_line(plans, search)) else []),
        Text(""),
        # The strategy on a line of its own: a table title wraps at the table's width.
        Text(f"best plan, memory per GPU: {strategy_label(best)}", style="italic"),
        memory_table(best.memory),
        fit_line(best.memory),
        Text(""),
        time_table(best.time, title="best plan, time per step"),
        *([band] if (band := band_line(best.time)) else []),
        throughput_line(best),
    ]
    if best.strategy.pp > 1:
        parts += [Text(""), stages_table(best, title="best plan, pipeline stages"),
                  layout_line(best)]
    return Group(*parts, Text(""), search_line(search))


def violations_text(violations) -> Text:
    if not violations:
        return Text("no rule is broken", style="green")
    noun = "problem" if len(violations) == 1 else "problems"
    text = Text(f"{len(violations)} {noun}:", style="bold red")
    for v in violations:
        text.append(f"\n  - {v.rule}: ", style="bold")
        text.append(f"{v.message}; fix: {v.fix}")
    return text


def comparison_text(review) -> Text:
    if review.report is None:
        return Text("")
    step = review.report.time.step_s
    if review.best is None and review.best_note is None:
        return Text(f"your strategy: {seconds(step)} per step (not compared with a search: "
                    f"--no-compare)", style="dim")
    if review.best is None:
        return Text(f"your strategy: {seconds(step)} per step; no plan to compare with: "
                    f"{review.best_note}", style="dim")
    best = review.best.time.step_s
    if best >= step * (1 - 1e-9):
        return Text(f"your strategy: {seconds(step)} per step; the search finds nothing "
                    f"faster", style="green")
    return Text(f"your strategy: {seconds(step)} per step; best found: {seconds(best)}, "
                f"{step / best:.2f}x faster: {strategy_phrase(review.best.strategy)}", style="bold")


def review_view(review) -> Group:
    p = review.problem
    what = f" ({review.target.value})" if review.target else ""
    heading = (f"{review.file}{what}: {p.model.name} ({params_label(p.model)}) on "
               f"{p.num_gpus} x {p.cluster.gpu.name}, "
               f"global batch {review.strategy.global_batch} x {p.training.seq_len} tokens, "
               f"{run_label(p)}: {strategy_phrase(review.strategy)}")
    parts = [Text(heading, style="bold"), violations_text(review.violations)]
    parts += [Text(f"note: {note}", style="dim") for note in review.notes]
    parts.append(Text(""))
    if review.report is not None:
        parts += [memory_table(review.report.memory, title="memory per GPU"),
                  fit_line(review.report.memory), Text(""),
                  time_table(review.report.time, title="time per step"),
                  *([band] if (band := band_line(review.report.time)) else []),
                  throughput_line(review.report)]
        if review.strategy.pp > 1:
            parts += [Text(""), stages_table(review.report, title="pipeline stages"),
                      layout_line(review.report)]
        if review.advice:
            parts.append(Text(f"layout: {review.advice}", style="bold"))
        parts += [Text(""), comparison_text(review)]
    else:
        parts.append(Text("not evaluated: the layout does not match the model", style="dim"))
    return Group(*parts)


def print_renderable(renderable, *, stderr: bool = False) -> None:
    """Print on stdout (or stderr): at the terminal's width on a terminal or where COLUMNS
    says; into a pipe or a file, at least as wide as every table's natural width, so that
    `planner plan ... | tee plan.txt` keeps every column whole and every row on its line
    (text still wraps, at 80 columns or the widest table)."""
    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, width=max(PIPE_WIDTH, natural_width(renderable)))
    console.print(renderable)


PIPE_WIDTH = 80
"""Columns that text wraps at outside a terminal (without COLUMNS), rich's own default."""


def natural_width(renderable) -> int:
    """The widest table's width with no cell wrapped or cut (0 without a table), in columns;
    groups are searched through."""
    if isinstance(renderable, Group):
        return max((natural_width(r) for r in renderable.renderables), default=0)
    if not isinstance(renderable, Table):
        return 0
    console = Console(width=_UNBOUNDED)
    return Measurement.get(console, console.options, renderable).maximum


_UNBOUNDED = 100_000
"""A width no table reaches: measuring at it gives each column its widest cell."""


# --------------------------------------------------------------------------- planner diff
