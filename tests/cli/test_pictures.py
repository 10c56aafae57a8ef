"""--timeline and --memory-chart: pictures of a plan, read back as XML and measured."""

import json
import xml.etree.ElementTree as ET

import pytest

from planner.cli import timeline as timeline_module
from planner.cli.memory_chart import memory_chart_svg
from planner.cli.timeline import PLOT_W, timeline_svg
from planner.errors import InputError
from planner.schemas.report import PlanReport

NS = "{http://www.w3.org/2000/svg}"
BUSY = {"forward", "backward", "comm", "forward aggregated", "backward aggregated",
        "steady aggregated"}


def _classed(element, kind: str) -> list:
    return [e for e in element.iter() if e.get("class") == kind]


def _width(element) -> float:
    return float(element.get("width"))


PLAN = ("plan", "llama2-7b", "dgx-h100", "--gpus", "16", "--global-batch", "16", "--pp", "4",
        "--vpp", "1", "--tp", "2", "--micro-batch", "1", "--top", "1")
"""8 micro-batches through 4 stages: every pass wide enough to draw on its own."""


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The plan's JSON and its pictures."""
    from planner.cli import run

    folder = tmp_path_factory.mktemp("pictures")
    timeline, chart, out = folder / "timeline.svg", folder / "memory.svg", folder / "plan.json"
    import contextlib
    import io

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = run([*PLAN, "--json", "--timeline", str(timeline), "--memory-chart", str(chart)])
    assert code == 0
    assert f"wrote {timeline}" in stderr.getvalue() and f"wrote {chart}" in stderr.getvalue()
    plan = PlanReport.model_validate(json.loads(stdout.getvalue())["plans"][0])
    return plan, ET.parse(timeline).getroot(), ET.parse(chart).getroot()


def test_timeline_has_a_row_per_stage_with_its_passes(planned):
    plan, root, _ = planned
    rows = _classed(root, "stage")
    assert [r.get("data-stage") for r in rows] == [str(s) for s in range(plan.strategy.pp)]
    m = int(plan.strategy.num_micro_batches)
    for row in rows:          # every micro-batch's forward and backward, each on its own
        assert len(_classed(row, "forward")) == len(_classed(row, "backward")) == m
        labels = [t.text for t in _classed(row, "pass-label")]
        assert set(labels) <= {str(b) for b in range(m)}
    texts = {t.text for t in root.iter(f"{NS}text")}
    assert {"stage 0", "stage 3", "forward", "backward + recompute", "idle (bubble)",
            "optimizer step"} <= texts


def test_timeline_widths_are_the_plans_times(planned):
    plan, root, _ = planned
    t = plan.time
    scale = PLOT_W / t.step_s                    # the step spans the plot: no cut here
    assert sum(_width(e) for e in _classed(root, "step")) == pytest.approx(PLOT_W)
    m = plan.strategy.num_micro_batches
    pipeline = m * t.stages[t.slowest_stage].total_s + t.bubble_s
    for row in _classed(root, "stage"):
        stage = t.stages[int(row.get("data-stage"))]
        idle = _classed(row, "idle")
        assert len(idle) == 1 and _width(idle[0]) == pytest.approx(pipeline * scale, abs=0.1)
        busy = sum(_width(e) for e in row if e.get("class") in BUSY)
        # Rounded to 0.1 px per pass; the schedule may stretch unequal stages by a little
        # to the closed form's pipeline time (`Timeline.stretch`).
        assert busy == pytest.approx(m * stage.total_s * scale, rel=0.03)
    segments = {e.find(f"{NS}title").text.split(":")[0]: _width(e)
                for e in _classed(root, "segment")}
    assert segments["optimizer step"] == pytest.approx(t.optimizer_s * scale, abs=0.1)
    assert sum(segments.values()) + pipeline * scale == pytest.approx(PLOT_W, abs=0.5)


def test_memory_chart_stacks_each_stage_to_scale(planned):
    plan, _, root = planned
    bars = _classed(root, "bar")
    assert len(bars) == plan.strategy.pp
    parts = []
    for bar, stage in zip(bars, plan.memory.stages):
        assert bar.get("data-stage") == str(stage.stage)
        for part in ("weights", "gradients", "optimizer", "activations", "other"):
            (rect,) = _classed(bar, part)
            parts.append((float(rect.get("height")), getattr(stage, f"{part}_bytes")))
    # One scale for every part of every bar (heights are rounded to 0.1 px).
    height, num_bytes = max(parts)
    for h, b in parts:
        assert h == pytest.approx(b * height / num_bytes, abs=0.1)
    texts = {t.text for t in root.iter(f"{NS}text")}
    assert {"weights", "gradients", "optimizer states", "activations", "GiB per GPU"} <= texts
    assert f"capacity {plan.memory.capacity_bytes / 2**30:.2f} GiB" in texts
    assert len(_classed(root, "capacity")) == 1 and len(_classed(root, "margin")) == 1


def test_pictures_are_the_same_bytes_every_run(cli, tmp_path, tiny_model, small_cluster):
    outputs = []
    for k in range(2):
        paths = tmp_path / f"t{k}.svg", tmp_path / f"m{k}.svg"
        code, _, _ = cli("plan", tiny_model, small_cluster, "--top", "1", "--timeline",
                         str(paths[0]), "--memory-chart", str(paths[1]))
        assert code == 0
        outputs.append([p.read_bytes() for p in paths])
    assert outputs[0] == outputs[1]


def test_validate_draws_the_config(cli, tmp_path, write):
    strategy = write("strategy.yaml", "tp: 2\npp: 4\nvpp: 2\nmicro_batch: 1\n")
    timeline, chart = tmp_path / "t.svg", tmp_path / "m.svg"
    code, _, err = cli("validate", "llama2-7b", "dgx-h100", strategy, "--gpus", "16",
                       "--global-batch", "16", "--no-compare", "--timeline", str(timeline),
                       "--memory-chart", str(chart))
    assert code == 0 and f"wrote {timeline}" in err
    root = ET.parse(timeline).getroot()
    assert len(_classed(root, "stage")) == 4
    assert "strategy.yaml" in root.find(f"{NS}title").text
    # Interleaved: each stage runs both of its chunks' passes for each of the 8 micro-batches.
    for row in _classed(root, "stage"):
        assert len(_classed(row, "forward")) == len(_classed(row, "backward")) == 2 * 8
    assert "lighter shades: later model chunks (of 2)" in _classed(root, "note")[0].text
    assert len(_classed(ET.parse(chart).getroot(), "bar")) == 4


def test_memory_draws_the_strategy(cli, tmp_path, write):
    # `planner memory` takes the same two options as plan and validate.
    strategy = write("strategy.yaml", "tp: 2\npp: 4\nvpp: 1\nmicro_batch: 1\n")
    timeline, chart = tmp_path / "t.svg", tmp_path / "m.svg"
    code, out, err = cli("memory", "llama2-7b", "dgx-h100", strategy, "--gpus", "16",
                         "--global-batch", "16", "--timeline", str(timeline),
                         "--memory-chart", str(chart))
    assert code == 0 and f"wrote {timeline}" in err and f"wrote {chart}" in err
    assert len(_classed(ET.parse(chart).getroot(), "bar")) == 4
    assert len(_classed(ET.parse(timeline).getroot(), "stage")) == 4
    assert "strategy.yaml" in ET.parse(chart).getroot().find(f"{NS}title").text


@pytest.mark.parametrize("flag", ["--timeline", "--memory-chart"])
def test_empty_picture_path_is_bad_input(cli, tiny_model, small_cluster, flag):
    code, _, err = cli("plan", tiny_model, small_cluster, flag, "")
    assert code == 2 and err.strip() == f"Error: {flag}: empty path"


def _long_pipeline(plan: PlanReport, *, pp: int, num_micro_batches: int) -> PlanReport:
    """`plan` with `pp` copies of its first stage and `num_micro_batches` micro-batches: the
    step's terms scaled to match (each per-micro-batch term m times, the bubble of 1F1B on
    equal stages, the step end as it was)."""
    stage = plan.time.stages[0]
    m, old_m = num_micro_batches, plan.strategy.num_micro_batches
    slowest = plan.time.stages[plan.time.slowest_stage]
    stages = [stage.model_copy(update={"stage": r}) for r in range(pp)]
    memory = [plan.memory.stages[0].model_copy(update={"stage": r}) for r in range(pp)]
    terms = {name: m * getattr(stage, name) for name in
             ("compute_s", "tp_comm_s", "pp_comm_s", "ep_comm_s", "cp_comm_s")}
    for name in ("dp_comm_s", "offload_s"):        # per micro-batch, plus the step end's
        end = getattr(plan.time, name) - old_m * getattr(slowest, name)
        terms[name] = m * getattr(stage, name) + end
    return plan.model_copy(update={
        "strategy": plan.strategy.model_copy(update={
            "pp": pp, "vpp": 1, "num_micro_batches": float(m)}),
        "time": plan.time.model_copy(update={
            "stages": stages, "slowest_stage": 0, "bubble_s": (pp - 1) * stage.total_s,
            **terms}),
        "memory": plan.memory.model_copy(update={"stages": memory})})


def test_long_pipeline_stays_bounded_and_readable(planned):
    plan = _long_pipeline(planned[0], pp=64, num_micro_batches=512)
    text = timeline_svg(plan, heading="pp 64, 512 micro-batches")
    assert len(text) < 400_000
    root = ET.fromstring(text)
    rows = _classed(root, "stage")
    assert len(rows) == 64
    drawn = sum(1 for row in rows for e in row if e.get("class") in BUSY)
    assert drawn <= timeline_module.MAX_ITEMS
    # The middle of the steady state is cut out, and the cut says how long it lasts.
    (cut,) = _classed(root, "cut")
    assert _classed(root, "cut-label")[0].text.endswith(" s")
    assert len(_classed(root, "stage-label")) < 64        # thinned to stay legible
    chart = ET.fromstring(memory_chart_svg(plan, heading="pp 64"))
    assert len(_classed(chart, "bar")) == 64
    assert 2 < len(_classed(chart, "xtick")) < 64


def test_interleaving_needs_micro_batches_in_groups_it_can_run(planned):
    plan = planned[0]
    odd = plan.model_copy(update={"strategy": plan.strategy.model_copy(update={
        "vpp": 2, "num_micro_batches": 3.0})})
    with pytest.raises(InputError, match=r"cannot run 3 micro-batches on pp 4 in groups of 4"):
        timeline_svg(odd, heading="x")
    # Megatron-LM's groups of more than pp (here 6 micro-batches in one group of 6) draw.
    grouped = plan.model_copy(update={"strategy": plan.strategy.model_copy(update={
        "vpp": 2, "num_micro_batches": 6.0, "microbatch_group": 6})})
    assert "<svg" in timeline_svg(grouped, heading="x")
