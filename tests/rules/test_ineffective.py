"""Settings with no effect where they are set get a note, with its exact text
(planner/rules/ineffective.py): one table, each setting once with and once without
effect."""

from __future__ import annotations

import pytest

from cost_models.enums import CpComm
from planner.costing.evaluate import evaluate_strategy
from planner.rules.ineffective import ineffective_settings
from planner.search.pin_notes import pinned_settings
from planner.inputs.loader import make_problem, resolve_strategy
from planner.schemas.strategy import Strategy
from planner.search.candidates import SearchSpace

NUM_SERVERS = ("num_servers 4 has no effect with dp_comm all_reduce: only a parameter server "
               "has servers")
CP_COMM = ("cp_comm a2a has no effect at cp 1: no context-parallel ranks exchange keys and "
           "values")
CP_A2A = "cp_a2a 2 has no effect with cp_comm p2p: only a2a+p2p runs an inner all-to-all group"
SP = ("sequence_parallel has no effect at tp 1: it splits activations over the tensor-parallel "
      "ranks (Megatron-LM turns it off, with a warning)")
TP_OVERLAP_TP1 = ("tp_comm_overlap has no effect at tp 1: there are no tensor-parallel "
                  "collectives to overlap")
TP_OVERLAP_NO_SP = ("tp_comm_overlap has no effect without sequence_parallel: what it overlaps "
                    "are sequence parallelism's all-gathers and reduce-scatters")
TP_OVERLAP_DEEPSPEED = ("tp_comm_overlap has no effect on DeepSpeed (ZeRO, pipeline engine): it "
                        "does not overlap tensor-parallel collectives with the GEMMs")
FP8_GATHER = ("fp8_param_gather has no effect in bf16: only FP8 linear weights are gathered in "
              "FP8")
ETP = "etp 2 has no effect on llama3-8b: a dense model has no routed experts to split"
GROUP = ("microbatch_group 4 has no effect at vpp 1: only the interleaved schedule runs its "
         "micro-batches in groups")

CASES = [
    # (strategy fields, problem settings, notes)
    ({}, {}, []),
    ({"num_servers": 4}, {}, [NUM_SERVERS]),
    ({"num_servers": 4, "dp_comm": "parameter_server"}, {}, []),
    ({"cp_comm": "a2a"}, {}, [CP_COMM]),
    ({"cp": 2, "cp_comm": "a2a"}, {}, []),
    ({"cp": 2, "cp_a2a": 2}, {}, [CP_A2A]),
    ({"cp": 4, "cp_comm": "a2a+p2p", "cp_a2a": 2}, {}, []),
    ({"sequence_parallel": True}, {}, [SP]),
    ({"tp": 2, "sequence_parallel": True}, {}, []),
    ({"tp_comm_overlap": True}, {}, [TP_OVERLAP_TP1]),
    ({"tp": 2, "tp_comm_overlap": True}, {}, [TP_OVERLAP_NO_SP]),
    ({"tp": 2, "sequence_parallel": True, "tp_comm_overlap": True}, {}, []),
    ({"tp": 2, "sequence_parallel": True, "tp_comm_overlap": True},
     {"framework": "deepspeed"}, [TP_OVERLAP_DEEPSPEED]),
    ({"tp": 2, "tp_comm_overlap": False}, {}, []),
    ({"fp8_param_gather": True}, {}, [FP8_GATHER]),
    ({"fp8_param_gather": True}, {"precision": "fp8"}, []),
    ({"etp": 2}, {}, [ETP]),
    ({"tp": 2, "etp": 2}, {}, []),                       # etp = tp: the default
    ({"etp": 1, "ep": 8, "tp": 2}, {"model": "mixtral-8x7b"}, []),
    ({"microbatch_group": 4}, {}, [GROUP]),
    ({"pp": 2, "vpp": 2, "microbatch_group": 4}, {}, []),
    ({"sequence_parallel": True, "tp_comm_overlap": True, "etp": 2},
     {}, [SP, TP_OVERLAP_TP1, ETP]),
]


@pytest.mark.parametrize(("fields", "settings", "notes"), CASES)
def test_ineffective_settings(fields, settings, notes):
    settings = {"model": "llama3-8b", **settings}
    problem = make_problem(settings.pop("model"), "dgx-h100", gpus=16, **settings)
    strategy = resolve_strategy(Strategy(micro_batch=1, **fields), problem)
    assert ineffective_settings(problem, strategy) == notes


def test_a_pin_without_effect_on_some_plans_names_them():
    # --tp-comm-overlap, judged on three plans: two without sequence parallelism.
    problem = make_problem("llama3-8b", "dgx-h100", gpus=16)
    plans = [evaluate_strategy(problem, resolve_strategy(Strategy(tp=2, **kw), problem))
             for kw in ({"sequence_parallel": True}, {}, {"zero_stage": 1})]
    space = SearchSpace(tp_comm_overlap=True, etp=2)
    assert pinned_settings(problem, space, plans) == [f"{TP_OVERLAP_NO_SP} (plan 2, plan 3)"]
    assert pinned_settings(problem, space, plans, ["8 GPUs", "16 GPUs", "32 GPUs"]) == \
        [f"{TP_OVERLAP_NO_SP} (16 GPUs, 32 GPUs)"]
    assert pinned_settings(problem, SearchSpace(), plans) == []


def test_pinned_kv_exchanges_are_judged_where_a_plan_has_no_context_parallelism():
    problem = make_problem("llama3-8b", "dgx-h100", gpus=16)
    no_cp, cp2 = (evaluate_strategy(problem, resolve_strategy(Strategy(**kw), problem))
                  for kw in ({}, {"cp": 2, "cp_comm": "a2a"}))
    space = SearchSpace(cp_comm=(CpComm.A2A, CpComm.P2P))
    assert pinned_settings(problem, space, [no_cp]) == [CP_COMM]
    assert pinned_settings(problem, space, [cp2]) == []
