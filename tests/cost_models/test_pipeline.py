"""Pipeline schedules: Narayanan et al. 2021 Sec. 2.2 / Eq. 1 and Megatron-LM's schedules."""

from hypothesis import given
from hypothesis import strategies as st
import pytest

from cost_models.enums import PipelinePartition
from cost_models.pipeline import (bubble_fraction, in_flight_chunk_micro_batches,
                                  partition_placements, partitioned_layer_counts,
                                  in_flight_per_chunk, interleaved_memory_factor,
                                  pipeline_time_s)


def test_bubble_fractions():
    assert bubble_fraction(pp=8, num_micro_batches=64) == pytest.approx(7 / 64)
    assert bubble_fraction(pp=8, num_micro_batches=64, vpp=4) == pytest.approx(7 / 256)


@given(p=st.integers(1, 64), m=st.integers(1, 512), t=st.floats(0.001, 10))
def test_equal_stages_reduce_to_eq1(p, m, t):
    # Eq. 1: (m + p - 1) (t_f + t_b) for p equal stages.
    assert pipeline_time_s(max_stage_s=t, sum_stage_s=p * t, num_micro_batches=m) == \
        pytest.approx((m + p - 1) * t)


@given(p=st.integers(1, 64), m=st.integers(1, 512), v=st.integers(1, 8), t=st.floats(0.001, 10))
def test_equal_interleaved_stages_have_the_interleaved_bubble(p, m, v, t):
    got = pipeline_time_s(max_stage_s=t, sum_stage_s=p * t, num_micro_batches=m, vpp=v)
    assert got == pytest.approx(m * t * (1 + bubble_fraction(pp=p, num_micro_batches=m, vpp=v)))


@given(p=st.integers(2, 64), v=st.integers(2, 8))
def test_first_stage_in_flight_reproduces_korthikanti_factor(p, v):
    # The factor describes the interleaved schedule (v >= 2); v = 1 is plain 1F1B (below).
    m = 4 * p  # enough micro-batches that the warm-up is not cut short
    chunks = in_flight_chunk_micro_batches(stage=0, pp=p, vpp=v, num_micro_batches=m)
    assert chunks / v == pytest.approx(p * interleaved_memory_factor(pp=p, vpp=v))


@given(p=st.integers(1, 32), m=st.integers(1, 64))
def test_1f1b_stage_r_holds_p_minus_r(p, m):
    for r in range(p):
        assert in_flight_chunk_micro_batches(stage=r, pp=p, vpp=1, num_micro_batches=m) == \
            min(p - r, m)


@given(p=st.integers(2, 16), v=st.integers(2, 6), m=st.integers(1, 64), r=st.integers(0, 15))
def test_chunks_share_the_in_flight_total(p, v, m, r):
    r = r % p
    total = in_flight_chunk_micro_batches(stage=r, pp=p, vpp=v, num_micro_batches=m)
    parts = [in_flight_per_chunk(stage=r, pp=p, vpp=v, num_micro_batches=m, chunk=c)
             for c in range(v)]
    assert sum(parts) == total
    assert parts == sorted(parts, reverse=True)   # warm-up fills chunk 0 first


def test_scatter_gather_sends_a_tp_share_sc21_sec4_1():
    # Narayanan et al. 2021, Sec. 4.1: GPT-3 175B (s 2048, h 12288), b 1, t 8: each rank sends
    # 1/8 of the 2 s b h bytes across a stage boundary.
    from cost_models.pipeline import pipeline_send_bytes

    assert pipeline_send_bytes(2048 * 12288, tp=8, value_bytes=2) == 6_291_456


def test_boundary_is_a_send_each_way_plus_the_regather():
    from cost_models.communication import (Group, Network, all_gather_time_s,
                                           send_recv_time_s)
    from cost_models.pipeline import pipeline_boundary_s

    net = Network(intra_bus_bytes_per_s=300e9, nic_bus_bytes_per_s=25e9, intra_hop_s=1e-6,
                  inter_hop_s=5e-6)
    tp_group = Group(size=8, ranks_per_node=8, num_nodes=1)
    elements = 2048 * 12288
    kw = dict(elements=elements, value_bytes=2, tp=8, across_nodes=True, tp_group=tp_group,
              net=net)
    send = send_recv_time_s(elements * 2 / 8, across_nodes=True, net=net)
    gather = all_gather_time_s(elements * 2, tp_group, net)
    assert pipeline_boundary_s(sequence_parallel=False, scatter_gather=True, **kw) == \
        pytest.approx(2 * (send + gather))
    # Sequence parallelism already splits the activation: no regather.
    assert pipeline_boundary_s(sequence_parallel=True, scatter_gather=True, **kw) == \
        pytest.approx(2 * send)
    # Without the optimisation every rank sends the whole activation.
    whole = send_recv_time_s(elements * 2, across_nodes=True, net=net)
    assert pipeline_boundary_s(sequence_parallel=False, scatter_gather=False, **kw) == \
        pytest.approx(2 * whole)


# deepspeed/runtime/utils.py partition_balanced @edaa72212, run on unit weights (the layer specs
# 'type:...' matches): these are the parts it returns, as transformer layers per stage. The
# embedding case lays the specs out as Megatron-DeepSpeed's GPTModelPipe does: the input
# embedding first, the tied output embedding last.
@pytest.mark.parametrize(("layers", "stages", "method", "counts"), [
    (70, 12, PipelinePartition.TRANSFORMER, [6] * 10 + [5, 5]),
    (70, 12, PipelinePartition.TRANSFORMER_EMBEDDING, [5] + [6] * 10 + [5]),    # BLOOM-176B
    (30, 4, PipelinePartition.TRANSFORMER, [8, 8, 7, 7]),
    (30, 4, PipelinePartition.TRANSFORMER_EMBEDDING, [7, 8, 8, 7]),
    (80, 6, PipelinePartition.TRANSFORMER_EMBEDDING, [13, 14, 14, 14, 13, 12]),
    (96, 7, PipelinePartition.TRANSFORMER_EMBEDDING, [13, 14, 14, 14, 14, 14, 13]),
    (32, 3, PipelinePartition.TRANSFORMER_EMBEDDING, [11, 11, 10]),
])
def test_deepspeed_partitions_as_its_partitioner_does(layers, stages, method, counts):
    assert partitioned_layer_counts(layers, stages, method) == counts


def test_partition_placements_keep_distinct_placements_with_a_layer_per_stage():
    both = (PipelinePartition.TRANSFORMER, PipelinePartition.TRANSFORMER_EMBEDDING)
    assert partition_placements(32, 4, both) == [[8, 8, 8, 8], [8, 9, 8, 7]]
    assert partition_placements(30, 2, both) == [[15, 15]]          # the same placement once
    assert partition_placements(4, 4, both) == [[1, 1, 1, 1]]       # embeddings would empty an end
