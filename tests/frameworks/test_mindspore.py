"""MindSpore read as MindSpore runs it: SEMI_AUTO_PARALLEL derives data parallelism from the
devices, AUTO_PARALLEL's searches are diagnosed as MindSpore would, and values that live in
model code (operator shard strategies, PipelineCell's micro_size) are reported, never assumed
in silence."""

from __future__ import annotations

import json

SEMI_AUTO_PP2 = """import mindspore as ms
ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8,
                             pipeline_stages=2, enable_parallel_optimizer=True)
"""

SHARDED = """import mindspore as ms
from mindspore import nn, ops
ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=16,
                             pipeline_stages=2)

class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.up = ops.MatMul().shard(((2, 1), (1, 4)))
        self.down = ops.MatMul().shard(in_strategy=((2, 4), (4, 1)))

net = nn.PipelineCell(Block(), 4)
"""


def _validate(cli, write, text, *args, name="parallel.py", model="llama2-7b",
              cluster="ascend-910b"):
    path = write(name, text)
    code, out, err = cli("validate", model, cluster, path, "--json", "--no-compare", *args)
    assert out, err
    return code, json.loads(out)


def _rules(result) -> dict[str, tuple[str, str]]:
    return {v["rule"]: (v["message"], v["fix"]) for v in result["violations"]}


def _degrees(result) -> tuple[int, int, int]:
    s = result["strategy"]
    return s["dp"], s["tp"], s["pp"]


def test_semi_auto_pipeline_on_8_devices_leaves_dp_to_the_devices(cli, write):
    # Issue 12 point 8: this file was flagged "dp * tp * pp (1 * 1 * 2 = 2) must equal 8".
    code, result = _validate(cli, write, SEMI_AUTO_PP2)
    assert "gpu_count" not in _rules(result)
    assert _degrees(result) == (4, 1, 2) and result["num_gpus"] == 8
    assert result["notes"][:2] == [
        "operator shard strategies (tp): set in model code, not in this file; the planner "
        "assumes tp 1, and dp is what the devices leave: dp = 8 / (pp 2 x tp 1) = 4",
        "micro-batches (PipelineCell micro_size): set in model code, not in this file; the "
        "planner prices the model's global batch (1024 samples) in micro-batches of 1 per "
        "data-parallel rank"]
    assert code == 0, result["violations"]


def test_literal_shard_strategies_and_pipeline_cell_are_read(cli, write):
    code, result = _validate(cli, write, SHARDED)
    # MatMul ((2, 1), (1, 4)) and ((2, 4), (4, 1)): columns then rows split 4 ways.
    assert _degrees(result) == (2, 4, 2)
    s = result["strategy"]
    # 1024 samples in 4 micro-batches on 2 data-parallel ranks: 128 per micro-batch.
    assert (s["micro_batch"], s["global_batch"]) == (128, 1024)
    assert result["notes"][0] == ("tp 4: the largest split of a non-batch dimension in this "
                                  "file's operator shard strategies; dp = devices / (pp x tp) "
                                  "= 16 / (2 x 4) = 2")


def test_pipeline_cell_needs_as_many_micro_batches_as_stages(cli, write):
    # nn/wrap/cell_wrapper.py PipelineCell: "micro_size must be greater or equal to pipeline
    # stages".
    text = SHARDED.replace("pipeline_stages=2", "pipeline_stages=4").replace(
        "PipelineCell(Block(), 4)", "PipelineCell(Block(), micro_size=2)")
    code, result = _validate(cli, write, text, "--gpus", "32")
    assert code == 1
    assert _rules(result)["mindspore_micro_batches"][0] == (
        "micro_batch_num (2) must be at least pipeline_stage (4) for MindSpore")


def test_shard_strategies_computed_at_run_time_are_not_guessed(cli, write):
    text = SHARDED.replace("((2, 1), (1, 4))", "((dp, 1), (1, mp))")
    code, result = _validate(cli, write, text)
    assert _degrees(result) == (8, 1, 2)
    assert result["notes"][0].startswith("operator shard strategies (tp): computed when the "
                                         "file runs; the planner assumes tp 1")


def test_parallel_mode_as_the_enum_and_as_a_typo(cli, write):
    enum = SEMI_AUTO_PP2.replace('"semi_auto_parallel"', "ms.ParallelMode.SEMI_AUTO_PARALLEL")
    code, result = _validate(cli, write, enum)
    assert code == 0 and _degrees(result) == (4, 1, 2)
    typo = SEMI_AUTO_PP2.replace('"semi_auto_parallel"', '"semi_auto"')
    code, result = _validate(cli, write, typo)
    assert code == 1
    # ParallelContext::set_parallel_mode refuses anything outside its list.
    assert _rules(result)["mindspore_mode"] == (
        "MindSpore stops: parallel_mode 'semi_auto' is not one of stand_alone, data_parallel, "
        "hybrid_parallel, semi_auto_parallel, auto_parallel",
        "use parallel_mode 'semi_auto_parallel'")


AUTO = """import mindspore as ms
ms.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=16,
                             search_mode="sharding_propagation", pipeline_stages=2,
                             enable_parallel_optimizer=True)
"""


def test_an_unknown_search_mode_names_the_valid_ones(cli, write):
    text = AUTO.replace('"sharding_propagation"', '"sharding_propogation"')
    code, result = _validate(cli, write, text)
    assert code == 1
    assert _rules(result)["mindspore_search_mode"] == (
        "MindSpore stops: search_mode 'sharding_propogation' is not one of "
        "recursive_programming, sharding_propagation, dynamic_programming",
        "use search_mode 'sharding_propagation'")


def test_recursive_programming_needs_a_power_of_two_devices(cli, write):
    # step_auto_parallel.cc InferParallelStrategy: "The recursive auto parallel strategy
    # searching mode requires the device num be the power of 2."
    text = AUTO.replace('search_mode="sharding_propagation", ', "").replace(
        "device_num=16", "device_num=24")
    code, result = _validate(cli, write, text)
    assert _rules(result)["mindspore_search_mode"] == (
        "MindSpore stops: search_mode recursive_programming needs the device count to be a "
        "power of 2 (got 24)", "use sharding_propagation, or a power-of-2 device_num")


def test_auto_parallel_prices_the_planners_best_plan_under_what_the_file_fixes(cli, write):
    code, result = _validate(cli, write, AUTO)
    dp, tp, pp = _degrees(result)
    assert pp == 2 and dp * tp * pp == 16 and result["strategy"]["zero_stage"] == 1
    notes = result["notes"]
    assert notes[0] == ("parallel_mode auto_parallel: MindSpore's sharding_propagation search "
                        "picks the operator shards (tp) and data parallelism when it compiles "
                        "the graph; the planner cannot know them")
    assert notes[-1].startswith("priced as the planner's best plan with what the file fixes "
                                f"(pp 2, zero 1): dp {dp}, tp {tp}, pp 2")
    assert notes[-1].endswith("MindSpore's sharding_propagation search may pick another")


def test_sharding_propagation_spreads_the_files_own_shard_strategies(cli, write):
    text = SHARDED.replace('"semi_auto_parallel"', '"auto_parallel"').replace(
        "pipeline_stages=2", 'pipeline_stages=2, search_mode="sharding_propagation"')
    code, result = _validate(cli, write, text)
    assert _degrees(result) == (2, 4, 2)
    assert "sharding_propagation spreads them to the other operators" in result["notes"][0]


def test_search_mode_outside_auto_parallel_is_ignored_and_said(cli, write):
    text = SEMI_AUTO_PP2.replace("pipeline_stages=2,", 'pipeline_stages=2, '
                                 'search_mode="recursive_programming",')
    code, result = _validate(cli, write, text)
    assert code == 0 and _degrees(result) == (4, 1, 2)
    assert ("search_mode 'recursive_programming' only works in auto_parallel; "
            "semi_auto_parallel ignores it") in result["notes"]
