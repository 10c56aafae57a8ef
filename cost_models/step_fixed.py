"""Work a training step does once, outside its micro-batches: zeroing the gradient buffer,
the gradient norm and clipping, and the loss all-reduce. No micro-batch hides them: the first
runs before the first forward pass, the others after the last backward pass.

Refs (each function names the framework file it mirrors):
- NVIDIA/Megatron-LM @d98e8a64: training/training.py train_step calls
  model_chunk.zero_grad_buffer() every iteration; core/distributed/param_and_grad_buffer.py
  _ParamAndGradBuffer.reset() runs grad_data.zero_() on the whole contiguous buffer.
- core/optimizer/clip_grads.py get_grad_norm_fp32 (multi_tensor_l2norm over the local
  grads, then an all-reduce of one fp32 over the grad-stats group) and
  clip_grad_by_total_norm_fp32 (multi_tensor_scale of every local grad, in place).
- training/training.py train_step: the last pipeline stage all-reduces the summed loss and
  token count (two fp32 values) over the data x context-parallel group every step.
Where the other frameworks differ (DeepSpeed and PyTorch set gradients to None instead of
zeroing them) the framework profile says whether a term applies.
"""

from __future__ import annotations

from cost_models.compute import memory_bound_time_s
from cost_models.units import BYTES_FP32

GRAD_CLIP_PASSES = 3
"""HBM passes over the local gradients: multi_tensor_l2norm reads them once, multi_tensor_scale
reads and writes them (clip_grads.py; with Transformer Engine's multi_tensor_scale_tensor the
clip coefficient stays on the GPU, clamped to 1, and the scale always runs; torchtitan's
clip_grad_norm_ likewise multiplies by the clamped coefficient unconditionally)."""

GRAD_NORM_BYTES = BYTES_FP32
"""The squared norm all-reduced: one fp32 (clip_grads.py total_norm, a 1-element tensor)."""

LOSS_REDUCE_BYTES = 2 * BYTES_FP32
"""The loss all-reduce: the summed loss and the token count, two fp32 values
(training.py train_step: `val = torch.vstack(val).sum(dim=0)`, numel 2)."""


def grad_buffer_zero_time_s(buffer_bytes, *, hbm_bytes_per_s: float, hbm_fraction: float):
    """Seconds zeroing a gradient buffer of `buffer_bytes` takes: a memset writes each byte
    once at the achieved HBM bandwidth.

    Ref: Megatron-LM core/distributed/param_and_grad_buffer.py @d98e8a64,
    _ParamAndGradBuffer.reset(): `self.grad_data.zero_()` over the whole buffer (every local
    parameter's gradient, not the ZeRO shard), called each iteration from train_step.
    """
    return memory_bound_time_s(buffer_bytes, hbm_bytes_per_s=hbm_bytes_per_s,
                               hbm_fraction=hbm_fraction)


def grad_clip_time_s(local_grad_bytes, *, norm_all_reduce_s, hbm_bytes_per_s: float,
                     hbm_fraction: float):
    """Seconds of the gradient norm and clipping: `GRAD_CLIP_PASSES` memory-bound passes over
    the gradients this rank updates (its ZeRO shard under a sharded optimizer), plus the
    all-reduce of the norm (`norm_all_reduce_s`, a latency-bound collective of
    `GRAD_NORM_BYTES`).

    Ref: Megatron-LM core/optimizer/clip_grads.py @d98e8a64: get_grad_norm_fp32 and
    clip_grad_by_total_norm_fp32; the distributed optimizer's grads_for_norm are its shard's
    main grads (distrib_optimizer.py), its grad-stats group the whole world.
    """
    return GRAD_CLIP_PASSES * memory_bound_time_s(
        local_grad_bytes, hbm_bytes_per_s=hbm_bytes_per_s,
        hbm_fraction=hbm_fraction) + norm_all_reduce_s


def step_sync_time_s(*, host_s: float, cross_node_s: float, spans_nodes: bool) -> float:
    """Seconds a step waits once, outside its micro-batches, on the host and on the slowest
    rank: `host_s` every step, plus `cross_node_s` where the job spans more than one NVLink
    domain. Both are per framework, fitted on measured small steps (the framework profile
    names the runs); what they hold is not split further.

    Ref: Megatron-LM training/training.py train_step @d98e8a64 synchronises the host with
    the GPUs every step (the gradient norm's `.item()` in core/optimizer/clip_grads.py, the
    NaN check of the loss and gradients unless --no-check-for-nan-in-loss-and-grad), so host
    work between that point and the next step's first kernel (the optimizer's launches, the
    next batch, the training loop's bookkeeping) is not hidden behind GPU work, and the
    step's collectives wait for the slowest rank of the run.
    """
    return host_s + (cross_node_s if spans_nodes else 0.0)
