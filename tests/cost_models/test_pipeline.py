"""Pipeline schedules: Narayanan et al. 2021 Sec. 2.2 / Eq. 1 and Megatron-LM's schedules."""

from hypothesis import given
from hypothesis import strategies as st
import pytest

from cost_models.pipeline import (bubble_fraction, in_flight_chunk_micro_batches,
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
