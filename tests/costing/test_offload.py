"""CPU offload: the offloaded optimizer step against Megatron-LM's measured one, the host bytes
against DeepSpeed's accounting, activation offload against its closed form, and the rules."""

import numpy as np
import pytest

from cost_models.compute import optimizer_step_bytes_per_param
from cost_models.offload import (activation_copies_s, cpu_optimizer_s, exposed_copy_s,
                                 host_copy_s, offloaded_step_s)
from planner.core.candidates import Candidates
from planner.costing.evaluate import evaluate_strategy
from planner.rules.gate import RuleOptions, degree_violations
from planner.core.rules import Rule
from planner.rules.validate import validate
from planner.errors import InfeasibleError
from planner.inputs.loader import load_cluster, make_problem, resolve_strategy
from planner.schemas.strategy import LaunchTarget, Strategy
from planner.search.candidates import SearchSpace
from planner.search.solver import SolverSettings, search

# NVIDIA-NeMo/RL PR #3628 (Megatron-Core HybridDeviceOptimizer, --optimizer-offload-fraction,
# --overlap-cpu-optimizer-d2h-h2d): Qwen3-0.6B on one H100, mean step time over steps 11-100.
QWEN3_06B_PARAMS = (151936 * 1024                     # tied embedding (config.json)
                    + 28 * (1024 * 2048 * 2 + 1024 * 1024 * 2 + 2 * 128   # q, o, k, v, qk norms
                            + 3 * 1024 * 3072 + 2 * 1024)                  # SwiGLU MLP, norms
                    + 1024)
NEMO_RL_STEP_S = {(0.0, True): 0.752, (0.5, False): 1.187, (0.5, True): 1.216,
                  (1.0, True): 1.678}


def _megatron_step_s(cluster, share: float, pipelined: bool) -> float:
    """The measured step without offload, less its GPU optimizer step, plus the hybrid step:
    the GPU updates 1 - share while the CPU path runs (`evaluate`)."""
    n = QWEN3_06B_PARAMS
    gpu_step = lambda params: params * optimizer_step_bytes_per_param(   # noqa: E731
        weight_bytes=2, gradient_bytes=4, optimizer_bytes=12) / (
        cluster.gpu.hbm_gb_per_s * 1e9 * cluster.efficiency.hbm_fraction)
    link, memory = cluster.host_link_bytes_per_s, cluster.host_memory_bytes_per_s_per_gpu
    cpu = offloaded_step_s(host_copy_s(share * n * 4, link_bytes_per_s=link),
                           cpu_optimizer_s(share * n, gradient_bytes=4, optimizer_bytes=12,
                                           host_memory_bytes_per_s=memory),
                           host_copy_s(share * n * 2, link_bytes_per_s=link),
                           pipelined=pipelined)
    return NEMO_RL_STEP_S[(0.0, True)] - gpu_step(n) + max(gpu_step((1 - share) * n), cpu)


def test_qwen3_param_count_is_the_model_card_0_6b():
    assert QWEN3_06B_PARAMS == pytest.approx(0.596e9, rel=0.002)


@pytest.mark.parametrize("share,pipelined,tolerance", [
    (1.0, True, 0.005),     # the point dgx-h100's host.memory_fraction is fitted to
    (0.5, True, 0.01),      # predicted
    (0.5, False, 0.06),     # predicted: D2H, CPU Adam and H2D in a row
])
def test_megatron_optimizer_offload_matches_nemo_rl(share, pipelined, tolerance):
    cluster = load_cluster("dgx-h100")
    predicted = _megatron_step_s(cluster, share, pipelined)
    assert predicted == pytest.approx(NEMO_RL_STEP_S[(share, pipelined)], rel=tolerance)


def test_cpu_adam_moves_28_bytes_per_parameter():
    # fp32 gradient read, master weight, exp_avg and exp_avg_sq read and written.
    assert cpu_optimizer_s(1e9, gradient_bytes=4, optimizer_bytes=12,
                           host_memory_bytes_per_s=28e9) == pytest.approx(1.0)


def test_copies_overlap_compute_and_the_rest_is_exposed():
    assert host_copy_s(57e9, link_bytes_per_s=57e9) == pytest.approx(1.0)
    np.testing.assert_allclose(exposed_copy_s(np.array([0.5, 2.0]), 1.0), [0.0, 1.0])
    assert offloaded_step_s(1.0, 3.0, 2.0, pipelined=True) == 3.0
    assert offloaded_step_s(1.0, 3.0, 2.0, pipelined=False) == 6.0


def _llama8b(**kw):
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8)
    base = dict(dp=8, tp=1, pp=1, micro_batch=1, zero_stage=1, recompute="selective")
    base.update(kw)
    return problem, evaluate_strategy(problem, resolve_strategy(Strategy(**base), problem))


def test_offloaded_optimizer_leaves_the_gpu_for_16_host_bytes_per_parameter():
    # DeepSpeed docs/code-docs/source/memory.rst: the host holds "16b for fp32: 4b params, 4b
    # grads, 4b momentum and 4b variance per parameter" of what it updates.
    problem, base = _llama8b()
    _, off = _llama8b(optimizer_offload=1.0)
    shard = problem.model.num_params / 8
    assert off.memory.stages[0].optimizer_bytes == 0
    assert off.memory.host_bytes == pytest.approx(16 * shard, rel=0.001)
    assert base.memory.stages[0].optimizer_bytes == pytest.approx(12 * shard, rel=0.001)
    assert off.time.optimizer_s == 0 and off.time.offload_s > 1.0
    _, half = _llama8b(optimizer_offload=0.5)
    assert half.memory.host_bytes == pytest.approx(8 * shard, rel=0.001)
    assert off.time.step_s == pytest.approx(sum(
        getattr(off.time, f) for f in ("compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s",
                                       "bubble_s", "optimizer_s", "offload_s", "grad_zero_s",
                                       "grad_norm_s", "loss_reduce_s", "overhead_s")))


def test_activation_offload_moves_layer_activations_and_prices_the_exposed_copies():
    problem, base = _llama8b(recompute="none", micro_batch=1)
    _, off = _llama8b(recompute="none", micro_batch=1, activation_offload_layers=16)
    stage, stage_off = base.memory.stages[0], off.memory.stages[0]
    moved = stage.activations_bytes - stage_off.activations_bytes
    assert off.memory.host_bytes == pytest.approx(moved)
    # Half the layers: a bit under half of the stage's activations (embedding and output
    # layer stay).
    assert 0.4 * stage.activations_bytes < moved < 0.5 * stage.activations_bytes
    # Per micro-batch, each offloaded layer's copy beyond its forward and backward compute.
    layer_bytes = moved / 16
    s = off.time.stages[0]
    fwd = base.time.stages[0].compute_s / 3 / 32        # about a third of fwd + bwd
    copy = layer_bytes / load_cluster("dgx-h100").host_link_bytes_per_s
    assert s.offload_s == pytest.approx(16 * (max(copy - fwd, 0) + max(copy - 2 * fwd, 0)),
                                        rel=0.25)


def test_activation_copies_hide_behind_compute_only_where_the_framework_overlaps_them():
    # Down behind a 0.4 s forward (0.6 s exposed), up behind a 2 s backward (hidden).
    assert activation_copies_s(1.0, forward_s=0.4, backward_s=2.0, overlapped=True) == \
        pytest.approx(0.6)
    assert activation_copies_s(1.0, forward_s=0.4, backward_s=2.0, overlapped=False) == 2.0


@pytest.mark.parametrize("framework,overlapped", [("deepspeed", False), ("megatron", True)])
def test_activation_offload_copies_block_on_deepspeed_and_overlap_on_megatron(framework,
                                                                              overlapped):
    # DeepSpeed cpu_checkpointing (every layer's checkpoint, full recompute) copies on the
    # compute stream: at pp 1 (one micro-batch in flight) each of the 32 layers' inputs goes
    # down and comes back in full, 2 x host bytes / link per micro-batch. Transformer Engine
    # (Megatron-LM) copies on a side stream: a layer input (2 s b h bytes) hides behind a
    # layer's compute entirely.
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8, framework=framework)
    strategy = resolve_strategy(Strategy(dp=8, zero_stage=1, recompute="full",
                                         activation_offload_layers=32), problem)
    report = evaluate_strategy(problem, strategy)
    assert problem.framework.offload.activation_copies_overlap is overlapped
    blocking = 2 * report.memory.host_bytes / load_cluster("dgx-h100").host_link_bytes_per_s
    if overlapped:
        assert report.time.stages[0].offload_s == 0 < blocking
    else:
        assert report.time.stages[0].offload_s == pytest.approx(blocking, rel=1e-9)


def test_nvlink_c2c_hides_what_pcie_exposes():
    kw = dict(dp=8, tp=1, pp=1, micro_batch=1, zero_stage=1, optimizer_offload=1.0)
    steps = {}
    for cluster in ("dgx-b200", "gb200-nvl72"):
        problem = make_problem("llama3-8b", cluster, gpus=8)
        steps[cluster] = evaluate_strategy(problem, resolve_strategy(Strategy(**kw), problem))
    assert steps["gb200-nvl72"].time.offload_s < 0.5 * steps["dgx-b200"].time.offload_s


def _broken(problem, targets=(), **kw):
    strategy = resolve_strategy(Strategy(**kw), problem)
    cands = Candidates.from_strategy(strategy, problem.framework.defaults)
    found = degree_violations(problem, cands, RuleOptions(targets=targets,
                                                          explicit_layouts=True))
    return {rule for rule, bad in found.items() if bad[0]}


def test_offload_rules():
    p = make_problem("llama3-8b", "dgx-h100", gpus=8)
    ok = dict(dp=8, zero_stage=1)
    assert not _broken(p, (LaunchTarget.MEGATRON,), optimizer_offload=1.0, **ok)
    assert Rule.OFFLOAD_FRAMEWORK in _broken(p, dp=8, optimizer_offload=1.0)   # needs dist-opt
    assert Rule.PARAM_OFFLOAD_ZERO3 in _broken(p, param_offload=True, **ok)
    megatron = _broken(p, (LaunchTarget.MEGATRON,), dp=4, pp=2, activation_offload_layers=4,
                       zero_stage=1)
    assert Rule.MEGATRON_OFFLOAD in megatron
    assert Rule.MEGATRON_OFFLOAD in _broken(p, (LaunchTarget.MEGATRON,), recompute="full",
                                            activation_offload_layers=4, **ok)
    # Megatron keeps one layer: 32 of 32 is refused by the profile rule.
    assert Rule.OFFLOAD_FRAMEWORK in _broken(p, activation_offload_layers=32, **ok)
    fp8 = make_problem("llama3-8b", "dgx-h100", gpus=8, precision="fp8")
    assert Rule.MEGATRON_OFFLOAD in _broken(fp8, (LaunchTarget.MEGATRON,), optimizer_offload=1.0,
                                            fp8_param_gather=True, **ok)
    ascend = make_problem("llama3-8b", "ascend-910b", gpus=8, framework="mindspore")
    assert {Rule.OFFLOAD_HOST, Rule.OFFLOAD_FRAMEWORK} <= _broken(ascend, optimizer_offload=1.0,
                                                                  **ok)
    ds = make_problem("llama3-8b", "dgx-h100", gpus=8, framework="deepspeed")
    assert Rule.DEEPSPEED_OFFLOAD in _broken(ds, (LaunchTarget.DEEPSPEED,), dp=8, zero_stage=2,
                                             optimizer_offload=0.5)
    assert not _broken(ds, (LaunchTarget.DEEPSPEED,), dp=8, zero_stage=3, optimizer_offload=0.5)
    assert Rule.OFFLOAD_FRAMEWORK in _broken(ds, dp=8, zero_stage=1, recompute="selective",
                                             activation_offload_layers=32)  # needs full recompute
    tt = make_problem("llama3-8b", "dgx-h100", gpus=8, framework="torchtitan")
    assert Rule.TORCHTITAN_OFFLOAD in _broken(tt, (LaunchTarget.TORCHTITAN,), dp=8, zero_stage=3,
                                              optimizer_offload=1.0)
    assert not _broken(tt, (LaunchTarget.TORCHTITAN,), dp=8, zero_stage=3,
                       optimizer_offload=1.0, param_offload=True)


def test_host_memory_rule():
    # Llama 3 405B's optimizer on the host of one DGX H100: 16 B x 405e9 / 8 per GPU, 6.5 TB
    # per node against 2 TB.
    problem = make_problem("llama3-405b", "dgx-h100", gpus=8)
    strategy = resolve_strategy(Strategy(dp=8, zero_stage=3, optimizer_offload=1.0,
                                         param_offload=True, recompute="full"), problem)
    found = validate(problem, strategy)
    rules = {v.rule for v in found.violations}
    assert Rule.HOST_MEMORY_FITS.value in rules
    message = next(v.message for v in found.violations if v.rule == Rule.HOST_MEMORY_FITS.value)
    assert "2048.0 GiB" in message


def test_search_offloads_only_when_asked_and_when_it_helps():
    problem = make_problem("llama3-70b", "dgx-h100", gpus=8, global_batch=64)
    settings = SolverSettings(top_k=1, time_limit_s=10)
    with pytest.raises(InfeasibleError):
        search(problem, SearchSpace(), settings)
    best = search(problem, SearchSpace(offload=("optimizer",)), settings).plans[0]
    assert best.strategy.optimizer_offload == 1.0 and best.memory.fits
    small = make_problem("llama3-8b", "dgx-h100", gpus=8, global_batch=64)
    plan = search(small, SearchSpace(offload=("optimizer", "activations")), settings).plans[0]
    assert plan.strategy.optimizer_offload == 0 and plan.strategy.activation_offload_layers == 0


def test_nothing_fits_says_that_offloading_would():
    problem = make_problem("llama3-70b", "dgx-h100", gpus=8, global_batch=64)
    with pytest.raises(InfeasibleError) as error:
        search(problem, SearchSpace(), SolverSettings(top_k=1, time_limit_s=10))
    assert any(line.strip().startswith("- CPU offload, --offload optimizer: ")
               for line in error.value.details)
