"""The fixed per-step terms (cost_models/step_fixed.py), by hand and in whole plans.

Numbers: Llama 3 8B has 8,030,261,248 parameters (its HF config.json; model_zoo pins it).
An H100 SXM reads and writes HBM3 at 3.35 TB/s (datasheet).
"""

import pytest

from cost_models.communication import Group, all_reduce_time_s
from cost_models.step_fixed import (GRAD_CLIP_PASSES, GRAD_NORM_BYTES, LOSS_REDUCE_BYTES,
                                    grad_buffer_zero_time_s, grad_clip_time_s,
                                    step_sync_time_s)
from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem
from planner.inputs.profiles import load as load_profile
from planner.schemas.strategy import Strategy

LLAMA3_8B_PARAMS = 8_030_261_248
H100_HBM = 3.35e12


def test_megatron_zeroes_the_whole_fp32_buffer_of_llama3_8b():
    # param_and_grad_buffer.py reset(): grad_data.zero_() writes 4 bytes per local parameter
    # (fp32 main grads): 32.12 GB at 3.35 TB/s is 9.59 ms, whatever the dp (not a ZeRO shard).
    got = grad_buffer_zero_time_s(4 * LLAMA3_8B_PARAMS, hbm_bytes_per_s=H100_HBM,
                                  hbm_fraction=1.0)
    assert got == pytest.approx(4 * 8_030_261_248 / 3.35e12, rel=1e-12)
    assert got * 1e3 == pytest.approx(9.588, abs=5e-4)


def test_clipping_reads_the_shard_three_times_and_adds_the_norm_all_reduce():
    # clip_grads.py: multi_tensor_l2norm reads each local grad once, multi_tensor_scale reads
    # and writes it: 3 passes over dp 8's shard of fp32 grads, plus one 4-byte all-reduce.
    shard = 4 * LLAMA3_8B_PARAMS / 8
    got = grad_clip_time_s(shard, norm_all_reduce_s=20e-6, hbm_bytes_per_s=H100_HBM,
                           hbm_fraction=1.0)
    assert GRAD_CLIP_PASSES == 3 and GRAD_NORM_BYTES == 4 and LOSS_REDUCE_BYTES == 8
    assert got == pytest.approx(3 * shard / 3.35e12 + 20e-6, rel=1e-12)


@pytest.mark.parametrize(("name", "zeroes", "clips", "loss"), [
    ("megatron", True, True, True),       # training.py train_step, clip_grads.py
    ("torchtitan", False, True, False),   # set_to_none; clip_grad_norm_; loss on log steps
    ("deepspeed", False, False, False),   # zero_grad(set_to_none=True)
])
def test_profiles_say_which_fixed_terms_run(name, zeroes, clips, loss):
    profile = load_profile(name)
    assert (profile.zeroes_grad_buffer, profile.clips_grad_norm,
            profile.reduces_loss_every_step) == (zeroes, clips, loss)


def _plan(framework: str, gpus: int):
    problem = make_problem("llama3-8b", "dgx-h100", gpus=gpus, seq_len=8192,
                           global_batch=gpus, framework=framework)
    strategy = Strategy(dp=gpus, tp=1, pp=1, micro_batch=1, global_batch=gpus,
                        zero_stage=3 if framework == "torchtitan" else 1, recompute="full")
    return problem, evaluate_strategy(problem, strategy)


def test_megatron_plan_charges_the_memset_of_its_gradient_memory():
    problem, plan = _plan("megatron", 8)
    eff = problem.cluster.efficiency
    stage = plan.memory.stages[0]
    expected = stage.gradients_bytes / (problem.cluster.gpu.hbm_gb_per_s * 1e9 * eff.hbm_fraction)
    assert plan.time.grad_zero_s == pytest.approx(expected, rel=1e-12)
    assert plan.time.grad_norm_s > 0 and plan.time.loss_reduce_s > 0


def test_torchtitan_plan_has_no_memset_but_clips():
    _, plan = _plan("torchtitan", 8)
    assert plan.time.grad_zero_s == 0 and plan.time.loss_reduce_s == 0
    assert plan.time.grad_norm_s > 0


def test_loss_all_reduce_is_the_latency_of_eight_bytes_and_grows_with_the_group():
    # 8 ranks in one node vs 256 over 32 nodes: NCCL's latency terms (ring steps, tree depth).
    problem, small = _plan("megatron", 8)
    _, large = _plan("megatron", 256)
    net = problem.cluster.network
    one_node = all_reduce_time_s(8, Group(size=8, ranks_per_node=8, num_nodes=1), net)
    assert small.time.loss_reduce_s == pytest.approx(float(one_node), rel=1e-12)
    assert large.time.loss_reduce_s > small.time.loss_reduce_s


def test_fixed_terms_add_up_into_the_step():
    _, plan = _plan("megatron", 8)
    t = plan.time
    parts = (t.compute_s + t.tp_comm_s + t.ep_comm_s + t.cp_comm_s + t.pp_comm_s + t.dp_comm_s
             + t.bubble_s + t.optimizer_s + t.offload_s + t.overhead_s)
    assert t.step_s == pytest.approx(parts + t.grad_zero_s + t.grad_norm_s + t.loss_reduce_s,
                                     rel=1e-12)


def test_step_sync_adds_the_cross_node_part_only_across_nvlink_domains():
    assert step_sync_time_s(host_s=0.013, cross_node_s=0.039, spans_nodes=False) == 0.013
    assert step_sync_time_s(host_s=0.013, cross_node_s=0.039,
                            spans_nodes=True) == pytest.approx(0.052, rel=1e-12)


def test_megatron_plans_pay_the_profiles_host_and_sync_time_once_per_step():
    # The constants are the Megatron profile's (fitted by bench/calibrate_step_sync.py); the
    # other profiles assume the same (not measured there).
    fw = load_profile("megatron")
    assert fw.step_host_s >= 0 and fw.step_cross_node_s > 0
    t1, t2 = (_plan("megatron", gpus)[1].time for gpus in (8, 16))
    assert t1.overhead_s == pytest.approx(fw.step_host_s, rel=1e-12)
    assert t2.overhead_s == pytest.approx(fw.step_host_s + fw.step_cross_node_s, rel=1e-12)
    titan = load_profile("torchtitan")
    assert _plan("torchtitan", 16)[1].time.overhead_s == pytest.approx(
        titan.step_host_s + titan.step_cross_node_s, rel=1e-12)
