"""Bubbles and held activations of the pipeline schedules against their published forms."""

import numpy as np
import pytest

from cost_models.enums import PipelineSchedule
from cost_models.pipeline import in_flight_chunk_micro_batches, schedule_bubble_s

ZB = PipelineSchedule.ZERO_BUBBLE


@pytest.mark.parametrize(("pp", "f", "b", "w"), [(8, 1.0, 1.0, 1.0), (4, 2.0, 3.0, 1.0),
                                                 (16, 1.0, 1.5, 0.75)])
def test_qi_2024_table_2_one_f_one_b_and_zb_h1(pp, f, b, w):
    # Qi et al. 2024 (arXiv:2401.10241) Table 2, B the input gradient:
    # 1F1B (p-1)(T_F+T_B+T_W), ZB-H1 (p-1)(T_F+T_B-T_W).
    kw = dict(pp=pp, forward_s=f, input_grad_s=b, weight_grad_s=w)
    assert schedule_bubble_s(PipelineSchedule.ONE_F_ONE_B, **kw) == (pp - 1) * (f + b + w)
    assert schedule_bubble_s(ZB, **kw) == (pp - 1) * (f + b - w)


def test_sail_sg_bubble_rates_at_equal_times():
    # sail-sg/zero-bubble-pipeline-parallelism README, T_F = T_B = T_W: bubble rate (p-1)/m
    # for 1F1B and (p-1)/3m for ZB1P, of a rank's work m (T_F + T_B + T_W).
    p, m, t = 8, 24, 1.0
    work = m * 3 * t
    kw = dict(pp=p, forward_s=t, input_grad_s=t, weight_grad_s=t)
    assert schedule_bubble_s(PipelineSchedule.ONE_F_ONE_B, **kw) / work == pytest.approx(
        (p - 1) / m)
    assert schedule_bubble_s(ZB, **kw) / work == pytest.approx((p - 1) / (3 * m))


def test_deepseek_v3_table_2_zb1p_with_the_whole_backward():
    # arXiv:2412.19437 Table 2: ZB1P (PP-1)(F+B-2W), B the whole backward (input + weight).
    pp, f, whole, w = 16, 1.0, 3.0, 1.0
    assert schedule_bubble_s(ZB, pp=pp, forward_s=f, input_grad_s=whole - w,
                             weight_grad_s=w) == (pp - 1) * (f + whole - 2 * w)


def test_dualpipe_readme_dualpipev_bubble():
    # deepseek-ai/DualPipe README: DualPipeV (PP/2-1)(F&B+B-3W) on PP/2 devices, B the whole
    # backward; torch runs F&B as F then B (no registered overlap): F&B = F + B.
    devices, f, whole, w = 8, 1.0, 2.0, 1.0
    stages = 2 * devices
    published = (stages / 2 - 1) * ((f + whole) + whole - 3 * w)
    assert schedule_bubble_s(PipelineSchedule.DUALPIPEV, pp=devices, forward_s=f,
                             input_grad_s=whole - w, weight_grad_s=w) == published == 14


def test_zero_bubble_never_below_the_start_up_forwards():
    # A weight gradient longer than the forward cannot make the bubble shorter than the
    # p - 1 forwards the last rank waits for.
    assert schedule_bubble_s(ZB, pp=5, forward_s=1.0, input_grad_s=1.0,
                             weight_grad_s=3.0) == 4 * 1.0


def test_held_activations_per_schedule():
    p, m = 8, 32
    ranks = np.arange(p)
    # 1F1B: p - r (Narayanan et al. 2021); ZB-H1: p on every rank (Qi et al. Sec. 2.3,
    # (p-i+1) M_B + (i-1) M_W counted whole).
    assert list(in_flight_chunk_micro_batches(stage=ranks, pp=p, vpp=1,
                                              num_micro_batches=m)) == list(p - ranks)
    assert set(in_flight_chunk_micro_batches(stage=ranks, pp=p, vpp=1, num_micro_batches=m,
                                             schedule=ZB)) == {p}
    # DualPipe README: activation per device PP + 1 of PP = 2 p chunks; ZB-V as 1F1B's first
    # rank, 2 p chunk passes.
    assert set(in_flight_chunk_micro_batches(stage=ranks, pp=p, vpp=2, num_micro_batches=m,
                                             schedule=PipelineSchedule.DUALPIPEV)) == {2 * p + 1}
    assert set(in_flight_chunk_micro_batches(stage=ranks, pp=p, vpp=2, num_micro_batches=m,
                                             schedule=PipelineSchedule.ZBV)) == {2 * p}
    # Never more than the step's m v forwards.
    assert set(in_flight_chunk_micro_batches(stage=ranks, pp=p, vpp=2, num_micro_batches=3,
                                             schedule=PipelineSchedule.ZBV)) == {6}
