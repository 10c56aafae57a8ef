"""Context parallelism: communication volumes as the papers and Transformer Engine give them,
activations split cp ways, gradients reduced over dp x cp, the CP rules, and the search
choosing CP for long sequences."""

import numpy as np
import pytest

from cost_models.communication import Group, Network
from cost_models.context_parallel import (cp_attention_comm, kv_chunk_bytes, ring_time_s,
                                          ulysses_bytes)
from cost_models.enums import CpComm, Recompute
from planner.core.candidates import Candidates
from planner.costing.evaluate import evaluate_strategy
from planner.rules.gate import RuleOptions, degree_violations
from planner.core.rules import Rule
from planner.inputs.loader import make_problem
from planner.schemas.strategy import Strategy, default_cp_a2a
from planner.search.candidates import SearchSpace
from planner.search.solver import SolverSettings, search

# A network without latency, so that times are bytes over bandwidth exactly.
BANDWIDTH = 100e9
NET = Network(intra_bus_bytes_per_s=BANDWIDTH, nic_bus_bytes_per_s=BANDWIDTH / 4,
              intra_hop_s=0.0, inter_hop_s=0.0)


def test_ulysses_all_to_all_volume_is_4nh_over_p():
    # Jacobs et al. 2023 (DeepSpeed-Ulysses, arXiv:2309.14509), Sec. 3.1: with N tokens, hidden
    # h and P ranks, the all-to-alls of Q, K, V and of the output send 4 N h / P per rank.
    n, h, p = 65536, 4096, 8
    sent = ulysses_bytes(seq_len=n, micro_batch=1, num_heads=32, num_kv_heads=32,
                         k_head_dim=h // 32, v_head_dim=h // 32, tp=1, cp=p, bytes_per_value=1)
    assert sent == 4 * n * h / p


def test_ring_chunk_is_the_local_keys_and_values():
    # Transformer Engine AttnFuncWithCPAndKVP2P: each ring step sends one flat buffer of the
    # rank's K and V, b (s / cp) g (d_k + d_v) elements. Llama 3 8B (8 KV heads of 128) at 128K
    # tokens over cp 16: 8192 tokens x 8 x 256 x 2 bytes = 32 MiB.
    kv = kv_chunk_bytes(seq_len=131072, micro_batch=1, num_kv_heads=8, k_head_dim=128,
                        v_head_dim=128, tp=1, cp=16, bytes_per_value=2)
    assert kv == 32 * 2**20


def test_ring_and_all_gather_move_the_same_bytes_but_only_the_ring_hides():
    # Ring (TE p2p): cp - 1 steps of KV forward, KV and dKV backward (2x). All-gather (Llama 3,
    # arXiv:2407.21783, Sec. 3.3.2; TE AttnFuncWithCPAndKVAllGather): gather K/V forward, gather
    # again and reduce-scatter dK/dV backward, all exposed.
    cp, kv = 8, 64e6
    group = Group(size=cp, ranks_per_node=cp, num_nodes=1)
    ring = cp_attention_comm(CpComm.P2P, kv_bytes=kv, qkvo_bytes=0.0, cp_group=group,
                             inner=group, outer_size=1, outer_across_nodes=False, net=NET)
    assert ring.forward_exposed_s == 0 and ring.backward_exposed_s == 0
    assert ring.forward_ring_s == pytest.approx((cp - 1) * kv / BANDWIDTH, rel=0.02)  # + launch
    assert ring.backward_ring_s == pytest.approx(2 * ring.forward_ring_s, rel=0.02)
    gather = cp_attention_comm(CpComm.ALL_GATHER, kv_bytes=kv, qkvo_bytes=0.0, cp_group=group,
                               inner=group, outer_size=1, outer_across_nodes=False, net=NET)
    assert gather.forward_ring_s == 0 and gather.backward_ring_s == 0
    assert gather.forward_exposed_s == pytest.approx(ring.forward_ring_s, rel=0.02)
    assert gather.backward_exposed_s == pytest.approx(ring.backward_ring_s, rel=0.02)


def test_hierarchical_ring_crosses_nodes_fewer_times():
    # a2a+p2p (Megatron-LM --hierarchical-context-parallel-sizes 8 2): the ring runs over the
    # 2 outer ranks only, with chunks of the same size, after an all-to-all inside the node.
    kv = 64e6
    flat = ring_time_s(kv, steps=np.array(15), across_nodes=True, net=NET)
    inner = Group(size=8, ranks_per_node=8, num_nodes=1)
    hier = cp_attention_comm(CpComm.A2A_P2P, kv_bytes=kv, qkvo_bytes=4 * kv, net=NET,
                             cp_group=Group(size=16, ranks_per_node=8, num_nodes=2),
                             inner=inner, outer_size=np.array(2), outer_across_nodes=True)
    assert hier.forward_ring_s == pytest.approx(flat / 15)
    assert hier.forward_exposed_s > 0               # the all-to-all is not hidden


def _problem(model="llama3-8b", gpus=64, seq_len=131072, **kw):
    return make_problem(model, "dgx-h100", gpus=gpus, seq_len=seq_len, global_batch=16, **kw)


def _strategy(**kw):
    base = dict(tp=8, pp=1, micro_batch=1, global_batch=16, sequence_parallel=True,
                recompute=Recompute.SELECTIVE, zero_stage=1)
    return Strategy(**{**base, **kw})


def test_activations_split_cp_ways():
    # Megatron-LM docs (features/context_parallel.md): each GPU processes s / cp tokens, so the
    # activations of every layer shrink cp-fold (flash attention keeps no s x s tensor).
    problem = _problem(gpus=64)
    whole = evaluate_strategy(problem, _strategy(dp=8, cp=1)).memory.stages[0]
    split = evaluate_strategy(problem, _strategy(dp=2, cp=4)).memory.stages[0]
    assert split.activations_bytes * 4 == pytest.approx(whole.activations_bytes, rel=0.02)


def test_gradients_and_zero_shards_span_dp_times_cp():
    # Megatron-LM distributed_data_parallel.py / optimizer/__init__.py: gradients are reduced and
    # the distributed optimizer shards over the dp x cp group; CP ranks hold the same weights.
    problem = _problem(gpus=64)
    a = evaluate_strategy(problem, _strategy(dp=8, cp=1)).memory.stages[0]
    b = evaluate_strategy(problem, _strategy(dp=2, cp=4)).memory.stages[0]
    assert b.optimizer_bytes == pytest.approx(a.optimizer_bytes)
    assert b.weights_bytes == pytest.approx(a.weights_bytes)


def test_cp_communication_is_reported_and_adds_up():
    problem = _problem(gpus=64)
    report = evaluate_strategy(problem, _strategy(dp=2, cp=4, cp_comm=CpComm.A2A))
    t = report.time
    assert t.cp_comm_s > 0
    assert report.strategy.cp == 4 and report.strategy.cp_comm is CpComm.A2A
    assert t.step_s == pytest.approx(sum(getattr(t, f) for f in (
        "compute_s", "tp_comm_s", "ep_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_s",
        "bubble_s", "optimizer_s", "grad_zero_s", "grad_norm_s", "loss_reduce_s",
        "overhead_s")))


def _broken(problem, strategy, targets=()):
    cands = Candidates.from_strategy(strategy, problem.framework.defaults)
    found = degree_violations(problem, cands, RuleOptions(targets=targets))
    return {rule for rule, bad in found.items() if bad[0]}


def test_cp_rules():
    problem = _problem(gpus=64, seq_len=8192)
    assert not _broken(problem, _strategy(dp=2, cp=4))
    # Megatron-LM arguments.py: seq-length must be a multiple of 2 * context-parallel-size.
    odd = _problem(gpus=64, seq_len=8200)
    assert Rule.CP_SEQUENCE in _broken(odd, _strategy(dp=2, cp=4))
    assert Rule.GPU_COUNT in _broken(problem, _strategy(dp=8, cp=4))
    # TE AttnFuncWithCPAndQKVOA2A: heads and KV heads per TP rank divisible by cp (Llama 3 8B:
    # 8 KV heads, tp 8 leaves 1).
    assert Rule.CP_ALL_TO_ALL in _broken(problem, _strategy(dp=2, cp=4, cp_comm=CpComm.A2A))
    assert Rule.CP_ALL_TO_ALL not in _broken(problem, _strategy(tp=1, dp=16, cp=4,
                                                                  cp_comm=CpComm.A2A))
    # Frameworks: torchtitan all-gathers K/V, DeepSpeed runs Ulysses, torchrun has no CP.
    from planner.schemas.strategy import LaunchTarget
    s = _strategy(dp=2, cp=4)
    assert Rule.TORCHTITAN_CONTEXT_PARALLEL in _broken(problem, s, (LaunchTarget.TORCHTITAN,))
    assert Rule.DEEPSPEED_CONTEXT_PARALLEL in _broken(problem, s, (LaunchTarget.DEEPSPEED,))
    assert Rule.TARGET_CONTEXT_PARALLEL in _broken(problem, s, (LaunchTarget.TORCHRUN,))


def test_cp_needs_fused_attention_and_rings_need_full_attention():
    # The rule follows the run's kernel, not the model: unfused attention has no CP.
    unfused = make_problem("gpt3-175b", "dgx-h100", gpus=64, seq_len=8192, attention="unfused")
    assert Rule.CP_FUSED_ATTENTION in _broken(unfused, _strategy(dp=2, cp=4, pp=1))
    flash = make_problem("gpt3-175b", "dgx-h100", gpus=64, seq_len=8192)
    assert Rule.CP_FUSED_ATTENTION not in _broken(flash, _strategy(dp=2, cp=4, pp=1))
    # gpt-oss: sliding windows and attention sinks; Transformer Engine runs those with a2a only.
    oss = make_problem("gpt-oss-120b", "dgx-h100", gpus=64, seq_len=8192)
    ring = Strategy(tp=1, dp=16, cp=4, ep=8, micro_batch=1, global_batch=16)
    assert Rule.CP_ATTENTION_VARIANT in _broken(oss, ring)


def test_default_hierarchical_split_keeps_the_all_to_all_in_a_node():
    assert default_cp_a2a(16, 1, 8) == 8
    assert default_cp_a2a(16, 2, 8) == 4
    assert default_cp_a2a(4, 8, 8) == 2


def test_long_context_plan_uses_cp_and_its_mfu_fits_the_time_model():
    # Issue 14's bar: 128K tokens on 64 H100s recommends cp > 1, and MFU (the FLOPs the kernels
    # run over peak) stays under the best efficiency the time model grants any kernel.
    problem = make_problem("llama3-8b", "dgx-h100", gpus=64, seq_len=131072)
    result = search(problem, SearchSpace(), SolverSettings(top_k=1))
    best = result.plans[0]
    assert best.strategy.cp > 1
    eff = problem.cluster.efficiency
    assert best.throughput.mfu < max(eff.gemm_peak_fraction, eff.flash_attention_fraction)
