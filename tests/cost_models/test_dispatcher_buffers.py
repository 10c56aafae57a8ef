"""The MoE flex dispatchers' communication buffers, from their allocators' closed forms:
DeepEP's normal-kernel size hints (csrc/legacy/config.hpp with the recommended configs of
deep_ep/buffers/legacy.py @dd758caf) and HybridEP's worst-case buffers (hybrid-ep branch
@94a9f8f, csrc/hybrid_ep/buffer/intranode.cu and internode_doca.cu)."""

import numpy as np
import pytest

from cost_models.expert_parallel import deepep_buffer_bytes, hybridep_buffer_bytes

H = 7168                    # DeepSeek-V3's hidden: 14,336 bytes a bf16 token
PER_TOKEN = 2 * H + 8 + 128 * 8 + 128 * 4 + 128 * 4    # hidden, SourceMeta, top-k, scales


def test_deepep_inside_one_node_holds_only_the_nvlink_buffer():
    # 8 ranks: 10 channels (20 SMs) x 8 NVLink ranks x (256 receive tokens x PER_TOKEN
    # + (2 x 1 + 3) int counters), rounded up to 128 bytes; no RDMA buffer.
    want = 10 * 8 * (256 * PER_TOKEN + 5 * 4)
    assert deepep_buffer_bytes(hidden=H, ep=8) == -(-want // 128) * 128 == 335_709_824


def test_deepep_across_nodes_adds_the_rdma_buffer():
    # 64 ranks = 8 nodes of 8: NVLink 288 receive tokens; RDMA 128 receive tokens, twice
    # (send and receive halves) with 16 bytes more per token, and (8 x 2 + 2) x 2 int counters.
    nvl = 10 * 8 * (288 * PER_TOKEN + (2 * 8 + 3) * 4)
    rdma = 10 * 8 * (128 * 2 * (PER_TOKEN + 16) + 18 * 2 * 4)
    assert deepep_buffer_bytes(hidden=H, ep=64) == pytest.approx(nvl + rdma, abs=256)
    assert (nvl + rdma) / 2**20 == pytest.approx(680.7, abs=0.1)


def test_deepep_sizes_it_has_no_config_for_take_the_next():
    # 40 ranks (5 nodes of 8) run with the 48-rank config's chunk sizes (288, 8, 128).
    nvl = 10 * 8 * (288 * PER_TOKEN + (2 * 5 + 3) * 4)
    rdma = 10 * 5 * (128 * 2 * (PER_TOKEN + 16) + 18 * 2 * 4)
    up = lambda n: -(-n // 128) * 128                                   # noqa: E731
    assert deepep_buffer_bytes(hidden=H, ep=40) == up(nvl) + up(rdma)
    assert deepep_buffer_bytes(hidden=H, ep=1) == 0


def test_hybridep_is_sized_for_every_token_of_the_group():
    # GPT-OSS on one NVL72 rack, ep 64, 4 x 4096 tokens a rank: 64 x 16,384 tokens of 2,880
    # bf16 values, fp32 probabilities for the domain's 128 experts and a scale per 128 values.
    tokens = 64 * 16384
    want = tokens * (2 * 2880 + 4 * 2 * 64 + 4 * (2880 // 128))
    got = hybridep_buffer_bytes(hidden=2880, tokens_per_rank=16384, ep=64, experts_per_rank=2,
                                ranks_per_domain=64)
    assert got == want
    assert got / 2**30 == pytest.approx(6.21, abs=0.01)


def test_hybridep_across_domains_adds_relay_buffers():
    one = hybridep_buffer_bytes(hidden=H, tokens_per_rank=4096, ep=8, experts_per_rank=4,
                                ranks_per_domain=8)
    two = hybridep_buffer_bytes(hidden=H, tokens_per_rank=4096, ep=16, experts_per_rank=4,
                                ranks_per_domain=8)
    # Intranode doubles with the group; across 2 domains the attention-side input and one
    # domain's relay buffers come on top.
    relay = 4096 * (2 * H + 4 * 4 * 16 + 4 * (H // 128)
                    + (2 * H + 4 * 32 + 4 * (H // 128)) + 2 * (2 * H + 4 * 32))
    assert two == pytest.approx(2 * one + relay)
    assert np.all(hybridep_buffer_bytes(hidden=H, tokens_per_rank=4096, ep=np.array([1, 2]),
                                        experts_per_rank=4, ranks_per_domain=8) >= [0, 1])


def test_a_flex_dispatcher_adds_its_buffers_to_every_stage():
    from planner.costing.evaluate import evaluate_strategy
    from planner.inputs.loader import make_problem
    from planner.schemas.strategy import Strategy
    problem = make_problem("deepseek-v3", "dgx-h100", gpus=512)
    base = dict(dp=32, tp=1, pp=16, ep=64, etp=1, micro_batch=1, recompute="full",
                zero_stage=1, global_batch=4096)
    peaks = {d: evaluate_strategy(problem, Strategy(**base, moe_dispatcher=d)).memory
             for d in ("alltoall", "flex-deepep", "flex-hybridep")}
    stage = lambda d: peaks[d].stages[0].other_bytes                    # noqa: E731
    # The framework's buffers sit in `other`, with the allocator's fragmentation share of them.
    deepep = deepep_buffer_bytes(hidden=H, ep=64)
    assert stage("flex-deepep") - stage("alltoall") == pytest.approx(deepep, rel=0.1)
    assert stage("flex-deepep") - stage("alltoall") >= deepep
    hybrid = hybridep_buffer_bytes(hidden=H, tokens_per_rank=4096, ep=64, experts_per_rank=4,
                                   ranks_per_domain=8)
    assert stage("flex-hybridep") - stage("alltoall") == pytest.approx(hybrid, rel=0.1)
