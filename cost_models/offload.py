"""CPU offload: model states and activations kept in host memory, moved over the host link.

Optimizer offload (Megatron-LM --optimizer-cpu-offload, HybridDeviceOptimizer; DeepSpeed
ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840): a share of each rank's optimizer states (fp32
master weights and Adam's moments) lives in host memory and the CPU updates it. Every step the
gradients of that share go to the host (device to host, D2H), the CPU runs Adam over them in
host memory, and the updated weights come back (H2D). Activation offload (Megatron-LM
--cpu-offloading-num-layers through Transformer Engine's CPU offload; DeepSpeed
activation_checkpointing.cpu_checkpointing): the tensors a layer saves for its backward pass go
to the host during the forward pass and come back before the layer's backward pass: on a side
stream while neighbouring layers compute (Transformer Engine), or in line with the compute
(DeepSpeed), as the framework profile's `offload.activation_copies_overlap` says.

Bandwidths are achieved bytes per second: the host link per GPU (PCIe or NVLink-C2C) and the
host memory bandwidth each GPU's CPU optimizer gets (the node's DRAM bandwidth shared by its
GPUs' processes, which step at the same time).
"""

from __future__ import annotations

import numpy as np

from cost_models.compute import optimizer_step_bytes_per_param


def host_copy_s(num_bytes, *, link_bytes_per_s):
    """Seconds to copy `num_bytes` between one GPU and host memory in one direction (pinned
    host memory, a DMA engine per direction, so D2H and H2D run at once). Linear in the
    bytes: the layout balancer passes its per-stage sums."""
    return num_bytes * (1.0 / link_bytes_per_s)


def cpu_optimizer_s(num_params, *, gradient_bytes: float, optimizer_bytes: float,
                    host_memory_bytes_per_s):
    """Seconds the CPU takes to update `num_params` parameters in host memory.

    Adam over fp32 states is memory-bound on a CPU as on a GPU (a few FLOPs per 28 bytes):
    read the gradient, read and write every optimizer state, as `optimizer_step_bytes_per_param`
    with no working weights written (the H2D copy writes those). DeepSpeed's CPU-Adam
    (csrc/adam/cpu_adam_impl.cpp, AVX-512 over the fp32 param, grad, exp_avg, exp_avg_sq) and
    torch.optim.AdamW(fused=True) on CPU, which Megatron-LM's HybridDeviceOptimizer uses, do
    this in one pass.
    """
    per_param = optimizer_step_bytes_per_param(weight_bytes=0.0, gradient_bytes=gradient_bytes,
                                               optimizer_bytes=optimizer_bytes)
    return np.asarray(num_params, dtype=float) * per_param / host_memory_bytes_per_s


def offloaded_step_s(d2h_s, cpu_s, h2d_s, *, pipelined: bool):
    """Seconds of the offloaded optimizer step: gradients down, CPU update, weights up.

    Pipelined (Megatron-LM --overlap-cpu-optimizer-d2h-h2d: one CPU optimizer per parameter,
    each starting when its own gradients have arrived, weights copied back on a separate
    stream; megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py) the three stages run
    at once over many parameters and the slowest one sets the time; otherwise they add up.
    """
    if pipelined:
        return np.maximum(np.maximum(d2h_s, cpu_s), h2d_s)
    return d2h_s + cpu_s + h2d_s


def exposed_copy_pieces(copy_s, compute_s) -> tuple:
    """The two linear pieces whose larger is the seconds of a host copy left on the critical
    path when it overlaps `compute_s` of compute on another stream (Transformer Engine's CPU
    offload copies a layer's saved tensors while the next layer runs forward, and brings them
    back while the layer after it runs backward): what the compute does not cover, or none.

    Ref: Transformer Engine transformer_engine/pytorch/cpu_offload.py (copies on a side
    stream).
    """
    return copy_s - compute_s, 0.0 * copy_s


def exposed_copy_s(copy_s, compute_s):
    """Seconds of a host copy left on the critical path (`exposed_copy_pieces`)."""
    return np.maximum(*exposed_copy_pieces(np.asarray(copy_s, dtype=float), compute_s))


def activation_copies_pieces(copy_s, *, forward_s, backward_s, overlapped: bool) -> tuple:
    """Groups of linear pieces: the seconds one offloaded layer's activation copies add to a
    micro-batch are the sum over groups of each group's largest piece (`activation_copies_s`).
    Linear in the copy and the compute, so the layout balancer can pass its per-stage sums.

    Ref: as `activation_copies_s`.
    """
    if not overlapped:
        return ((2 * copy_s,),)
    return (exposed_copy_pieces(copy_s, forward_s), exposed_copy_pieces(copy_s, backward_s))


def activation_copies_s(copy_s, *, forward_s, backward_s, overlapped: bool):
    """Seconds one offloaded layer's activation copies add to a micro-batch: its saved tensors
    down during the forward pass, back up before its backward pass (`copy_s` each way).

    Overlapped (Transformer Engine's CPU offload, which Megatron-LM --cpu-offloading-num-layers
    runs: transformer_engine/pytorch/cpu_offload.py copies on a side stream), each copy hides
    behind the next layer's `forward_s` or `backward_s` (`exposed_copy_s`). Blocking (DeepSpeed
    activation_checkpointing.cpu_checkpointing: CheckpointFunction.forward copies the
    checkpointed inputs with copy_to_device(..., cpu) on the compute stream, and backward moves
    them back with move_to_device before it recomputes; runtime/activation_checkpointing/
    checkpointing.py), both copies are on the critical path in full.
    """
    groups = activation_copies_pieces(np.asarray(copy_s, dtype=float), forward_s=forward_s,
                                      backward_s=backward_s, overlapped=overlapped)
    total = 0.0
    for group in groups:
        largest = group[0]
        for piece in group[1:]:
            largest = np.maximum(largest, piece)
        total = total + largest
    return total
