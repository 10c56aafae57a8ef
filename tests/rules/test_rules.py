"""Every rule, broken on purpose: the exact sentence `validate` prints and its fix.

The same rules drive the search (tests/search/test_search.py); here each one is checked for
the message a user reads.
"""

from __future__ import annotations

import pytest

from planner.costing.evaluate import layout_for
from planner.inputs.loader import make_problem
from planner.rules.gate import Rule, RuleOptions
from planner.schemas.strategy import LaunchTarget as T
from planner.schemas.strategy import Strategy
from planner.rules.validate import validate

CASES = [
    ("gpu_count", "llama2-7b", "dgx-h100", 64, dict(dp=4, tp=8, pp=1), (),
     "dp * tp * pp (4 * 8 * 1 = 32) must equal the number of GPUs (64)", "use dp 8"),
    ("tp_divides_heads", "llama3-70b", "dgx-h100", 128, dict(dp=8, tp=16, pp=1), (),
     "tp (16) must divide num_kv_heads (8): tensor parallelism splits attention by heads",
     "use tp 8 (dp 16)"),
    ("tp_within_node", "llama2-7b", "dgx-h100", 64, dict(dp=4, tp=16, pp=1), (),
     "tp (16) exceeds gpus_per_node (8): tensor parallelism must stay inside a node",
     "use tp 8 and pp 2 (or allow it with --cross-node-tp)"),
    ("pp_divides_layers", "llama3-405b", "dgx-h100", 4096, dict(dp=32, tp=8, pp=16), (),
     "num_layers (126) must be divisible by pp (16) for an even split",
     "use pp 2 (dp 256), or give layers_per_stage"),
    ("stage_layout", "llama2-7b", "dgx-h100", 8,
     dict(dp=2, tp=2, pp=2, layers_per_stage=(10, 20)), (),
     "layers_per_stage sums to 30 but the model has 32 layers",
     "use layers_per_stage [16, 16]"),
    ("batch_divisible", "llama2-7b", "dgx-h100", 64, dict(dp=8, tp=8, pp=1, global_batch=1020),
     (), "global_batch (1020) must be divisible by dp * micro_batch (8 * 1 = 8)",
     "use global_batch 1024 or 1016"),
    ("batch_divisible", "llama2-7b", "dgx-h100", 64, dict(dp=8, tp=8, pp=1, micro_batch=3), (),
     "global_batch (1024) must be divisible by dp * micro_batch (8 * 3 = 24)",
     "use micro_batch 2"),
    ("interleaved_schedule", "llama2-7b", "dgx-h100", 64, dict(dp=8, tp=8, pp=1, vpp=2), (),
     "the interleaved schedule (vpp 2) needs a pipeline, but pp is 1", "use vpp 1"),
    ("interleaved_schedule", "llama2-7b", "dgx-h100", 64,
     dict(dp=8, tp=4, pp=2, vpp=2, global_batch=8), (),
     "with the interleaved schedule (vpp 2) the number of micro-batches (1) must be at least "
     "pp (2)", "use vpp 1, or a micro_batch or global_batch that makes global_batch / "
     "(dp * micro_batch) at least 2"),
    # Megatron-LM's default group is pp: 3 micro-batches on pp 2 need a group of 3.
    ("interleaved_schedule", "llama2-7b", "dgx-h100", 64,
     dict(dp=8, tp=4, pp=2, vpp=2, global_batch=24, microbatch_group=2), (),
     "the interleaved schedule cannot run 3 micro-batches on pp 2 in groups of 2 (a group "
     "holds pp to 3 micro-batches, and the last one all of its group or at least pp)",
     "use microbatch_group 3 (Megatron-LM --microbatch-group-size-per-virtual-pipeline-stage "
     "3), or vpp 1"),
    ("parameter_server_zero", "llama2-7b", "dgx-h100", 64,
     dict(dp=64, dp_comm="parameter_server", zero_stage=1), (),
     "dp_comm parameter_server keeps whole gradients on the servers and cannot be combined "
     "with zero_stage 1", "use zero_stage 0, or dp_comm all_reduce"),
    ("memory_fits", "llama3-70b", "dgx-h100", 64, dict(dp=4, tp=16, pp=1), (),
     "peak memory 130.5 GiB on stage 0 exceeds the 79.6 GiB of a H100-SXM5-80GB",
     "use zero_stage 2 (peak 78.8 GiB)"),
    ("memory_fits", "llama2-70b", "dgx-h100", 8, dict(dp=1, tp=8, pp=1), (),
     "peak memory 183.4 GiB on stage 0 exceeds the 79.6 GiB of a H100-SXM5-80GB",
     "no single change fits: use more GPUs, or run `planner plan` to search"),
    ("target_parameter_server", "llama2-7b", "dgx-h100", 64,
     dict(dp=64, dp_comm="parameter_server"), (T.MEGATRON,),
     "dp_comm parameter_server has no launch target: every framework here exchanges "
     "gradients with collectives", "use dp_comm all_reduce"),
    ("deepspeed_pipeline_zero", "llama2-7b", "dgx-h100", 64,
     dict(dp=8, tp=1, pp=8, zero_stage=2), (T.DEEPSPEED,),
     "zero_stage 2 with pp 8: DeepSpeed refuses it (\"ZeRO-2 and ZeRO-3 are incompatible with "
     "pipeline parallelism\")", "use zero_stage 1, or pp 1 with more data parallelism"),
    ("deepspeed_tp_zero3", "llama2-7b", "dgx-h100", 64, dict(dp=8, tp=8, pp=1, zero_stage=3),
     (T.DEEPSPEED,), "zero_stage 3 with tp 8: DeepSpeed AutoTP supports ZeRO stages 0, 1 and 2",
     "use zero_stage 2, or tp 1"),
    ("target_interleaved", "llama2-7b", "dgx-h100", 64, dict(dp=8, tp=1, pp=8, vpp=2),
     (T.DEEPSPEED,), "vpp 2: DeepSpeed's pipeline engine, the emitted MindSpore config and a "
     "plain torchrun script run one chunk per stage", "use vpp 1, or emit for megatron or "
     "torchtitan"),
    ("deepspeed_selective_recompute", "llama2-7b", "dgx-h100", 64,
     dict(dp=64, recompute="selective"), (T.DEEPSPEED,),
     "recompute selective: DeepSpeed activation checkpointing recomputes whole layers",
     "use recompute full, or none"),
    ("deepspeed_sequence_parallel", "llama2-7b", "dgx-h100", 64,
     dict(dp=8, tp=8, sequence_parallel=True), (T.DEEPSPEED,),
     "sequence_parallel: DeepSpeed AutoTP keeps activations whole on every tensor-parallel "
     "rank", "use sequence_parallel false"),
    ("deepspeed_uneven_layout", "llama2-7b", "dgx-h100", 64,
     dict(dp=16, tp=1, pp=4, layers_per_stage=(9, 7, 7, 9)), (T.DEEPSPEED,),
     "layers_per_stage [9, 7, 7, 9] is not a placement DeepSpeed's pipeline makes: "
     "PipelineModule partitions the layers itself (partition_method 'type:transformer' or "
     "'type:transformer|embedding')",
     "use layers_per_stage [8, 8, 8, 8] or [8, 9, 8, 7], or leave it out"),
    ("torchtitan_zero1", "llama2-7b", "dgx-h100", 64, dict(dp=64, zero_stage=1),
     (T.TORCHTITAN,), "zero_stage 1: torchtitan shards with FSDP2, which shards gradients too",
     "use zero_stage 2 (fsdp_reshard_after_forward never) or 3"),
    ("torchtitan_sequence_parallel", "llama2-7b", "dgx-h100", 64, dict(dp=8, tp=8),
     (T.TORCHTITAN,), "sequence_parallel false with tp 8: torchtitan always shards activations "
     "along the sequence with tensor parallelism", "use sequence_parallel true"),
    ("torchtitan_micro_batches", "llama2-7b", "dgx-h100", 64,
     dict(dp=8, tp=1, pp=8, micro_batch=4, global_batch=128, zero_stage=3), (T.TORCHTITAN,),
     "4 micro-batches per step are fewer than the 8 pipeline stages: PyTorch's pipeline "
     "schedule refuses it", "use micro_batch 2 or fewer stages"),
    ("mindspore_power_of_two", "gpt3-175b", "ascend-910b", 48, dict(dp=8, tp=6, pp=1),
     (T.MINDSPORE,), "tp (6) and pp (1) must be powers of two for MindSpore: it refuses other "
     "shard strategies (\"the value of strategy must be the power of 2\")",
     "use powers of two for tp and pp"),
    ("mindspore_device_num", "llama2-7b", "ascend-910b", 12, dict(dp=12), (T.MINDSPORE,),
     "device_num (12) must be 1, 2, 4 or a multiple of 8 for MindSpore", "use 8 devices"),
    ("mindspore_micro_batches", "llama2-7b", "ascend-910b", 64,
     dict(dp=8, tp=1, pp=8, micro_batch=32, global_batch=512), (T.MINDSPORE,),
     "micro_batch_num (2) must be at least pipeline_stage (8) for MindSpore",
     "use micro_batch 8 or fewer stages"),
    ("target_interleaved", "llama2-7b", "ascend-910b", 64, dict(dp=8, tp=1, pp=8, vpp=2),
     (T.MINDSPORE,), "vpp 2: DeepSpeed's pipeline engine, the emitted MindSpore config and a "
     "plain torchrun script run one chunk per stage", "use vpp 1, or emit for megatron or "
     "torchtitan"),
    ("target_interleaved", "llama2-7b", "dgx-h100", 64, dict(dp=8, tp=1, pp=8, vpp=2),
     (T.TORCHRUN,), "vpp 2: DeepSpeed's pipeline engine, the emitted MindSpore config and a "
     "plain torchrun script run one chunk per stage", "use vpp 1, or emit for megatron or "
     "torchtitan"),
    # DeepEP README: SM90 and later over NVLink; A100 has neither FP8 nor the kernels, AMD's
    # xGMI no NVLink.
    ("moe_flex_hardware", "mixtral-8x7b", "dgx-a100-80gb", 64,
     dict(dp=64, ep=8, etp=1, moe_dispatcher="flex-deepep"), (),
     "moe_dispatcher flex-deepep on A100-SXM4-80GB (nvlink inside a node, infiniband between "
     "nodes): DeepEP and HybridEP run on NVIDIA Hopper or later GPUs over NVLink, with RDMA "
     "(InfiniBand or RoCE) between nodes", "use moe_dispatcher alltoall"),
    ("moe_flex_hardware", "mixtral-8x7b", "amd-mi300x", 64,
     dict(dp=64, ep=8, etp=1, moe_dispatcher="flex-hybridep"), (),
     "moe_dispatcher flex-hybridep on MI300X (xgmi inside a node, roce between nodes): DeepEP "
     "and HybridEP run on NVIDIA Hopper or later GPUs over NVLink, with RDMA (InfiniBand or "
     "RoCE) between nodes", "use moe_dispatcher alltoall"),
    ("target_moe_dispatcher", "mixtral-8x7b", "dgx-h100", 64,
     dict(dp=64, ep=8, etp=1, moe_dispatcher="flex-deepep"), (T.TORCHTITAN,),
     "moe_dispatcher flex-deepep: only Megatron-LM's launch flags select the flex dispatcher "
     "(--moe-token-dispatcher-type flex)", "use moe_dispatcher alltoall, or emit for megatron "
     "only"),
    ("mindspore_zero", "llama2-7b", "ascend-910b", 64, dict(dp=64, zero_stage=3),
     (T.MINDSPORE,), "zero_stage 3: MindSpore's parallel optimizer (enable_parallel_optimizer) "
     "shards optimizer states, ZeRO stage 1", "use zero_stage 1"),
]


@pytest.mark.parametrize(("rule", "model", "cluster", "gpus", "fields", "targets", "message",
                          "fix"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_message_and_fix(rule, model, cluster, gpus, fields, targets, message, fix):
    problem = make_problem(model, cluster, gpus=gpus)
    strategy = Strategy(**{"global_batch": problem.training.global_batch, **fields})
    found = validate(problem, strategy, options=RuleOptions(targets=targets)).violations
    mine = [v for v in found if v.rule == rule]
    assert len(mine) == 1, [v.rule for v in found]
    assert (mine[0].message, mine[0].fix) == (message, fix)


def test_a_valid_strategy_breaks_nothing():
    problem = make_problem("llama2-7b", "dgx-h100", gpus=64)
    strategy = Strategy(dp=8, tp=8, pp=1, global_batch=1024, sequence_parallel=True,
                        zero_stage=1)
    targets = (T.MEGATRON, T.TORCHRUN, T.MINDSPORE)
    assert validate(problem, strategy, options=RuleOptions(targets=targets)).violations == []


def test_every_framework_rule_lives_in_its_module_and_is_gathered():
    from planner.rules.gate import EXPLAIN, FRAMEWORK_RULES, SUMMARY, TARGET_CHECKS, Rule

    for target, rules in FRAMEWORK_RULES.items():
        for rule in rules:
            assert rule.value.startswith(target.value), rule
            runs = tuple(t for t in T if t.framework == target.value)    # mindformers too
            assert TARGET_CHECKS[rule][0] == runs
            assert rule in SUMMARY and rule in EXPLAIN
    framework_specific = {r for r in Rule if r.value.split("_")[0] in
                          {t.value for t in FRAMEWORK_RULES}}
    assert framework_specific == {r for rules in FRAMEWORK_RULES.values() for r in rules}


def test_a_tp_that_splits_no_head_count_breaks_tp_divides_heads_alone():
    # Ring attention (p2p) has no head bound: the K/V exchange is not to blame for tp 16 on 8
    # key/value heads (its explanation once failed to find the heads it blamed).
    problem = make_problem("llama3-70b", "dgx-h100", gpus=128, seq_len=16384)
    strategy = Strategy(dp=4, tp=16, pp=1, cp=2, global_batch=problem.training.global_batch,
                        sequence_parallel=True)
    found = validate(problem, strategy, options=RuleOptions(cross_node_tp=True)).violations
    assert [v.rule for v in found if v.rule.startswith(("tp_", "cp_"))] == ["tp_divides_heads"]


@pytest.mark.parametrize("framework", ["deepspeed", "torchrun", "torchtitan", "mindspore"])
def test_the_pricing_frameworks_rules_apply_without_a_target(framework):
    # The framework that prices a strategy is always one whose rules it must keep: each
    # framework's own rule breaks with no --target given.
    broken = {"deepspeed": (dict(dp=16, pp=4, layers_per_stage=(9, 7, 7, 9)),
                            "deepspeed_uneven_layout"),
              "torchrun": (dict(dp=32, cp=2, sequence_parallel=True), "target_context_parallel"),
              "torchtitan": (dict(dp=64, zero_stage=1), "torchtitan_zero1"),
              "mindspore": (dict(dp=8, pp=8, vpp=2), "target_interleaved")}
    fields, rule = broken[framework]
    problem = make_problem("llama2-7b", "dgx-h100", gpus=64, seq_len=8192, framework=framework)
    strategy = Strategy(global_batch=problem.training.global_batch, **fields)
    assert rule in [v.rule for v in validate(problem, strategy).violations]
    other = make_problem("llama2-7b", "dgx-h100", gpus=64, seq_len=8192)       # Megatron-LM
    assert rule not in [v.rule for v in validate(other, strategy).violations]


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "torchtitan", "torchrun",
                                       "mindspore"])
def test_a_frameworks_rules_allow_the_kv_exchanges_its_profile_lists(framework):
    # The search takes its K/V exchanges from the rules, so the profile's context_parallel
    # list must say what the rules of that framework allow: every kind it lists, no other.
    from cost_models.enums import CpComm
    from planner.rules.gate import TARGET_CHECKS, rule_violations

    problem = make_problem("llama2-7b", "dgx-h100", gpus=64, seq_len=8192, framework=framework)
    zero = 1 if framework == "mindspore" else 3      # what each shards with, no rule broken
    allowed = set()
    for kind in CpComm:
        strategy = Strategy(dp=16, cp=4, cp_comm=kind, zero_stage=zero,
                            cp_a2a=2 if kind is CpComm.A2A_P2P else None,
                            global_batch=problem.training.global_batch)
        if not [v for v in rule_violations(problem, strategy)
                if Rule(v.rule) in TARGET_CHECKS]:
            allowed.add(kind)
    assert allowed == set(problem.framework.context_parallel)


def test_deepspeed_runs_a_pp_that_does_not_divide_the_layers_with_its_own_partition():
    # DeepSpeed's PipelineModule partitions 32 layers over 3 stages by itself (11, 11, 10:
    # deepspeed/runtime/utils.py partition_balanced); Megatron-LM's even split cannot.
    problem = make_problem("llama2-7b", "dgx-h100", gpus=48, framework="deepspeed")
    strategy = Strategy(dp=16, pp=3, global_batch=problem.training.global_batch)
    assert validate(problem, strategy).violations == []
    assert layout_for(problem, strategy).layers_per_chunk(problem.model) == [11, 11, 10]
    # 'type:transformer|embedding' counts the two embeddings as layers: 8, 9, 8, 7 on pp 4.
    four = make_problem("llama2-7b", "dgx-h100", gpus=64, framework="deepspeed")
    embedding_aware = Strategy(dp=16, pp=4, layers_per_stage=(8, 9, 8, 7),
                               global_batch=four.training.global_batch)
    assert validate(four, embedding_aware).violations == []
    megatron = make_problem("llama2-7b", "dgx-h100", gpus=48)
    assert [v.rule for v in validate(megatron, strategy).violations] == ["pp_divides_layers"]


def test_a_layout_with_skewed_chunks_says_its_price_is_optimistic():
    # The closed form holds for a stage's chunks within a layer of each other
    # (tests/costing/test_schedule.py); a hand-written layout further apart gets a note.
    from planner.rules.validate import uneven_chunks_note

    base = dict(dp=8, tp=2, pp=2, vpp=2, global_batch=256, sequence_parallel=True)
    assert uneven_chunks_note(Strategy(**base, layers_per_stage=(8, 8, 8, 8))) is None
    assert uneven_chunks_note(Strategy(**base, layers_per_stage=(7, 9, 8, 8))) is None
    assert uneven_chunks_note(Strategy(**base, layers_per_stage=(2, 14, 2, 14))) is None
    note = uneven_chunks_note(Strategy(**base, layers_per_stage=(2, 14, 14, 2)))
    assert note.startswith("layers_per_stage gives stage 1's 2 chunks 2 to 14 layers")
    assert uneven_chunks_note(Strategy(**{**base, "vpp": 1, "pp": 4},
                                       layers_per_stage=(2, 14, 14, 2))) is None
