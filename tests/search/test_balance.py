"""Stage layouts: CP-SAT against the exact dynamic programme and brute force, the linear
costs against costing.evaluate, published layouts, and the gain over the even split."""

from __future__ import annotations

import itertools
import random

import pytest

from planner.search.balance import ChainCosts, balance, exact_partition, stage_totals
from planner.search.candidates import SearchSpace
from planner.core.candidates import Candidates
from planner.costing.evaluate import block_costs, evaluate
from planner.costing.layout import uniform_layout
from planner.inputs.loader import make_problem
from planner.search.rebalance import layout_advice
from planner.schemas.strategy import Strategy
from planner.search.solver import SolverSettings, search
from planner.search.stack_layout import extra_layer_order
from planner.costing.stage_costs import chain_costs
from planner.rules.validate import validate
from tests.conftest import TINY_MOE_DENSE, TINY_MOE_EXPERTS, compositions

US, KIB = 1e-6, 1024.0


def _chain(times_us, states_kib, acts_kib, *, pp, vpp=1, layers=None, capacity_kib=None,
           stage_us=None, stage_kib=None) -> ChainCosts:
    """Costs in whole microseconds and KiB, so CP-SAT's integers lose nothing."""
    n = len(times_us)
    in_flight = tuple(tuple(max(1, pp - r) + (vpp - 1 - c) for c in range(vpp))
                      for r in range(pp))
    return ChainCosts(
        pp=pp, vpp=vpp, block_time_s=tuple(t * US for t in times_us),
        block_state_bytes=tuple(s * KIB for s in states_kib),
        block_activation_bytes=tuple(a * KIB for a in acts_kib),
        is_layer=tuple(layers if layers is not None else [True] * n),
        stage_time_s=tuple(t * US for t in (stage_us or [0] * pp)),
        stage_bytes=tuple(b * KIB for b in (stage_kib or [0] * pp)),
        in_flight=in_flight,
        capacity_bytes=(capacity_kib if capacity_kib is not None else 10**12) * KIB)


def _profile(name: str, rng: random.Random):
    """(times, states, activations, is_layer) of chains whose blocks differ in cost."""
    if name == "transformer":          # a cheap embedding, 30 layers, norm, a costly head
        times = [20] + [100] * 30 + [5, 260]
        states = [400] + [120] * 30 + [1, 400]
        acts = [10] + [30] * 30 + [5, 90]
        layers = [False] + [True] * 30 + [False, False]
    elif name == "encoder-decoder":    # 12 encoder layers, then 12 heavier decoder layers
        times = [20] + [80] * 12 + [130] * 12 + [200]
        states = [300] + [100] * 12 + [140] * 12 + [300]
        acts = [5] + [20] * 12 + [35] * 12 + [60]
        layers = [False] + [True] * 24 + [False]
    elif name == "moe-every-other":    # dense and mixture-of-experts layers alternate
        times = [100 if i % 2 else 170 for i in range(28)]
        states = [100 if i % 2 else 600 for i in range(28)]
        acts = [20 if i % 2 else 45 for i in range(28)]
        layers = [True] * 28
    elif name == "evoformer-structure":  # 24 Evoformer blocks and a structure module
        times = [150] * 24 + [700]
        states = [80] * 24 + [300]
        acts = [90] * 24 + [200]
        layers = [True] * 25
    else:                               # unlike blocks
        times = [rng.randint(50, 200) for _ in range(26)]
        states = [rng.randint(10, 400) for _ in range(26)]
        acts = [rng.randint(5, 60) for _ in range(26)]
        layers = [True] * 26
    return times, states, acts, layers


PROFILES = ("transformer", "encoder-decoder", "moe-every-other", "evoformer-structure",
            "random")


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("pp", [2, 3, 5])
@pytest.mark.parametrize("tight", [False, True], ids=["free", "memory-bound"])
def test_cp_sat_layout_equals_the_linear_partition_dp(profile, pp, tight):
    times, states, acts, layers = _profile(profile, random.Random(pp))
    free = _chain(times, states, acts, pp=pp, layers=layers)
    capacity = None
    if tight:
        # 15% above the memory a perfectly even split would need on the fullest stage.
        _, memory = stage_totals(free, exact_partition(free)[1])
        capacity = int(sum(memory) / pp / KIB * 1.15)
    costs = _chain(times, states, acts, pp=pp, layers=layers, capacity_kib=capacity)
    expected = exact_partition(costs)
    got = balance(costs)
    if expected is None:
        assert got is None
        return
    assert got is not None and got.status == "OPTIMAL"
    assert got.max_stage_time_s == pytest.approx(expected[0], abs=1e-12)
    _, memory = stage_totals(costs, got.bounds)
    assert max(memory) <= costs.capacity_bytes


@pytest.mark.parametrize("profile", ["transformer", "random"])
@pytest.mark.parametrize(("pp", "vpp"), [(2, 2), (3, 2), (2, 3)])
def test_interleaved_layouts_equal_brute_force(profile, pp, vpp):
    # With several chunks per stage the DP does not apply: try every split whose chunks hold a
    # layer each and, on each stage, within one layer of each other, the extra layers on the
    # chunks with the fewest micro-batches in flight (balance.solve_layout).
    times, states, acts, layers = _profile(profile, random.Random(7))
    times, states, acts, layers = times[:14], states[:14], acts[:14], layers[:14]
    layers[-1] = True                                      # the chain must end in a layer
    costs = _chain(times, states, acts, pp=pp, vpp=vpp, layers=layers,
                   capacity_kib=sum(states) // pp + 4 * sum(acts) // pp)
    n, best = len(times), None
    for sizes in compositions(n, pp * vpp):
        bounds = (0, *itertools.accumulate(sizes))
        counts = [sum(layers[bounds[k]:bounds[k + 1]]) for k in range(pp * vpp)]
        if min(counts) == 0 or any(max(counts[r::pp]) - min(counts[r::pp]) > 1
                                   for r in range(pp)):
            continue
        orders = [extra_layer_order(costs, r) for r in range(pp)]
        if any(counts[a * pp + r] < counts[b * pp + r]
               for r in range(pp) for a, b in zip(orders[r], orders[r][1:])):
            continue
        t, m = stage_totals(costs, bounds)
        if max(m) <= costs.capacity_bytes and (best is None or max(t) < best):
            best = max(t)
    got = balance(costs)
    if best is None:
        assert got is None
    else:
        assert got is not None and got.max_stage_time_s == pytest.approx(best, abs=1e-12)


def test_equal_blocks_and_negligible_ends_give_the_even_layout():
    times = [0] + [100] * 32 + [0, 0]
    layers = [False] + [True] * 32 + [False, False]
    costs = _chain(times, [10] * 35, [5] * 35, pp=4, layers=layers)
    result = balance(costs)
    sizes = [result.bounds[k + 1] - result.bounds[k] for k in range(4)]
    assert sizes == [9, 8, 8, 10]           # 8 layers each, the ends joining their chunks


def test_memory_moves_layers_off_the_fullest_stage():
    # Under 1F1B stage 0 holds pp micro-batches of activations, the last stage one.
    times = [0] + [100] * 32 + [0, 0]
    layers = [False] + [True] * 32 + [False, False]
    acts = [0] + [50] * 32 + [0, 0]
    free = balance(_chain(times, [10] * 35, acts, pp=4, layers=layers))
    tight = _chain(times, [10] * 35, acts, pp=4, layers=layers, capacity_kib=8 * 10 + 8 * 50 * 3)
    result = balance(tight)
    first = result.bounds[1] - 1                        # layers on stage 0
    assert free.bounds[1] - 1 == 8 and first < 8
    _, memory = stage_totals(tight, result.bounds)
    assert max(memory) <= tight.capacity_bytes


def test_one_thousand_layers_on_64_stages():
    # The speed target lives in bench/bench_balance.py; here, that the answer is right.
    times = [10] + [100] * 1000 + [5, 300]
    layers = [False] + [True] * 1000 + [False, False]
    result = balance(_chain(times, [1] * 1003, [1] * 1003, pp=64, layers=layers))
    assert result.status == "OPTIMAL"
    # 1000 layers and a head worth 3 layers: 16 layers on the slowest of 64 stages.
    assert result.max_stage_time_s == pytest.approx(16 * 100 * US, abs=1e-12)


@pytest.mark.parametrize(("model", "fields"), [
    ("gpt3-175b", dict(dp=16, tp=8, pp=8, vpp=3, micro_batch=1, sequence_parallel=True,
                       recompute="selective", zero_stage=1)),
    ("llama3-8b", dict(dp=8, tp=1, pp=4, vpp=2, micro_batch=2, recompute="full")),
    ("llama3-70b", dict(dp=2, tp=4, pp=8, micro_batch=1, sequence_parallel=True,
                        zero_stage=3)),
])
def test_linear_costs_reproduce_costing_evaluate(model, fields):
    strategy = Strategy(global_batch=512, **fields)
    problem = make_problem(model, "dgx-h100", gpus=strategy.dp * strategy.tp * strategy.pp,
                           nodes=256)
    cands = Candidates.from_strategy(strategy, problem.framework.defaults)
    layout = uniform_layout(problem.model, strategy.pp, strategy.vpp)
    block = block_costs(problem, cands)
    ev = evaluate(problem, layout, cands, block)
    times, memory = stage_totals(chain_costs(problem, cands, block, layout, 0), layout.bounds)
    tau = (ev.stage_compute_s + ev.stage_tp_s + ev.stage_ep_s + ev.stage_cp_s + ev.stage_host_s
           + ev.stage_pp_s + ev.stage_dp_s + ev.stage_offload_s)
    assert times == pytest.approx(list(tau[0]), rel=1e-12)
    assert memory == pytest.approx(list(ev.stage_total[0]), rel=1e-12)


@pytest.mark.parametrize(("model", "gpus", "fields", "layers"), [
    # Dubey et al. 2024 (Llama 3), Sec. 3.3.2: 126 layers on 16 stages, one layer fewer on
    # the first and the last stage.
    ("llama3-405b", 8192, dict(dp=64, tp=8, pp=16), (7,) + (8,) * 14 + (7,)),
    # BLOOM-176B (BigScience 2022, Sec. 3.4): 70 layers on 12 pipeline stages.
    ("bloom-176b", 384, dict(dp=4, tp=8, pp=12), (5,) + (6,) * 10 + (5,)),
])
def test_published_layouts_evaluate(model, gpus, fields, layers):
    problem = make_problem(model, "dgx-a100-80gb", gpus=gpus, nodes=gpus // 8)
    strategy = Strategy(global_batch=problem.training.global_batch, micro_batch=1,
                        sequence_parallel=True, recompute="full", zero_stage=1,
                        layers_per_stage=layers, **fields)
    check = validate(problem, strategy)
    assert [v.rule for v in check.violations if v.rule != "memory_fits"] == []
    assert [s.num_layers for s in check.report.memory.stages] == list(layers)
    assert len(check.report.time.stages) == fields["pp"]
    assert check.report.time.imbalance >= 1


def test_the_search_beats_the_even_split_where_the_head_is_heavy():
    # Llama 3 8B: a 128,256-word output layer costs about two and a half layers of time, so
    # an even split leaves the last stage the slowest.
    problem = make_problem("llama3-8b", "dgx-h100", gpus=32)
    settings = SolverSettings(top_k=1)
    even = search(problem, SearchSpace(pp=4, even_layouts=True), settings).plans[0]
    result = search(problem, SearchSpace(pp=4), settings)
    balanced = result.plans[0]
    assert balanced.time.step_s < 0.92 * even.time.step_s
    assert len(set(balanced.strategy.layers_per_stage)) > 1
    assert balanced.time.imbalance < even.time.imbalance
    assert result.search.num_layouts_improved >= 1


def test_validate_proposes_moving_layers_off_the_slowest_stage():
    problem = make_problem("llama3-8b", "dgx-h100", gpus=32)
    strategy = Strategy(dp=8, tp=1, pp=4, global_batch=512, recompute="full", zero_stage=1)
    report = validate(problem, strategy).report
    assert layout_advice(problem, strategy, report) == (
        "stage 3 is 1.15x the mean: move 1 layer from stage 3 to stage 2 "
        "(layers_per_stage [8, 8, 9, 7]: 21.95 s -> 20.47 s per step)")
    balanced = strategy.model_copy(update={"layers_per_stage": (8, 8, 9, 7)})
    assert layout_advice(problem, balanced, validate(problem, balanced).report) is None


def test_layout_of_a_plan_is_reported_per_stage(cli):
    import json

    code, out, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "32", "--pp", "4",
                         "--json", "--top", "1")
    assert code == 0, err
    plan = json.loads(out)["plans"][0]
    stages = plan["time"]["stages"]
    assert len(stages) == 4 and len(plan["memory"]["stages"]) == 4
    assert sum(plan["strategy"]["layers_per_stage"]) == 32
    slowest = max(s["total_s"] for s in stages)
    assert plan["time"]["imbalance"] == pytest.approx(
        slowest / (sum(s["total_s"] for s in stages) / 4))


@pytest.mark.parametrize("moe", [True, False])
def test_layout_bounds_hold_for_every_layout_of_an_moe_chain(write, moe):
    """rebalance.lower_bounds against brute force: on a chain of unlike layers (dense-first
    layers, MoE layers, a multi-token-prediction module on the last stage), and on a chain of
    like ones, no layout of any candidate is faster or emptier than its bounds."""
    from planner.search.pool import Batch, Pool
    from planner.search.rebalance import lower_bounds
    import numpy as np

    from planner.costing.layout import layout_from_layer_counts

    model = write("moe.yaml", TINY_MOE_DENSE.format(seq_len=1024)
                  + (TINY_MOE_EXPERTS if moe else ""))
    problem = make_problem(model, "dgx-h100", gpus=16)
    rows = [dict(tp=1, pp=4, vpp=1, dp=4, mb=1, ep=4 if moe else 1, etp=1, zero=1, rc=0),
            dict(tp=2, pp=2, vpp=2, dp=4, mb=2, ep=8 if moe else 1, etp=1, zero=0, rc=2),
            dict(tp=1, pp=2, vpp=1, dp=8, mb=4, ep=1, etp=1, zero=3, rc=1)]
    for row in rows:
        one = lambda v: [v]  # noqa: E731
        cands = Candidates(
            tp=one(row["tp"]), pp=one(row["pp"]), vpp=one(row["vpp"]), dp=one(row["dp"]),
            mb=one(row["mb"]), global_batch=one(64), sp=one(row["tp"] > 1),
            recompute=one(row["rc"]), zero=one(row["zero"]), shard=one(row["dp"]),
            overlap=one(True), param_gather=one(True), tp_overlap=one(True), dp_comm=one(0),
            num_servers=one(row["dp"]), ep=one(row["ep"]), etp=one(row["etp"]))
        cands = Candidates(**{k: np.array(v) for k, v in cands.__dict__.items()})
        costs = block_costs(problem, cands)
        pp, vpp = row["pp"], row["vpp"]
        even = uniform_layout(problem.model, pp, vpp)
        pool = Pool.of([Batch(even, cands, costs, evaluate(problem, even, cands, costs))])
        time_bound, memory_bound = lower_bounds(problem, pool)
        best_time = best_memory = float("inf")
        for counts in compositions(problem.model.num_layers, pp * vpp):
            layout = layout_from_layer_counts(problem.model, pp, vpp, counts)
            ev = evaluate(problem, layout, cands, costs)
            tau = (ev.stage_compute_s + ev.stage_tp_s + ev.stage_ep_s + ev.stage_host_s
                   + ev.stage_pp_s + ev.stage_dp_s)[0]
            pipeline = ev.bubble_s[0] + cands.num_micro_batches[0] * tau.max() + ev.overhead_s
            best_time = min(best_time, float(pipeline))
            best_memory = min(best_memory, float(ev.peak_bytes[0]))
        assert memory_bound[0] <= best_memory * (1 + 1e-9), row
        assert time_bound[0] <= best_time * (1 + 1e-9) + 1e-9, row


def test_water_level_is_the_least_level_that_holds_the_amount():
    # sum_r max(0, (M - base_r) / rate_r) = amount at M, less just below (or M is the top base).
    import numpy as np

    from planner.search.rebalance import water_level

    rng = np.random.default_rng(0)
    for _ in range(200):
        p = int(rng.integers(1, 9))
        base, rate = rng.uniform(0, 10, (5, p)), rng.uniform(0.1, 3, (5, p))
        amount = float(rng.uniform(0, 20))
        level = water_level(base, rate, amount)
        top = base.max(1)
        for below in (False, True):
            m = level - (1e-7 if below else 0.0)
            filled = np.maximum(0.0, (m[:, None] - base) / rate).sum(1)
            if below:
                assert np.all((filled < amount) | (level <= top))
            else:
                assert np.all((filled >= amount - 1e-9) | (level == top))
