"""The pipeline schedule `--timeline` draws: Megatron-LM's pass order, and its length against
the closed form the step time uses."""

import pytest

from cost_models.pipeline import in_flight_chunk_micro_batches, pipeline_time_s
from planner.costing.schedule import pass_order, simulate

CASES = [(1, 1, 4), (2, 1, 1), (4, 1, 8), (4, 1, 2), (8, 1, 64), (4, 2, 8), (8, 3, 16),
         (4, 8, 64), (2, 4, 2)]
"""(pp, vpp, micro-batches): 1F1B with few and many micro-batches, interleaved with m a
multiple of pp (`rules.gate._interleaved_schedule` holds plans to that)."""


@pytest.mark.parametrize(("pp", "vpp", "m"), CASES)
def test_every_stage_runs_each_pass_once(pp, vpp, m):
    for stage in range(pp):
        order = pass_order(stage=stage, pp=pp, vpp=vpp, num_micro_batches=m)
        expected = {(c, b, bwd) for c in range(vpp) for b in range(m) for bwd in (False, True)}
        assert len(order) == len(expected) and set(order) == expected


@pytest.mark.parametrize(("pp", "vpp", "m"), CASES)
def test_warm_up_is_the_in_flight_count_of_the_memory_model(pp, vpp, m):
    # The forwards before the first backward are the passes whose activations the stage
    # holds at its peak (cost_models.pipeline), so the picture and the memory agree.
    for stage in range(pp):
        order = pass_order(stage=stage, pp=pp, vpp=vpp, num_micro_batches=m)
        first_backward = next(i for i, (_, _, bwd) in enumerate(order) if bwd)
        assert first_backward == in_flight_chunk_micro_batches(
            stage=stage, pp=pp, vpp=vpp, num_micro_batches=m)


@pytest.mark.parametrize(("pp", "vpp", "m"), CASES)
def test_equal_stages_take_the_closed_form_time(pp, vpp, m):
    # Narayanan et al. 2021, Eq. 1 and Sec. 2.2.2: (m - 1) tau + (p tau + (v - 1) tau) / v
    # for p equal stages of tau per micro-batch (forward 1, backward 2 here).
    forward, backward = 1.0, 2.0
    passes = simulate([forward / vpp] * pp, [backward / vpp] * pp, vpp=vpp,
                      num_micro_batches=m)
    end = max(q.end_s for row in passes for q in row)
    tau = forward + backward
    assert end == pytest.approx(pipeline_time_s(max_stage_s=tau, sum_stage_s=pp * tau,
                                                num_micro_batches=m, vpp=vpp), rel=1e-9)


def test_passes_wait_for_their_inputs():
    forward, backward = [1.0, 3.0, 1.0], [2.0, 6.0, 2.0]       # a slow middle stage
    passes = simulate(forward, backward, vpp=1, num_micro_batches=6)
    end = {(q.stage, q.micro_batch, q.backward): q.end_s for row in passes for q in row}
    for row in passes:
        for before, after in zip(row, row[1:]):
            assert after.start_s >= before.end_s                 # one pass at a time
        for q in row:
            if not q.backward and q.stage > 0:
                assert q.start_s >= end[(q.stage - 1, q.micro_batch, False)]
            if q.backward and q.stage < 2:
                assert q.start_s >= end[(q.stage + 1, q.micro_batch, True)]
    # The slow stage sets the pace: its passes run back to back once it has started.
    middle = passes[1]
    assert all(b.start_s == pytest.approx(a.end_s) for a, b in zip(middle[1:], middle[2:]))


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 2, 16), (4, 3, 32), (8, 4, 64), (2, 5, 8)])
def test_the_closed_form_holds_for_chunks_within_a_layer_and_not_for_skewed_ones(pp, vpp, m):
    # Chunks of 4 and 5 layers on every stage (the balancer keeps a stage's chunks within one
    # layer of each other, search.balance.solve_layout): the closed form stays within 4% of
    # the schedule (3.1% at worst here, for sizes alternating in a checkerboard). The same
    # stage totals in one big chunk and small ones stall the interleaved schedule 22-38% beyond
    # it, which is why the balancer may not build them.
    def end(layers):
        fwd = [[float(n) for n in row] for row in layers]
        bwd = [[2.0 * n for n in row] for row in layers]
        passes = simulate(fwd, bwd, vpp=vpp, num_micro_batches=m)
        return max(q.end_s for row in passes for q in row)

    def closed(layers):
        tau = [3.0 * sum(row) for row in layers]
        return pipeline_time_s(max_stage_s=max(tau), sum_stage_s=sum(tau),
                               num_micro_batches=m, vpp=vpp)

    near = [[4 + (r + c) % 2 for c in range(vpp)] for r in range(pp)]
    assert closed(near) == pytest.approx(end(near), rel=0.04)
    skewed = [[1] * (vpp - 1) + [sum(row) - (vpp - 1)] for row in near]
    assert closed(skewed) < 0.85 * end(skewed)
