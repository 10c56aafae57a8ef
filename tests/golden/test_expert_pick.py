"""The pick against layouts experts tuned (issue 24): a guard on the bench, not the bench.

`bench/bench_expert.py` prices 44 published expert layouts against the planner's own best; these
are layouts it already gets right: each stays within the ranking tolerance of the planner's
best, and all but three among its top 5 (`costing.uncertainty.ranking_tolerance`), so a change that makes the
planner prefer its own plan by more than the model's measured ranking error fails here and must
find the term that does it. Each runs one search (a few seconds).
"""

import pytest

from bench.bench_expert import load_experts, run_one
from planner.costing.uncertainty import ranking_tolerance
from planner.search.solver import SolverSettings

# (run in bench/data/expert_configs.yaml, what it is)
ON_TARGET = [
    ("gpt3-175b-h100-512-fp8", "NeMo 24.07 GPT-3 175B recipe, 512 H100, FP8"),
    ("llama2-70b-h100-64-fp8", "NeMo 24.07 Llama 2 70B recipe, tp4 pp4 vpp20"),
    ("llama31-405b-h100-1024-fp8cs-2509", "Megatron-Bridge 405B, tp8 pp8 cp2 vpp8, 1024 H100"),
    ("mcore-gpt-314b-h100-3072", "Megatron-LM README 314B, tp8 pp8, 3072 H100"),
    # Tied but not in the top 5: its vpp 10 interleaving was priced +24% slower than the best
    # while the interleaved schedule's pipeline transfers were counted as exposed.
    ("llama2-13b-h100-16-fp8", "NeMo 24.07 Llama 2 13B recipe, tp1 pp4 vpp10, 16 H100"),
    # Tied, not in the top 5: priced with the balanced stage layout Megatron-Bridge later pinned
    # for it (expert_configs.yaml `later_layout`); with the even split it ran, +12.7%.
    ("llama3-70b-h100-64-fp8-260401", "Megatron-Bridge Llama 3 70B, tp4 pp8 vpp5, 64 H100"),
    # Tied, not in the top 5: NVIDIA's canonical BF16 HybridEP recipe with the EP overlap.
    ("qwen3-30b-a3b-h100-16-bf16-canonical", "Megatron-Bridge Qwen3-30B-A3B, EP 16, 16 H100"),
]
TIED_NOT_TOP_5 = {"llama2-13b-h100-16-fp8", "llama3-70b-h100-64-fp8-260401",
                  "qwen3-30b-a3b-h100-16-bf16-canonical"}


@pytest.mark.parametrize(("run", "what"), ON_TARGET)
def test_expert_layout_stays_in_the_top_5_and_within_the_tie_band(tmp_path, run, what):
    (expert,) = load_experts(tmp_path, only={run})
    outcome = run_one(expert, SolverSettings.layout_work)
    assert outcome.gain <= ranking_tolerance(expert.problem), (what, outcome.gain)
    if run not in TIED_NOT_TOP_5:
        assert (outcome.rank(exact=False) or 99) <= 5, what
