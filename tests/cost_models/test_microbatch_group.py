"""The interleaved schedule's micro-batch groups (Megatron-LM
--microbatch-group-size-per-virtual-pipeline-stage): which groups Megatron-LM runs, the order
its schedule table gives, the warm-up the memory model counts, and the step time."""

from hypothesis import given
from hypothesis import strategies as st
import pytest

from cost_models.enums import MicroBatchGroups
from cost_models.pipeline import (in_flight_chunk_micro_batches, in_flight_per_chunk,
                                  micro_batch_group_size, pipeline_time_s, schedule_group,
                                  schedule_group_allowed)
from planner.costing.schedule import pass_order, simulate


def megatron_accepts(p: int, m: int, n: int) -> bool:
    """The two checks forward_backward_pipelining_with_interleaving makes before it runs
    (megatron/core/pipeline_parallel/schedules.py @d98e8a64): N in [PP, M], else ValueError;
    a last group of 1 to PP - 1 micro-batches, else RuntimeError."""
    if n > m or n < p:
        return False
    final = m % n
    return not 0 < final < p


@given(p=st.integers(2, 32), m=st.integers(1, 200))
def test_the_group_is_the_smallest_megatron_accepts(p, m):
    # Brute force over every group Megatron-LM could be given.
    accepted = [n for n in range(1, m + 1) if megatron_accepts(p, m, n)]
    assert micro_batch_group_size(pp=p, num_micro_batches=m) == (accepted[0] if accepted else 0)
    for n in range(1, m + 2):
        assert bool(schedule_group_allowed(pp=p, num_micro_batches=m, group=n)) == \
            megatron_accepts(p, m, n)


def test_groups_of_known_cases():
    assert micro_batch_group_size(pp=8, num_micro_batches=64) == 8      # the default, pp
    assert micro_batch_group_size(pp=16, num_micro_batches=24) == 24    # one group of all
    assert micro_batch_group_size(pp=4, num_micro_batches=13) == 7      # 7 + 6 (6 >= 4)
    assert micro_batch_group_size(pp=8, num_micro_batches=4) == 0       # fewer than pp
    assert micro_batch_group_size(pp=[16, 4, 8], num_micro_batches=[24, 13, 20]).tolist() == \
        [24, 7, 10]


def test_pytorch_rounds():
    # torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B's docstring: pp 4 with
    # 10 micro-batches runs 2 rounds of 5; rounds must divide the micro-batches (11: 2 rounds
    # do not). Fewer than pp (its "3 micro-batches, 1 round") waits on its own dependencies:
    # not priced, refused (0).
    def rounds(p, m):
        return int(schedule_group(pp=p, num_micro_batches=m, groups=MicroBatchGroups.ROUNDS))

    assert rounds(4, 10) == 5
    assert rounds(4, 8) == 4
    assert rounds(4, 11) == 0
    assert rounds(4, 3) == 0
    assert rounds(16, 24) == 24
    # Each round is a group Megatron-LM's checks accept too: the same schedule table.
    for p in range(2, 17):
        for m in range(p, 120):
            n = rounds(p, m)
            assert n == 0 or megatron_accepts(p, m, n)
    assert int(schedule_group(pp=4, num_micro_batches=10, groups=MicroBatchGroups.PP)) == 4
    assert int(schedule_group(pp=4, num_micro_batches=10, pinned=10,
                              groups=MicroBatchGroups.ROUNDS)) == 10


def test_pass_order_is_megatrons_schedule_table():
    # model_parallel_config.py, microbatch_group_size_per_vp_stage's docstring, rank 0:
    # PP=2 VP=2, N=2, M=4: 0 1 0 1 2 3 2 3;  N=3, M=5: 0 1 2 0 1 2 3 4 3 4 (forwards).
    def forwards(m, n):
        order = pass_order(stage=0, pp=2, vpp=2, num_micro_batches=m, group=n)
        return [mb for _, mb, backward in order if not backward]

    assert forwards(4, 2) == [0, 1, 0, 1, 2, 3, 2, 3]
    assert forwards(5, 3) == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]


GROUPED = [(p, v, m) for p in (2, 3, 4, 8, 16) for v in (2, 3, 6) for m in range(p, 3 * p + 3)
           if m % p]
"""Interleaved cases whose micro-batches are not a multiple of pp, run in the smallest group."""


@pytest.mark.parametrize(("pp", "vpp", "m"), GROUPED)
def test_grouped_schedule_keeps_the_interleaved_bubble(pp, vpp, m):
    # Equal stages (forward 1, backward 2): the simulated schedule ends when the closed form
    # (Narayanan et al. 2021, Sec. 2.2.2: (p - 1) / (v m) bubble) says, for every group.
    group = micro_batch_group_size(pp=pp, num_micro_batches=m)
    passes = simulate([1.0 / vpp] * pp, [2.0 / vpp] * pp, vpp=vpp, num_micro_batches=m,
                      group=group)
    end = max(q.end_s for row in passes for q in row)
    assert end == pytest.approx(pipeline_time_s(max_stage_s=3.0, sum_stage_s=pp * 3.0,
                                                num_micro_batches=m, vpp=vpp), rel=1e-9)


@pytest.mark.parametrize(("pp", "vpp", "m"), GROUPED)
def test_grouped_warm_up_is_the_memory_models_in_flight_count(pp, vpp, m):
    group = micro_batch_group_size(pp=pp, num_micro_batches=m)
    for stage in range(pp):
        order = pass_order(stage=stage, pp=pp, vpp=vpp, num_micro_batches=m, group=group)
        first_backward = next(i for i, (_, _, backward) in enumerate(order) if backward)
        assert first_backward == in_flight_chunk_micro_batches(
            stage=stage, pp=pp, vpp=vpp, num_micro_batches=m, group=group)
        # ... and per chunk, what the warm-up's forwards hold.
        for chunk in range(vpp):
            held = sum(1 for c, _, _ in order[:first_backward] if c == chunk)
            assert held == in_flight_per_chunk(stage=stage, pp=pp, vpp=vpp,
                                               num_micro_batches=m, chunk=chunk, group=group)


def test_a_larger_group_holds_more_in_flight():
    # get_pp_rank_microbatches: (p - r - 1) * 2 + (v - 1) * N warm-up forwards, plus one.
    assert in_flight_chunk_micro_batches(stage=0, pp=16, vpp=6, num_micro_batches=48) == 111
    assert in_flight_chunk_micro_batches(stage=0, pp=16, vpp=6, num_micro_batches=48,
                                         group=24) == 151
