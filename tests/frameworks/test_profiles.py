"""Framework profiles: every target has one, and each feature changes the cost as documented."""

import json
from dataclasses import replace

import pytest

from planner.costing.evaluate import evaluate_strategy
from planner.inputs import profiles
from planner.inputs.loader import make_problem
from planner.schemas.strategy import LaunchTarget, Strategy


def test_every_launch_target_has_a_profile_with_sources():
    import importlib

    assert set(profiles.names()) == {t.framework for t in LaunchTarget}
    for name in profiles.names():
        module = importlib.import_module(f"planner.frameworks.{name}")
        assert module.profile() is profiles.load(name) and module.profile().sources


def run(framework, model="llama3-8b", cluster="dgx-h100", gpus=16, **strategy):
    problem = make_problem(model, cluster, gpus=gpus, framework=framework)
    fields = dict(global_batch=problem.training.global_batch) | strategy
    return evaluate_strategy(problem, Strategy(**fields))


def test_deepspeed_pipeline_engine_reduces_gradients_after_the_last_micro_batch():
    # runtime/pipe/schedule.py: ReduceGrads after the last micro-batch, no overlap; Megatron-LM
    # overlaps each chunk's reduction with its last backward.
    shape = dict(dp=4, tp=2, pp=2, zero_stage=0)
    ds, mg = run("deepspeed", **shape), run("megatron", **shape, tp_comm_overlap=False)
    assert not ds.strategy.overlap_grad_reduce and mg.strategy.overlap_grad_reduce
    assert ds.time.dp_comm_s > 2 * mg.time.dp_comm_s
    # Without a pipeline DeepSpeed overlaps too (zero_optimization.overlap_comm).
    assert run("deepspeed", dp=8, tp=2, pp=1, zero_stage=1).strategy.overlap_grad_reduce


def test_pipeline_sends_whole_activations_without_scatter_gather():
    # Narayanan et al. 2021, Sec. 4.1: Megatron sends 1/t and all-gathers over NVLink; the
    # DeepSpeed engine sends the whole s*b*h tensor across the (slower) network.
    shape = dict(dp=1, tp=8, pp=2, sequence_parallel=False)
    ds, mg = run("deepspeed", **shape), run("megatron", **shape)
    assert ds.time.pp_comm_s > 2 * mg.time.pp_comm_s


def test_deepspeed_pipeline_engine_costs_per_layer_and_micro_batch():
    # The profile's pipeline_layer_overhead_s (fitted on BLOOM and MT-NLG; BLOOM's topology
    # search held out) per layer the slowest stage holds and per micro-batch: llama3-8b's 32
    # layers over 2 stages, 16 each; twice the stages halve it, twice the micro-batches double
    # it. No pipeline, no engine; Megatron states none.
    per_layer = profiles.load("deepspeed").pipeline_layer_overhead_s
    assert per_layer > 0 and profiles.load("megatron").pipeline_layer_overhead_s == 0
    two = run("deepspeed", dp=4, tp=2, pp=2, micro_batch=1)
    m = two.strategy.num_micro_batches
    assert two.time.pipeline_engine_s == pytest.approx(per_layer * 16 * m, rel=1e-9)
    four = run("deepspeed", dp=2, tp=2, pp=4, micro_batch=1)
    assert four.time.pipeline_engine_s == pytest.approx(per_layer * 8 * 2 * m, rel=1e-9)
    assert run("deepspeed", dp=8, tp=2, pp=1).time.pipeline_engine_s == 0
    assert run("megatron", dp=4, tp=2, pp=2).time.pipeline_engine_s == 0
    # Megatron-DeepSpeed runs the engine with one stage too (GPTModelPipe unless
    # --no-pipeline-parallel): BLOOM's sources say so, and every layer pays.
    problem = make_problem("llama3-8b", "dgx-h100", gpus=16, framework="deepspeed")
    problem = replace(problem, framework=problem.framework.model_copy(
        update={"pipeline_engine_single_stage": True}))
    one = evaluate_strategy(problem, Strategy(dp=8, tp=2, pp=1, micro_batch=1,
                                              global_batch=problem.training.global_batch))
    assert one.time.pipeline_engine_s == pytest.approx(
        per_layer * 32 * one.strategy.num_micro_batches, rel=1e-9)


def test_tp_comm_overlap_leaves_only_the_interference():
    # With the Megatron profile's overlap share 1.0 and TP traffic shorter than the GEMMs it
    # overlaps, what remains is the cluster's overlap_interference (0.1) of the traffic. The
    # embedding's reduce-scatter outlasts its tiny lookup and stays exposed: 1-2% more.
    shape = dict(dp=2, tp=8, pp=1, sequence_parallel=True, micro_batch=1)
    off = run("megatron", **shape, tp_comm_overlap=False)
    on = run("megatron", **shape, tp_comm_overlap=True)
    assert on.strategy.tp_comm_overlap and not off.strategy.tp_comm_overlap
    assert 0.1 * off.time.tp_comm_s < on.time.tp_comm_s < 0.102 * off.time.tp_comm_s
    # Needs sequence parallelism (megatron/training/arguments.py), and DeepSpeed has none.
    no_sp = run("megatron", **(shape | dict(sequence_parallel=False)), tp_comm_overlap=True)
    assert not no_sp.strategy.tp_comm_overlap
    assert not run("deepspeed", **shape, tp_comm_overlap=True).strategy.tp_comm_overlap


def test_deepspeed_buckets_take_memory():
    # runtime/zero/config.py: reduce_bucket_size 5e8 elements, double-buffered with
    # overlap_comm, and allgather_bucket_size 5e8, in bf16 (2 bytes), grown by the 5%
    # fragmentation reserve of the preset.
    buckets = 2 * 5e8 * 2 + 5e8 * 2
    shape = dict(dp=16, tp=1, pp=1, zero_stage=2, recompute="full")
    ds, tt = run("deepspeed", **shape), run("torchtitan", **shape)
    extra = ds.memory.stages[0].other_bytes - tt.memory.stages[0].other_bytes
    assert extra == pytest.approx(buckets * 1.05, rel=1e-9)
    # Without ZeRO in bf16, DeepSpeed's BF16_Optimizer also keeps each parameter's bf16 .grad
    # beside its fp32 accumulation buffer (runtime/bf16_optimizer.py): 2 bytes per parameter;
    # there is no parameter all-gather bucket without ZeRO.
    shape.update(zero_stage=0, gpus=16, model="gpt2-xl")
    ds, mg = run("deepspeed", **shape), run("megatron", **shape)
    extra = ds.memory.stages[0].other_bytes - mg.memory.stages[0].other_bytes
    params = mg.memory.stages[0].weights_bytes / 2           # bf16 weights: 2 bytes each
    assert extra == pytest.approx((2 * 5e8 * 2 + 2 * params) * 1.05, rel=1e-9)
    # ZeRO-1 without a pipeline runs DeepSpeed's ZeRO optimizer: no second copy.
    shape["zero_stage"] = 1
    ds, mg = run("deepspeed", **shape), run("megatron", **shape)
    extra = ds.memory.stages[0].other_bytes - mg.memory.stages[0].other_bytes
    assert extra == pytest.approx(buckets * 1.05, rel=1e-9)


def test_deepspeed_zero3_fetches_per_submodule_and_its_2021_rate_stays_with_its_runs():
    # DeepSpeed fetches every submodule separately (4 collectives per GPT block, each paying
    # the ring's latency); FSDP2 gathers one unit per block. Both at NCCL's bandwidth today.
    shape = dict(dp=64, tp=1, pp=1, zero_stage=3, recompute="full", micro_batch=1)
    ds = run("deepspeed", gpus=64, **shape)
    tt = run("torchtitan", gpus=64, **shape)
    assert ds.time.dp_comm_s >= tt.time.dp_comm_s
    assert ds.time.step_s < 1.1 * tt.time.step_s      # no 9x bandwidth penalty (issue 24)
    # The DeepSpeed of 2021 (SC21 Table 2's fit, 0.11 of NCCL's bandwidth) only where a
    # source says so: bench/data/sc21_table2_zero3.yaml framework_overrides.
    import yaml
    from dataclasses import replace
    from pathlib import Path

    source = yaml.safe_load((Path(__file__).resolve().parents[2] / "bench" / "data"
                             / "sc21_table2_zero3.yaml").read_text())["source"]
    old = source["framework_overrides"]["zero3"]
    problem = make_problem("llama3-8b", "dgx-h100", gpus=64, framework="deepspeed")
    fw = problem.framework
    legacy = replace(problem, framework=fw.model_copy(
        update={"zero3": fw.zero3.model_copy(update=old)}))
    slow = evaluate_strategy(legacy, Strategy(global_batch=problem.training.global_batch,
                                              **shape))
    assert slow.time.step_s > 1.3 * ds.time.step_s


def test_plan_framework_flag_prices_and_constrains(cli):
    code, out, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "64", "--framework",
                         "deepspeed", "--json", "--top", "3")
    assert code == 0, err
    result = json.loads(out)
    assert result["framework"] == "deepspeed"
    for plan in result["plans"]:                  # DeepSpeed's rules: no interleaving, ZeRO-2/3
        s = plan["strategy"]                      # only without a pipeline
        assert s["vpp"] == 1 and not s["tp_comm_overlap"]
        assert s["pp"] == 1 or s["zero_stage"] <= 1


def test_emit_target_sets_the_framework(cli, tmp_path):
    code, out, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "16", "--emit",
                         "torchtitan", "--out", str(tmp_path), "--json", "--top", "1")
    assert code == 0, err
    assert json.loads(out)["framework"] == "torchtitan"


def test_overlap_pins_reach_the_plan(cli):
    code, out, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "16", "--json", "--top",
                         "1", "--no-overlap-grad-reduce", "--no-tp-comm-overlap")
    assert code == 0, err
    s = json.loads(out)["plans"][0]["strategy"]
    assert not s["overlap_grad_reduce"] and not s["tp_comm_overlap"]


def test_validate_prices_a_config_with_its_own_framework(cli, write):
    config = write("ds.json", json.dumps({
        "train_batch_size": 512, "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 32, "zero_optimization": {"stage": 1},
        "bf16": {"enabled": True}}))
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", config, "--gpus", "16",
                         "--json", "--no-compare")
    assert json.loads(out)["framework"] == "deepspeed", err
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", config, "--gpus", "16",
                         "--json", "--no-compare", "--framework", "megatron")
    assert json.loads(out)["framework"] == "megatron", err


# ---------------------------------------------------------------- HSDP

def test_hsdp_shards_model_states_over_the_shard_group_only():
    # Zhao et al. 2023 Sec. 3.2.2: hybrid sharding keeps 1/dp_shard of the model states.
    full = run("torchtitan", gpus=64, dp=64, tp=1, pp=1, zero_stage=3, recompute="full")
    hsdp = run("torchtitan", gpus=64, dp=64, tp=1, pp=1, zero_stage=3, recompute="full",
               dp_shard=8)
    f, h = full.memory.stages[0], hsdp.memory.stages[0]
    assert h.optimizer_bytes == pytest.approx(8 * f.optimizer_bytes, rel=1e-9)
    assert h.gradients_bytes == pytest.approx(8 * f.gradients_bytes, rel=1e-9)
    assert hsdp.strategy.dp_shard == 8 and full.strategy.dp_shard == 64


def test_hsdp_pays_off_where_the_network_is_thin(write):
    # One 200 Gb/s NIC shared by a node's 8 GPUs (3.125 GB/s each). Full ZeRO-3 crosses it with
    # every gather and reduce-scatter of every micro-batch; HSDP over one node keeps those on
    # NVLink and crosses the network once per step, with a 1/8 gradient all-reduce.
    from planner.inputs import presets

    text = presets.path("dgx-h100").read_text().replace(
        "bandwidth_gb_per_s: 50 ", "bandwidth_gb_per_s: 3.125 ")
    assert "bandwidth_gb_per_s: 3.125" in text
    cluster = write("thin.yaml", text)
    shape = dict(cluster=cluster, gpus=64, dp=64, tp=1, pp=1, zero_stage=3, recompute="full")
    full, hsdp = run("torchtitan", **shape), run("torchtitan", **shape, dp_shard=8)
    assert hsdp.time.step_s < 0.7 * full.time.step_s


@pytest.mark.parametrize(("fields", "message"), [
    (dict(dp_shard=6), "dp_shard (6) must divide dp (16): HSDP replicates dp / dp_shard shard "
                       "groups"),
    (dict(dp_shard=8, zero_stage=0), "dp_shard 8 with zero_stage 0: there is nothing to shard"),
])
def test_hsdp_rules(fields, message):
    from planner.rules.validate import validate

    problem = make_problem("llama3-8b", "dgx-h100", gpus=16)
    strategy = Strategy(**(dict(dp=16, zero_stage=3, global_batch=512) | fields))
    violations = validate(problem, strategy).violations
    assert [v.message for v in violations if v.rule == "dp_shard"] == [message]


def test_a_dp_shard_pin_that_cannot_divide_dp_is_named_with_its_way_out(cli):
    code, out, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "64", "--dp-shard", "3")
    assert code == 1
    assert "satisfies dp_shard and --dp-shard 3" in err
    assert "drop --dp-shard 3:" in err


def test_deepspeed_shards_within_groups_only_with_zero3():
    from planner.rules.gate import RuleOptions
    from planner.rules.validate import validate

    problem = make_problem("gpt2-xl", "dgx-h100", gpus=16, framework="deepspeed")
    strategy = Strategy(dp=16, zero_stage=1, dp_shard=8, global_batch=512, recompute="full")
    check = validate(problem, strategy, options=RuleOptions(targets=(LaunchTarget.DEEPSPEED,)))
    assert [v.rule for v in check.violations] == ["deepspeed_hsdp"]
    ok = strategy.model_copy(update={"zero_stage": 3})
    assert validate(problem, ok, options=RuleOptions(targets=(LaunchTarget.DEEPSPEED,))).valid


def test_selective_recompute_follows_the_framework(write, tiny_model):
    # Megatron-LM's selective recompute re-runs the attention core (Korthikanti et al. 2022,
    # Sec. 5); torchtitan's per-op policy saves attention and re-runs every other matmul. With
    # memory-bound kernels made free, full recompute re-runs core + dense GEMMs, so
    # torchtitan's extra = half of (full extra - Megatron's extra).
    from tests.costing.test_step_time import FAST_HBM

    cluster = write("fast.yaml", FAST_HBM)

    def extra(framework, recompute):
        def compute(rc):
            problem = make_problem(tiny_model, cluster, gpus=1, framework=framework)
            s = Strategy(dp=1, global_batch=problem.training.global_batch, recompute=rc)
            return evaluate_strategy(problem, s).time.compute_s
        return compute(recompute) - compute("none")

    full, megatron = extra("megatron", "full"), extra("megatron", "selective")
    assert extra("torchtitan", "full") == pytest.approx(full, rel=1e-9)
    assert 0 < megatron < full
    assert extra("torchtitan", "selective") == pytest.approx(0.5 * (full - megatron), rel=1e-9)


def test_converted_configs_carry_their_own_frameworks_prediction(cli, tmp_path):
    # A DeepSpeed ZeRO-3 config converted to Megatron-LM is priced as Megatron-FSDP runs it:
    # the script's header says what `validate` of that script says, not DeepSpeed's time.
    import re
    from pathlib import Path

    source = Path(__file__).parent / "golden" / "llama3-8b-mics.ds_config.json"
    code, _, err = cli("emit", "llama3-8b", "dgx-h100", str(source), "--target", "megatron",
                       "--out", str(tmp_path))
    assert code == 0, err
    script = tmp_path / "pretrain_gpt.sh"
    header = float(re.search(r"Predicted: ([0-9.]+) s per step", script.read_text()).group(1))
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", str(script), "--json",
                         "--no-compare")
    checked = json.loads(out)
    assert checked["framework"] == "megatron"
    assert header == pytest.approx(checked["time"]["step_s"], abs=5e-4)
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", str(source), "--json",
                         "--no-compare")
    priced = json.loads(out)
    # The JSON itself is priced as DeepSpeed runs it: a collective per submodule, not per block.
    assert priced["framework"] == "deepspeed"
    assert priced["time"]["step_s"] > header
