"""Rank order and NVLS as settings of the run: where each group's ranks sit, and NCCL's
NVSwitch reduction on or off (NCCL_NVLS_ENABLE)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cost_models import communication as comm
from cost_models.communication import Group
from cost_models.units import GB, GiB
from planner.core.candidates import Candidates
from planner.core.rules import Rule
from planner.costing.evaluate import evaluate_strategy
from planner.costing.placement import pipeline_placement, strided_placement
from planner.frameworks import LaunchPlan, emit_files
from planner.frameworks.megatron import parse
from planner.inputs import profiles
from planner.inputs.loader import make_problem, load_cluster
from planner.rules.gate import rule_violations
from planner.rules.ineffective import ineffective_settings
from planner.schemas.strategy import LaunchTarget, RankOrder, Strategy

PP_DP = RankOrder.TP_CP_EP_PP_DP


def _members(order: list[str], sizes: dict[str, int], vary: tuple[str, ...]) -> list[int]:
    """Ranks of the group through rank 0 along the `vary` axes, as Megatron-LM's
    RankGenerator numbers them: the first axis of `order` varies fastest."""
    strides, stride = {}, 1
    for axis in order:
        strides[axis], stride = stride, stride * sizes[axis]
    return [sum(c * strides[a] for a, c in zip(vary, coords))
            for coords in itertools.product(*(range(sizes[a]) for a in vary))]


@pytest.mark.parametrize(("order", "tp", "cp", "dp", "pp"), [
    (RankOrder.TP_CP_EP_DP_PP, 2, 1, 4, 2), (PP_DP, 2, 1, 4, 2),
    (RankOrder.TP_CP_EP_DP_PP, 2, 2, 4, 2), (PP_DP, 2, 2, 4, 2),
    (RankOrder.TP_CP_EP_DP_PP, 1, 1, 16, 4), (PP_DP, 1, 1, 16, 4),
    (PP_DP, 4, 1, 8, 4), (PP_DP, 1, 2, 8, 2),
])
def test_placement_counts_the_ranks_megatron_puts_on_each_node(order, tp, cp, dp, pp):
    """The groups' ranks per node and nodes spanned equal a brute-force count over
    Megatron-LM's rank numbering (megatron/core/parallel_state.py RankGenerator), nodes of 8."""
    node = 8
    axes = [a for a in order.value.split("-") if a != "ep"]
    sizes = dict(tp=tp, cp=cp, dp=dp, pp=pp)
    cands = Candidates.from_strategy(
        Strategy(tp=tp, cp=cp, dp=dp, pp=pp, global_batch=dp, rank_order=order),
        profiles.load("megatron").defaults)
    gap = pp if order is PP_DP else 1
    for vary, group in [
            (("cp", "dp"), strided_placement(cands.dp * cands.cp, cands.tp, node,
                                             inner=cands.cp, gap=gap)),
            (("pp",), pipeline_placement(cands, node))]:
        ranks = _members(axes, sizes, vary)
        per_node = np.bincount(np.array(ranks) // node)
        assert int(group.num_nodes[0]) == np.count_nonzero(per_node), (vary, ranks)
        assert int(group.ranks_per_node[0]) == per_node.max(), (vary, ranks)


@pytest.mark.parametrize(("preset", "nvls", "published_gb", "source"), [
    # 8x H100 / H200 NVSwitch gen3: ~480 GB/s all_reduce busbw with NVLS (nccl-tests#212),
    # 367.6 GB/s without (the H200 sweep the dgx-h100 and dgx-h200 presets cite).
    ("dgx-h100", True, 480, "nccl-tests#212"),
    ("dgx-h100", False, 367.6, "dgx-h200 preset sweep, NVLS off"),
    # 8x B300 NVLink 5: 845 GB/s with NVLS, 695 GB/s without (NVIDIA/nccl#2140).
    ("dgx-b300", True, 845, "NVIDIA/nccl#2140"),
    ("dgx-b300", False, 695, "NVIDIA/nccl#2140"),
])
def test_nvls_setting_moves_the_all_reduce_bus_bandwidth(preset, nvls, published_gb, source):
    net = load_cluster(preset).network
    size = 8 * GiB
    group = Group(size=8, ranks_per_node=8, num_nodes=1, nvls=nvls)
    seconds = comm.all_reduce_time_s(size, group, net)
    busbw = comm.bus_bandwidth(comm.Collective.ALL_REDUCE, size, seconds, 8) / GB
    assert busbw == pytest.approx(published_gb, rel=0.05), source


def test_data_parallel_ring_spans_the_nics_its_node_share_allows():
    """A ring over k ranks per node crosses the network on k NICs at once (NCCL builds one
    ring per NIC; NVIDIA/nccl#812: 8 HDR NICs give 192 GB/s on DGX A100, 24 GB/s each):
    gpt-18.4B's data-parallel group at tp 2, pp 4 on 256 A100 has 4 ranks per node under
    Megatron-LM's default order and 1 under tp-cp-ep-pp-dp."""
    net = load_cluster("dgx-a100-80gb").network
    for order, per_node, gb in [(RankOrder.TP_CP_EP_DP_PP, 4, 4 * 24), (PP_DP, 1, 24)]:
        gap = 4 if order is PP_DP else 1
        group = strided_placement(32, 2, 8, gap=gap)
        assert int(group.ranks_per_node) == per_node
        assert comm.ring_bus_bytes_per_s(group, net) / GB == pytest.approx(gb, rel=0.05)


def _plan(strategy: Strategy, framework="megatron", cluster="dgx-h100", gpus=64,
          model="llama3-8b") -> tuple:
    problem = make_problem(model, cluster, gpus=gpus, framework=framework)
    strategy = strategy.model_copy(update={"global_batch": problem.training.global_batch})
    return problem, strategy


def test_megatron_script_writes_and_reads_back_both_settings():
    problem, s = _plan(Strategy(dp=8, tp=2, pp=4, micro_batch=1, sequence_parallel=True,
                                nvls=False, rank_order=PP_DP))
    text = next(iter(emit_files([LaunchTarget.MEGATRON],
                                LaunchPlan(problem, s, evaluate_strategy(problem, s))).values()))
    assert "export NCCL_NVLS_ENABLE=0" in text and "--use-tp-pp-dp-mapping" in text
    parsed = parse(text, file="train.sh", problem=problem, num_gpus=64)
    assert parsed.strategy["nvls"] is False
    assert parsed.strategy["rank_order"] is PP_DP


def test_default_script_sets_neither():
    problem, s = _plan(Strategy(dp=8, tp=2, pp=4, micro_batch=1, sequence_parallel=True))
    text = next(iter(emit_files([LaunchTarget.MEGATRON],
                                LaunchPlan(problem, s, evaluate_strategy(problem, s))).values()))
    assert "NCCL_NVLS_ENABLE" not in text and "--use-tp-pp-dp-mapping" not in text
    parsed = parse(text, file="train.sh", problem=problem, num_gpus=64)
    assert "nvls" not in parsed.strategy and "rank_order" not in parsed.strategy


def test_nvls_off_slows_an_h100_tp8_all_reduce_and_does_nothing_on_a100():
    s = Strategy(dp=8, tp=8, pp=1, micro_batch=1)
    problem, s = _plan(s)
    on = evaluate_strategy(problem, s).time.step_s
    off = evaluate_strategy(problem, s.model_copy(update={"nvls": False})).time.step_s
    assert off > on
    problem, s = _plan(s, cluster="dgx-a100-80gb")
    assert evaluate_strategy(problem, s.model_copy(update={"nvls": False})).time.step_s \
        == evaluate_strategy(problem, s).time.step_s
    assert any("nvls false has no effect" in n
               for n in ineffective_settings(problem, s.model_copy(update={"nvls": False})))


def test_rank_order_rules():
    problem, s = _plan(Strategy(dp=8, tp=2, pp=4, micro_batch=1, rank_order=PP_DP),
                       framework="torchtitan")
    assert Rule.TARGET_RANK_ORDER.value in [v.rule for v in rule_violations(problem, s)]
    problem, s = _plan(Strategy(dp=8, tp=2, pp=4, micro_batch=1, rank_order=PP_DP))
    assert not rule_violations(problem, s)
    # MoE with the pipeline inside dp: Megatron-LM asserts edp == dp.
    problem, s = _plan(Strategy(dp=8, tp=1, pp=8, ep=8, etp=1, micro_batch=1,
                                rank_order=PP_DP), model="mixtral-8x7b")
    assert Rule.RANK_ORDER_EXPERTS.value in [v.rule for v in rule_violations(problem, s)]
