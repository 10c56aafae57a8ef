"""ZeRO's data-parallel traffic: Rajbhandari et al. 2020 (arXiv:1910.02054) Sec. 7.2, the
FSDP paper's hybrid sharding, Megatron-LM's FP8 parameter gather, and the overlap pieces.

Collective times are given as volume / bandwidth with no latency, so that the closed forms of
Sec. 7.2 (data parallelism moves 2 Psi per rank, P_os and P_os+g the same 2 Psi, P_os+g+p
3 Psi: "1.5x") are what the functions must return; restated closed forms: rel=1e-12.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cost_models.communication import exposed_time_s, overlap_pieces
from cost_models.data_parallel import (ddp_bucket_count, fp8_gather_bytes_saved,
                                       hsdp_replica_bytes,
                                       zero3_block_collectives_s,
                                       zero_micro_batch_pieces, zero_micro_batch_s,
                                       zero_step_end_s)
from cost_models.enums import ZeroStage

PSI, BW = 7.5e9 * 2, 100e9     # 16-bit gradients of a 7.5B model; bytes/s per rank, no latency


def _traffic(zero: ZeroStage, micro_batches: int) -> float:
    """Seconds of data-parallel traffic per step, nothing overlapped (ring times ~ volume)."""
    per_micro_batch = zero_micro_batch_s(
        zero_stage=zero, reduce_scatter_s=PSI / BW, block_all_gather_s=PSI / BW,
        block_reduce_scatter_s=PSI / BW, forward_s=1.0, backward_s=1.0, overlap=False,
        prefetch_share=1.0, interference=0.1)
    end = zero_step_end_s(
        zero_stage=zero, gradient_all_reduce_s=2 * PSI / BW, gradient_reduce_scatter_s=PSI / BW,
        weight_all_gather_s=PSI / BW, replica_all_reduce_s=0.0, forward_s=1.0, backward_s=1.0,
        overlap_grad_reduce=False, overlap_param_gather=False, interference=0.1)
    return micro_batches * per_micro_batch + end


def test_zero2020_sec7_volumes_per_step():
    # Sec. 7.2.1: baseline DP all-reduces 2 Psi; P_os (and Megatron-LM's distributed optimizer)
    # reduce-scatters Psi and all-gathers Psi: the same 2 Psi.
    assert _traffic(ZeroStage.NONE, 1) == pytest.approx(2 * PSI / BW, rel=1e-12)
    assert _traffic(ZeroStage.OPTIMIZER_STATES, 1) == pytest.approx(2 * PSI / BW, rel=1e-12)
    # P_os+g with one micro-batch: its reduce-scatter and the all-gather, 2 Psi again.
    assert _traffic(ZeroStage.GRADIENTS, 1) == pytest.approx(2 * PSI / BW, rel=1e-12)
    # Sec. 7.2.2: P_os+g+p gathers the parameters twice and reduce-scatters once: 3 Psi, 1.5x.
    assert _traffic(ZeroStage.PARAMETERS, 1) == pytest.approx(1.5 * _traffic(ZeroStage.NONE, 1),
                                                              rel=1e-12)


def test_sharded_gradients_are_reduced_every_micro_batch():
    # P_os+g keeps only its shard of the accumulated gradients, so each micro-batch reduces.
    assert _traffic(ZeroStage.GRADIENTS, 8) == pytest.approx((8 + 1) * PSI / BW, rel=1e-12)
    assert _traffic(ZeroStage.OPTIMIZER_STATES, 8) == _traffic(ZeroStage.OPTIMIZER_STATES, 1)


def test_overlap_hides_gradient_traffic_behind_the_backward_pass():
    # All of it hidden behind a longer backward pass: only the interference is left.
    kw = dict(zero_stage=ZeroStage.NONE, gradient_all_reduce_s=2.0, gradient_reduce_scatter_s=1.0,
              weight_all_gather_s=1.0, replica_all_reduce_s=0.0, forward_s=5.0, backward_s=5.0,
              overlap_param_gather=False, interference=0.1)
    assert zero_step_end_s(**kw, overlap_grad_reduce=True) == pytest.approx(0.1 * 2.0)
    assert zero_step_end_s(**kw, overlap_grad_reduce=False) == pytest.approx(2.0)


def test_hsdp_replicas_reduce_their_shard():
    # Zhao et al. 2023, Sec. 3.2.2: each rank all-reduces 1/F of the gradients across replicas.
    assert hsdp_replica_bytes(8e9, shard_size=8) == pytest.approx(1e9)


def test_fp8_parameter_gather_halves_the_bf16_gather():
    # megatron/core/transformer/moe/README.md: --fp8-param-gather, "50% parameter all-gather".
    saved = fp8_gather_bytes_saved(weight_bytes=2, fp8_value_bytes=1, gathered=True)
    assert (2 - saved) / 2 == pytest.approx(0.5)
    assert fp8_gather_bytes_saved(weight_bytes=2, fp8_value_bytes=1, gathered=False) == 0


@given(comm=st.floats(0, 10), compute=st.floats(0, 10), share=st.floats(0, 1),
       k=st.floats(0, 1))
def test_overlap_pieces_are_the_exposed_time(comm, compute, share, k):
    # The two derivations agree: (comm - c) + (c - h) + k h with c = share comm, h = min(c,
    # compute), against the larger of the two linear pieces.
    c = share * comm
    h = min(c, compute)
    expected = (comm - c) + (c - h) + k * h
    assert max(overlap_pieces(comm, compute, interference=k, share=share)) == \
        pytest.approx(expected, abs=1e-12)
    assert exposed_time_s(comm, compute, interference=k, share=share) == \
        pytest.approx(expected, abs=1e-12)


def test_micro_batch_pieces_select_by_stage_and_overlap():
    kw = dict(reduce_scatter_s=3.0, block_all_gather_s=1.0, block_reduce_scatter_s=1.0,
              forward_s=0.5, backward_s=10.0, prefetch_share=1.0, interference=0.0)
    zero = np.array([0, 1, 2, 2, 3, 3])
    overlap = np.array([True, True, True, False, True, False])
    got = zero_micro_batch_s(zero_stage=zero, overlap=overlap, **kw)
    # ZeRO 0/1: nothing per micro-batch; ZeRO-2 hidden behind 10 s of backward, or 3 s;
    # ZeRO-3: the gather before the 0.5 s forward shows 0.5 s, the rest hides; or 2 + 1.
    np.testing.assert_allclose(got, [0, 0, 0, 3, 0.5, 3])
    assert len(zero_micro_batch_pieces(zero_stage=3, overlap=True, **kw)) == 4


def test_zero3_pays_the_latency_once_per_fetch():
    # Zhao et al. 2023, Sec. 3.2: FSDP gathers unit by unit. 32 blocks of 4 fetches each
    # (DeepSpeed's qkv, out, fc1, fc2 hooks) gather 4 GB in 128 collectives: 128 latencies
    # and the bytes once at the bus bandwidth, whatever their split.
    from cost_models.communication import Line

    line = Line(latency_s=20e-6, seconds_per_byte=1 / 100e9)
    got = zero3_block_collectives_s(line, message_bytes=4e9, fetches=32 * 4)
    assert got == pytest.approx(128 * 20e-6 + 4e9 / 100e9, rel=1e-12)
    assert got == pytest.approx(128 * (20e-6 + (4e9 / 128) / 100e9), rel=1e-12)


def test_megatron_buckets_llama3_8b_by_its_default_size():
    # training.py resolve_ddp_bucket_size @d98e8a64: max(40_000_000, 1_000_000 * dp_cp_size).
    # Llama 3 8B (8,030,261,248 parameters): dp 8 -> 40M per bucket, 201 buckets; dp x cp 64
    # -> 64M, 126; dp 128 -> 128M, 63; no overlap -> the whole buffer, one.
    kw = dict(min_elements=40_000_000, elements_per_rank=1_000_000)
    params = 8_030_261_248
    assert ddp_bucket_count(params, dp_size=8, overlap=True, **kw) == 201
    assert ddp_bucket_count(params, dp_size=64, overlap=True, **kw) == 126
    assert ddp_bucket_count(params, dp_size=128, overlap=True, **kw) == 63
    assert ddp_bucket_count(params, dp_size=64, overlap=False, **kw) == 1
    # DeepSpeed: reduce_bucket_size 5e8 elements (deepspeed/runtime/zero/config.py).
    assert ddp_bucket_count(params, dp_size=64, overlap=True, min_elements=500_000_000,
                            elements_per_rank=0) == 17
    # No size stated: one collective per stage, as before.
    assert ddp_bucket_count(params, dp_size=64, overlap=True, min_elements=0,
                            elements_per_rank=0) == 1


def test_one_bucket_of_each_collective_cannot_hide():
    # 100 buckets of 10 ms reduce-scatter and 10 ms all-gather (1 s each) beside 5 s of
    # backward and 3 s of forward, no interference: only the last reduction and the first
    # gather show, 10 ms each; not bucketed, the same traffic hides entirely.
    common = dict(zero_stage=ZeroStage.OPTIMIZER_STATES, gradient_all_reduce_s=0.0,
                  gradient_reduce_scatter_s=1.0, weight_all_gather_s=1.0,
                  replica_all_reduce_s=0.0, forward_s=3.0, backward_s=5.0,
                  overlap_grad_reduce=True, overlap_param_gather=True, interference=0.0)
    assert zero_step_end_s(**common, buckets=100, bucketed=True) == pytest.approx(0.02,
                                                                                 rel=1e-12)
    assert zero_step_end_s(**common) == pytest.approx(0.0, abs=1e-15)
    # Traffic longer than the compute beside it: the excess shows as well.
    long = dict(common, forward_s=0.5)
    assert zero_step_end_s(**long, buckets=100, bucketed=True) == pytest.approx(
        0.01 + 0.01 + (0.99 - 0.5), rel=1e-12)
