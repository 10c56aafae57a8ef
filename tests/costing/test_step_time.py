"""Step time of whole strategies, worked by hand on the tiny model.

tiny: L = 4 layers, h = 64, a = 8 heads, V = 512, s = 128, global batch B = 32, bf16 + Adam,
GeLU with f = 4h, tied embeddings, unfused attention (`--attention unfused`: every score a
GEMM, as the papers count them). The small cluster: 100 TFLOP/s bf16 at
a 0.6 GEMM fraction, NVLink 100 GB/s at 0.8 of it (80 GB/s bus), 3 us per hop, 4 GPUs a node.
"""

import pytest

from cost_models.enums import Recompute, ZeroStage
from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem
from planner.schemas.strategy import Strategy
from tests.conftest import SMALL_CLUSTER

L, H, A, V, S, B = 4, 64, 8, 512, 128, 32
PEAK = 100e12 * 0.6
BUS, HOP = 100e9 * 0.8, 3e-6

# Memory-bound kernels vanish at an HBM bandwidth of 1e15 GB/s, so compute is the GEMMs alone.
FAST_HBM = SMALL_CLUSTER.replace("hbm_gb_per_s: 1000", "hbm_gb_per_s: 1000000000000000")


@pytest.fixture
def problem(write, tiny_model):
    def _make(gpus: int, cluster_text: str = FAST_HBM):
        return make_problem(tiny_model, write("cluster.yaml", cluster_text), gpus=gpus,
                            attention="unfused")
    return _make


@pytest.mark.parametrize(("recompute", "flops"), [
    # Korthikanti et al. 2022, Eq. 7 (model FLOPs, no recompute).
    (Recompute.NONE, 72 * B * S * L * H**2 * (1 + S / (6 * H) + V / (12 * L * H))),
    # Narayanan et al. 2021, Eq. 3 (full recompute: a second forward of every layer).
    (Recompute.FULL, 96 * B * S * L * H**2 * (1 + S / (6 * H) + V / (16 * L * H))),
])
@pytest.mark.parametrize("micro_batch", [1, 4, 32])
def test_one_gpu_step_is_the_flops_at_the_gemm_rate(problem, recompute, flops, micro_batch):
    strategy = Strategy(dp=1, tp=1, pp=1, micro_batch=micro_batch, global_batch=B,
                        recompute=recompute)
    report = evaluate_strategy(problem(1), strategy)
    # Less the framework's once-per-step host time (cost_models/step_fixed.step_sync_time_s).
    assert report.time.step_s - report.time.overhead_s == pytest.approx(flops / PEAK, rel=1e-6)
    assert report.time.bubble_s == pytest.approx(0, abs=1e-12)


def test_tensor_parallel_all_reduces_by_hand(problem):
    # tp 2 in one node, 32 micro-batches of 1: per micro-batch, 4 all-reduces per layer (2
    # forward, 2 backward), one after the embedding and one for the output layer's input
    # gradient; each all-reduce of s*b*h bf16 values (16 KiB) on a 2-rank ring: 2 hops and
    # 2 (t - 1) / t = 1 times the message at the bus bandwidth, in NCCL's fastest protocol
    # (tuning.cc: LL 6.6 us + 0.6 us a hop at half the bandwidth; LL128 14 + 1.9, 0.92;
    # Simple 8.4 + the link's hop at the full bandwidth). LL wins at this size.
    strategy = Strategy(dp=1, tp=2, pp=1, micro_batch=1, global_batch=B)
    report = evaluate_strategy(problem(2), strategy)
    size = 2 * S * H
    one = min(6.6e-6 + 2 * 0.6e-6 + size / (0.5 * BUS),
              14e-6 + 2 * 1.9e-6 + size / (0.92 * BUS),
              8.4e-6 + 2 * HOP + size / BUS)
    assert one == 6.6e-6 + 2 * 0.6e-6 + size / (0.5 * BUS)
    assert report.time.tp_comm_s == pytest.approx(B * (4 * L + 2) * one, rel=1e-9)


def test_data_parallel_all_reduce_by_hand(problem):
    # dp 2 in one node, no overlap: one all-reduce of every gradient (fp32 for bf16 training)
    # at the end of the step. Ring, Simple protocol (8.4 us base, tuning.cc): 2 hops + 1 x the
    # bytes; one node has no tree, and the low-latency protocols lose on bandwidth here.
    params = (V * H + S * H                           # word and position embeddings
              + L * (12 * H * H + 13 * H)             # layers (Narayanan et al. 2021, Sec. 5.1)
              + 2 * H)                                # final LayerNorm
    strategy = Strategy(dp=2, tp=1, pp=1, micro_batch=1, global_batch=B,
                        overlap_grad_reduce=False)
    report = evaluate_strategy(problem(2), strategy)
    assert report.time.dp_comm_s == pytest.approx(8.4e-6 + 2 * HOP + 4 * params / BUS, rel=1e-9)
    assert report.time.dp_algorithm == "ring"


def test_optimizer_step_by_hand(problem):
    # Adam in bf16: read the fp32 gradient (4), read and write 12 bytes of fp32 state (24),
    # write the bf16 weight (2) per parameter, at 0.8 of 1000 GB/s. ZeRO-1 over dp 2 halves it.
    params = V * H + S * H + L * (12 * H * H + 13 * H) + 2 * H
    for zero, share in ((ZeroStage.NONE, 1), (ZeroStage.OPTIMIZER_STATES, 2)):
        strategy = Strategy(dp=2, tp=1, pp=1, micro_batch=1, global_batch=B, zero_stage=zero)
        report = evaluate_strategy(problem(2, SMALL_CLUSTER), strategy)
        assert report.time.optimizer_s == pytest.approx(30 * params / share / 800e9, rel=1e-9)


def test_pipeline_step_adds_up_stage_times(problem):
    # 1F1B (Narayanan et al. 2021, Eq. 1 generalised to unequal stages): (m - 1) max_r tau_r +
    # sum_r tau_r, with tau_r a stage's time per micro-batch.
    strategy = Strategy(dp=1, tp=1, pp=4, micro_batch=2, global_batch=B)
    report = evaluate_strategy(problem(4), strategy)
    tau = [st.total_s for st in report.time.stages]
    m = B // 2
    # After the last micro-batch: the optimizer step and the fixed per-step terms
    # (gradient-buffer zeroing, norm and clipping, loss all-reduce; cost_models/step_fixed.py).
    t = report.time
    expected = ((m - 1) * max(tau) + sum(tau) + t.optimizer_s + t.grad_zero_s + t.grad_norm_s
                + t.loss_reduce_s + t.overhead_s)
    assert report.time.step_s == pytest.approx(expected, rel=1e-12)
    assert report.time.bubble_s == pytest.approx(sum(tau) - max(tau), rel=1e-9)


def test_time_to_train_is_steps_times_step_time(problem):
    strategy = Strategy(dp=1, tp=1, pp=1, micro_batch=1, global_batch=B)
    report = evaluate_strategy(problem(1), strategy, num_tokens=1e9)
    steps = 1e9 / (B * S)
    assert report.throughput.time_to_train_s == pytest.approx(steps * report.time.step_s)
    assert report.throughput.gpu_hours == pytest.approx(report.throughput.time_to_train_s / 3600)


def test_full_recompute_keeps_layer_inputs_plus_one_rebuilt_layer(problem):
    # Korthikanti et al. 2022, Sec. 5: with full recomputation a stage keeps each layer's input
    # (2sbh, Table 2) and rebuilds one layer's activations at a time in the backward pass. So
    # against no recomputation, the L = 4 layers of the tiny model save (L - 1) x (one layer's
    # full activations - its input), not L x.
    from cost_models.enums import AttentionKind
    from cost_models.memory import transformer_layer_activation_bytes

    def activations(recompute):
        s = Strategy(dp=1, tp=1, pp=1, micro_batch=1, global_batch=B, recompute=recompute)
        return evaluate_strategy(problem(1), s).memory.stages[0].activations_bytes

    layer = problem(1).model.blocks[1]
    shape = dict(seq_len=S, micro_batch=1, hidden=H, num_heads=A, num_kv_heads=A,
                 head_dim=H // A, ffn_hidden=4 * H, mlp=layer.mlp, attention=AttentionKind.UNFUSED,
                 dropout=layer.dropout, norms_per_layer=layer.norms_per_layer, tp=1,
                 sequence_parallel=False, bytes_per_value=2)
    full_layer = transformer_layer_activation_bytes(**shape, recompute=Recompute.NONE)
    kept = transformer_layer_activation_bytes(**shape, recompute=Recompute.FULL)
    assert kept == 2 * S * H                                  # the layer input, 16-bit
    saved = activations(Recompute.NONE) - activations(Recompute.FULL)
    assert saved == pytest.approx((L - 1) * (full_layer - kept), rel=1e-12)


def test_mfu_counts_attention_as_the_kernel_runs_it():
    # Megatron-LM's model FLOPs count the full s^2 scores; a causal flash kernel computes half
    # of them (FlashAttention-2, Sec. 3.1.1). At 131,072 tokens on Llama 3 8B the attention is
    # most of the work: MFU (as run) and model TFLOP/s (Megatron's formula) must differ by
    # exactly the skipped half, 3 x 2 x 2 s^2 d a / 2 per layer and sequence.
    from cost_models.enums import AttentionKind
    from planner.costing.evaluate import mfu_flops_per_sequence, step_flops_per_sequence
    from planner.inputs.loader import load_model

    model, _ = load_model("llama3-8b")
    s = 131072
    full, _, _ = step_flops_per_sequence(model, s)
    as_run = mfu_flops_per_sequence(model, s, AttentionKind.FLASH)
    # The unfused kernel multiplies the whole score matrix: Megatron's count as it stands.
    assert mfu_flops_per_sequence(model, s, AttentionKind.UNFUSED) == full
    skipped = 32 * 3 * (2 * 2 * s * s * 128 * 32) / 2     # 32 layers, 32 heads of 128
    assert full - as_run == pytest.approx(skipped, rel=1e-12)
    assert (full - as_run) / full == pytest.approx(0.41, abs=0.01)   # 41% of Megatron's count


def test_stage_forward_is_the_forward_share_of_compute():
    """StageTime.forward_s (what --timeline splits a micro-batch by) is the forward pass:
    part of compute_s, about a third of it without recomputation (backward = 2 x forward)."""
    from planner.inputs.loader import resolve_strategy

    problem = make_problem("llama2-7b", "dgx-h100", gpus=16)
    plan = evaluate_strategy(problem, resolve_strategy(Strategy(tp=2, pp=2), problem))
    for stage in plan.time.stages:
        assert 0 < stage.forward_s < stage.compute_s
        assert stage.forward_s / stage.compute_s == pytest.approx(1 / 3, abs=0.05)
