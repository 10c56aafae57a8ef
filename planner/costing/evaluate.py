"""Evaluate strategies: memory per pipeline stage, step time and throughput.

Everything is vectorised over a batch of candidate strategies that share one pipeline layout,
so the search and `validate` run the same code: `validate` is a batch of one. Formulas live in
`cost_models`; this module only places blocks on stages and adds their costs up.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np

from cost_models import communication as comm
from cost_models.communication import ALL_REDUCE_ALGORITHMS, Group
from cost_models.compute import (attended_keys, gemm_flops, optimizer_step_bytes_per_param,
                                 training_time_s)
from cost_models.enums import (AttentionKind, Collective, CpComm, Precision, ZeroStage)
from cost_models.fp8 import fp8_value_bytes, fp8_weight_bytes_per_param
from cost_models.offload import (activation_copies_s, cpu_optimizer_s, exposed_copy_s,
                                 host_copy_s, offloaded_step_s)
from cost_models.memory import (StateBytes, model_state_bytes, reserve_bytes,
                                zero3_gather_buffer_bytes)
from cost_models.pipeline import in_flight_per_chunk, pipeline_time_s
from cost_models.units import BYTES_16BIT, GiB, TFLOPS, bytes_per_value
from planner.core.candidates import CP_COMM_ORDER, DP_COMM_ORDER, RECOMPUTE_ORDER, Candidates
from planner.costing.block_costs import (BlockCost, block_cost, block_model_flops,
                                         layer_gemms, pipeline_send_bytes)
from planner.costing.placement import strided_placement, tp_placement
from planner.costing.layout import ChainTypes, Layout, layout_from_layer_counts, uniform_layout
from planner.core.problem import Problem
from planner.inputs.loader import fp8_param_gather_allowed
from planner.schemas.model import EmbeddingBlock, OutputBlock, TransformerBlock
from planner.schemas.report import (MemoryReport, PlanReport, StageMemory, StageTime,
                                    StrategyOut, ThroughputReport, TimeReport)
from planner.schemas.strategy import DpComm, Strategy





# --------------------------------------------------------------------------- block costs

@dataclass
class BlockCosts:
    """Per-candidate, per-block-type costs: (N, U) arrays of BlockCost fields."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    recompute_s: np.ndarray
    tp_comm_s: np.ndarray
    activation_bytes: np.ndarray
    output_elements: np.ndarray
    recompute_working_bytes: np.ndarray
    ep_comm_s: np.ndarray
    cp_comm_s: np.ndarray

    def take(self, index) -> BlockCosts:
        return BlockCosts(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


BLOCK_COST_FIELDS = ("tp", "mb", "sp", "recompute", "ep", "etp", "cp", "cp_comm", "cp_a2a")
"""The Candidates fields a block's costs depend on (not the layout, dp or ZeRO)."""


def block_costs(problem: Problem, cands: Candidates) -> BlockCosts:
    """Evaluate every block type once per distinct (tp, micro-batch, SP, recompute) point."""
    types = chain_types(problem.model)
    # Distinct points through one integer code per row (np.unique over rows sorts them all).
    code = np.zeros(len(cands), dtype=np.int64)
    for name in BLOCK_COST_FIELDS:
        values, index = np.unique(getattr(cands, name), return_inverse=True)
        code = code * len(values) + index.reshape(-1)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    points, inverse = cands.take(first), inverse.reshape(-1)
    num_types = len(types.unique_blocks)
    out = {name: np.zeros((len(points), num_types)) for name in BlockCost._fields}
    flags = np.stack([points.sp.astype(np.int64), points.recompute, points.cp_comm], axis=1)
    for sp, rc, kind in np.unique(flags, axis=0):
        mask = (points.sp == sp) & (points.recompute == rc) & (points.cp_comm == kind)
        at = points.take(np.flatnonzero(mask))
        place = tp_placement(at.tp, problem.cluster.nvlink_gpus)
        for u, block in enumerate(types.unique_blocks):
            cost = block_cost(block, training=problem.training, cluster=problem.cluster,
                              framework=problem.framework, tp=at.tp, mb=at.mb,
                              sequence_parallel=bool(sp), recompute=RECOMPUTE_ORDER[rc],
                              place=place, ep=at.ep, etp=at.etp, cp=at.cp,
                              cp_comm=CP_COMM_ORDER[kind], cp_a2a=at.cp_a2a)
            for name, value in zip(BlockCost._fields, cost):
                out[name][mask, u] = value
    return BlockCosts(**{name: table[inverse] for name, table in out.items()})


@lru_cache(maxsize=32)
def chain_types(model) -> ChainTypes:
    return ChainTypes(model)


@lru_cache(maxsize=32)
def type_params(model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per block type: parameters TP shards, those it replicates, and routed-expert ones."""
    types = chain_types(model)
    counts = [b.params() for b in types.unique_blocks]
    return tuple(np.array([getattr(c, name) for c in counts], dtype=float)
                 for name in ("sharded", "replicated", "expert"))


@lru_cache(maxsize=32)
def type_fp8_params(model) -> np.ndarray:
    """Per block type: the TP-sharded parameters of linear layers that run in FP8 under
    precision fp8 (a transformer layer's QKV, output and MLP matrices; its routed experts are
    all FP8 too). Embedding, output layer, norms, router and Evoformer blocks stay bf16."""
    sharded, _, _ = type_params(model)
    return np.array([isinstance(b, TransformerBlock) for b in chain_types(model).unique_blocks],
                    dtype=float) * sharded


def fp8_params_gathered(problem: Problem, cands: Candidates) -> np.ndarray:
    """(N,) bool: the candidate keeps and gathers FP8 parameters (asked and allowed)."""
    return cands.fp8_gather & fp8_param_gather_allowed(problem, cands.zero)


def fp8_weight_extra_bytes(problem: Problem, cands: Candidates) -> np.ndarray:
    """(N,) bytes per FP8 linear parameter a rank keeps beyond the bf16 weight
    `state_bytes_per_param` counts (`fp8.fp8_weight_bytes_per_param` less 2; negative where
    FP8 parameters replace the bf16 weight). ZeRO-3 keeps no persistent copies: each block's
    weights are gathered, quantized and freed."""
    t = problem.training
    if t.precision is not Precision.FP8 or t.fp8_recipe is None:
        return np.zeros(len(cands))
    fp8 = problem.framework.fp8
    kw = dict(transpose_free=problem.cluster.gpu.fp8_transpose_free,
              caches=fp8 is not None and fp8.caches_weights)
    extra = np.where(fp8_params_gathered(problem, cands),
                     fp8_weight_bytes_per_param(t.fp8_recipe, fp8_params=True, **kw),
                     fp8_weight_bytes_per_param(t.fp8_recipe, fp8_params=False, **kw))
    return np.where(cands.zero >= ZeroStage.PARAMETERS, 0.0, extra - BYTES_16BIT)


def state_floor_bytes(problem: Problem, cands: Candidates) -> np.ndarray:
    """(N,) the model states of the average pipeline stage: a floor under the fullest stage of
    any layout (the states of all blocks, after TP, EP and ZeRO sharding, over pp stages)."""
    counts = np.bincount(chain_types(problem.model).type_of_position,
                         minlength=len(chain_types(problem.model).unique_blocks))
    sharded, replicated, expert = (x @ counts for x in type_params(problem.model))
    dense = (sharded / cands.tp + replicated) / cands.pp
    experts = expert / (cands.ep * cands.etp) / cands.pp
    fp8 = (type_fp8_params(problem.model) @ counts / cands.tp) / cands.pp + experts
    return gpu_states(rank_states(problem, cands, dense, experts, fp8), cands).total


def shards_to_host(cands: Candidates) -> np.ndarray:
    """(N,) ZeRO-3 weight and gradient shards kept in host memory (param_offload)."""
    return cands.param_offload & (cands.zero == ZeroStage.PARAMETERS)


def gpu_states(states: StateBytes, cands: Candidates) -> StateBytes:
    """The model states left on the GPU under CPU offload: the optimizer states but the
    offloaded share, no weight or gradient shards where ZeRO-3 keeps them on the host."""
    column = (slice(None),) + (None,) * (np.ndim(states.weights) - 1)
    on_host = shards_to_host(cands)[column]
    return StateBytes(np.where(on_host, 0.0, states.weights),
                      np.where(on_host, 0.0, states.gradients),
                      states.optimizer * (1 - cands.opt_offload[column]))


def rank_states(problem: Problem, cands: Candidates, dense, experts, fp8=0.0) -> StateBytes:
    """Model states a rank holds for `dense` parameters (ZeRO over its shard group) and
    routed-expert ones (ZeRO over the expert data-parallel shard group, Megatron-Core's
    distributed optimizer over the expert-DP group); (N,) or (N, p) arrays of parameters.
    `fp8`: of those, the FP8 linear-layer parameters, whose weights take
    `fp8_weight_extra_bytes` more each."""
    per = problem.training.state_bytes
    column = (slice(None),) + (None,) * (np.ndim(dense) - 1)
    zero = cands.zero[column]
    a = model_state_bytes(num_params=dense, dp=cands.grad_shard.astype(float)[column],
                          zero_stage=zero, per_param=per)
    b = model_state_bytes(num_params=experts, dp=cands.expert_shard.astype(float)[column],
                          zero_stage=zero, per_param=per)
    extra = fp8 * fp8_weight_extra_bytes(problem, cands)[column]
    return StateBytes(a.weights + b.weights + extra, a.gradients + b.gradients,
                      a.optimizer + b.optimizer)


@lru_cache(maxsize=32)
def step_flops_per_sequence(model, seq_len: int) -> tuple[float, float, float]:
    """(model FLOPs, extra FLOPs of full recompute, extra FLOPs of selective recompute) per
    sequence per step. Model FLOPs are 3x the forward GEMMs (Narayanan et al. 2021, Sec. 5.1)."""
    forward = sum(block_model_flops(b, seq_len=seq_len) for b in model.blocks)
    layers = sum(block_model_flops(b, seq_len=seq_len) for b in model.blocks
                 if b.kind in ("transformer", "evoformer"))
    attention = 0.0
    for layer in model.attention_layers():
        g = layer_gemms(layer, seq_len=seq_len)
        attention += gemm_flops(g.scores) + gemm_flops(g.attend)
    return 3 * forward, layers, attention


@lru_cache(maxsize=32)
def mfu_flops_per_sequence(model, seq_len: int) -> float:
    """Model FLOPs per sequence per step as the time model runs them: Megatron-LM's count
    (`step_flops_per_sequence`) less the attention blocks a fused kernel skips, the masked
    half of a causal score matrix and everything outside a sliding window (Dao 2023,
    FlashAttention-2, Sec. 3.1.1; `compute.attended_keys`). The numerator of MFU, so that MFU
    and the step time agree; Megatron-LM's count stays the "model TFLOP/s per GPU"."""
    full, _, _ = step_flops_per_sequence(model, seq_len)
    skipped = 0.0
    for layer in model.attention_layers():
        if layer.attention is not AttentionKind.FLASH:
            continue
        g = layer_gemms(layer, seq_len=seq_len)
        kept = float(attended_keys(seq_len, causal=layer.causal,
                                   window=layer.sliding_window)) / seq_len
        skipped += (gemm_flops(g.scores) + gemm_flops(g.attend)) * (1 - kept)
    return full - 3 * skipped


# --------------------------------------------------------------------------- evaluation

@dataclass
class Evaluation:
    """Costs of a batch of candidates: (N,) arrays and (N, pp) per-stage arrays."""

    stage_weights: np.ndarray
    stage_gradients: np.ndarray
    stage_optimizer: np.ndarray
    stage_activations: np.ndarray
    stage_other: np.ndarray
    stage_in_flight: np.ndarray
    stage_pipe_buffers: np.ndarray
    """Bytes of the pipeline engine's kept stage outputs (framework profile)."""
    stage_layers: np.ndarray
    stage_compute_s: np.ndarray
    stage_tp_s: np.ndarray
    stage_ep_s: np.ndarray
    stage_cp_s: np.ndarray
    stage_pp_s: np.ndarray
    stage_dp_s: np.ndarray
    stage_offload_s: np.ndarray
    """Host copies per micro-batch not hidden by compute (activation and ZeRO-3 offload)."""
    offload_s: np.ndarray
    """Host copies and the CPU optimizer step left on the critical path, per step."""
    host_bytes: np.ndarray
    """Host memory one GPU's offloaded states and activations take (its fullest stage)."""
    peak_bytes: np.ndarray
    peak_stage: np.ndarray
    compute_s: np.ndarray
    tp_comm_s: np.ndarray
    ep_comm_s: np.ndarray
    cp_comm_s: np.ndarray
    pp_comm_s: np.ndarray
    dp_comm_s: np.ndarray
    bubble_s: np.ndarray
    optimizer_s: np.ndarray
    overhead_s: float
    step_s: np.ndarray
    slowest_stage: np.ndarray
    imbalance: np.ndarray
    dp_algorithm: np.ndarray
    """Index into communication.ALL_REDUCE_ALGORITHMS."""
    model_flops: np.ndarray
    hardware_flops: np.ndarray
    mfu_flops: np.ndarray
    """Model FLOPs as the kernels run them (causal and windowed attention skipped)."""

    @property
    def stage_total(self) -> np.ndarray:
        return (self.stage_weights + self.stage_gradients + self.stage_optimizer
                + self.stage_activations + self.stage_other)


def _by_stage(chunk_values: np.ndarray, pp: int, vpp: int) -> np.ndarray:
    """(N, K) per-chunk values -> (N, pp, vpp): chunk k = c * pp + r sits on stage r."""
    n = chunk_values.shape[0]
    return chunk_values.reshape(n, vpp, pp).transpose(0, 2, 1)


def evaluate(problem: Problem, layout: Layout, cands: Candidates,
             costs: BlockCosts | None = None) -> Evaluation:
    """Memory and time of every candidate in `cands`, all laid out as `layout`."""
    model, cluster, training = problem.model, problem.cluster, problem.training
    costs = costs if costs is not None else block_costs(problem, cands)
    p, v = layout.pp, layout.vpp
    types = chain_types(model)
    counts = types.chunk_counts(layout)                                   # (K, U)
    tp = cands.tp.astype(float)
    m = cands.num_micro_batches

    # ---- parameters and model states per stage
    sharded, replicated, expert = type_params(model)

    def per_stage(per_type):
        return (counts @ per_type).reshape(v, p).sum(0)                   # (p,)

    stage_sharded = per_stage(sharded) + _tied_copy(model, layout)
    dense_params = stage_sharded[None, :] / tp[:, None] + per_stage(replicated)[None, :]
    # Routed experts: split over ep x etp.
    expert_params = per_stage(expert)[None, :] / (cands.ep * cands.etp)[:, None]
    params = dense_params + expert_params                                   # (N, p)
    fp8_dense = per_stage(type_fp8_params(model))[None, :] / tp[:, None]
    per_param = training.state_bytes
    shard = cands.grad_shard.astype(float)
    expert_shard = cands.expert_shard.astype(float)
    states = rank_states(problem, cands, dense_params, expert_params, fp8_dense + expert_params)
    # ---- CPU offload (cost_models/offload.py): the optimizer's share of each rank's states,
    # with a pinned copy of their gradients to update from (hybrid_optimizer.py
    # cpu_copy_map_grad); under ZeRO-3 with param_offload the weight and gradient shards too.
    sharded_optimizer = (cands.zero >= ZeroStage.OPTIMIZER_STATES)[:, None]
    updated = (dense_params / np.where(sharded_optimizer, shard[:, None], 1)
               + expert_params / np.where(sharded_optimizer, expert_shard[:, None], 1))
    offloaded = updated * cands.opt_offload[:, None]
    on_host = shards_to_host(cands)[:, None]
    host = (offloaded * (per_param.optimizer + per_param.gradients)
            + np.where(on_host, states.weights + states.gradients, 0.0))
    states = gpu_states(states, cands)
    link_bytes_per_s, host_memory_bytes_per_s = _host_rates(problem)

    # ---- activations: in-flight micro-batches per (stage, chunk) times chunk activations
    chunk_act = _by_stage(costs.activation_bytes @ counts.T, p, v)            # (N, p, v)
    in_flight = in_flight_per_chunk(stage=np.arange(p)[None, :, None], pp=p, vpp=v,
                                    num_micro_batches=m[:, None, None],
                                    chunk=np.arange(v)[None, None, :])
    pipe_buffers = _pipeline_output_bytes(problem, layout, costs, types, in_flight)
    # Activation offload: the saved tensors of `act_offload` repeated layers per stage wait in
    # host memory; per layer, the stage's average.
    is_layer = np.array([b.kind in ("transformer", "evoformer") for b in types.unique_blocks],
                        dtype=float)
    stage_layers = np.array(layout.layers_per_chunk(model)).reshape(v, p).sum(0)      # (p,)
    per_layer = 1.0 / np.maximum(stage_layers, 1)[None, :]
    moved_layers = np.minimum(cands.act_offload[:, None], stage_layers[None, :])
    moves_activations = bool(cands.act_offload.any())     # the search without --offload: none
    if moves_activations:
        layer_act = _by_stage((costs.activation_bytes * is_layer) @ counts.T, p, v)  # (N, p, v)
        act_to_host = moved_layers * (layer_act * in_flight).sum(2) * per_layer
        host = host + act_to_host
    else:
        act_to_host = 0.0
    activations = ((chunk_act * in_flight).sum(2) - act_to_host
                   + _recompute_working_bytes(costs, counts, p, v) + pipe_buffers)

    largest_block = (sharded[None, :] / tp[:, None] + replicated[None, :]
                     + expert[None, :] / (cands.ep * cands.etp)[:, None]).max(1)
    gathered = np.where(cands.zero == ZeroStage.PARAMETERS, zero3_gather_buffer_bytes(
        largest_block_params_per_rank=largest_block, weight_bytes=per_param.weights,
        prefetch_blocks=cluster.reserve.zero3_prefetch_blocks), 0.0)[:, None]
    buffers = (framework_buffer_bytes(problem, cands)[:, None]
               + params * grad_copy_bytes_per_param(problem, cands)[:, None])
    allocated = (states.weights + states.gradients + states.optimizer + activations + gathered
                 + buffers)
    other = gathered + buffers + reserve_bytes(allocated_bytes=allocated,
                                     framework_bytes=cluster.reserve.framework_gib * GiB,
                                     fragmentation_fraction=cluster.reserve.fragmentation_fraction)
    total = allocated - gathered - buffers + other
    peak_stage = total.argmax(1)
    rows = np.arange(len(cands))

    # ---- time per micro-batch per stage
    def stage_sum(table):
        return _by_stage(table @ counts.T, p, v).sum(2)

    fwd, bwd = stage_sum(costs.forward_s), stage_sum(costs.backward_s)
    compute = fwd + bwd + stage_sum(costs.recompute_s)
    tp_comm = stage_sum(tp_exposed_s(problem, cands, costs))
    ep_comm = stage_sum(ep_exposed_s(problem, costs))
    cp_comm = stage_sum(costs.cp_comm_s)
    pp_comm = _pipeline_comm(problem, layout, cands, costs, types)
    stage_blocks = counts.sum(1).reshape(v, p).sum(0)                     # (p,)
    # Host copies per micro-batch: each offloaded layer's saved tensors go down while the
    # next layer runs forward and come back while the one after it runs backward (or in line
    # with the compute, where the framework's copies block: `activation_copies_s`); ZeRO-3
    # shards come up before each of the two gathers and their gradients go down, behind the
    # stage's compute like the gathers they feed.
    offload = np.zeros_like(compute)
    if moves_activations:
        layer_copy = host_copy_s(layer_act.sum(2) * per_layer, link_bytes_per_s=link_bytes_per_s)
        offload = offload + moved_layers * activation_copies_s(
            layer_copy, forward_s=stage_sum(costs.forward_s * is_layer) * per_layer,
            backward_s=stage_sum((costs.backward_s + costs.recompute_s) * is_layer) * per_layer,
            overlapped=problem.framework.offload is not None
            and problem.framework.offload.activation_copies_overlap)
    if on_host.any():
        shard_params = (dense_params / shard[:, None] + expert_params / expert_shard[:, None])
        shard_copy = host_copy_s(shard_params * (2 * per_param.weights + per_param.gradients),
                                 link_bytes_per_s=link_bytes_per_s)
        offload = offload + np.where(on_host, exposed_copy_s(shard_copy, compute), 0.0)
    # Dense gradients are reduced over the dp x cp ranks holding the same weights (CP ranks
    # sit tp apart, DP ranks tp x cp apart: the group is every rank tp apart).
    # FP8 parameters are gathered in FP8 (Megatron-LM --fp8-param-gather: "50% parameter
    # all-gather", megatron/core/transformer/moe/README.md; MXFP8 with its scales).
    gathered_fp8 = fp8_params_gathered(problem, cands)[:, None]
    wire = fp8_value_bytes(training.fp8_recipe) if training.fp8_recipe else per_param.weights
    saved = np.where(gathered_fp8, per_param.weights - wire, 0.0)      # per FP8 parameter
    dense_gather = dense_params * per_param.weights - fp8_dense * saved
    dp_per_mb, dp_end, dp_algorithm = _data_parallel(
        problem, cands, dense_params, per_param, fwd, bwd, stage_blocks,
        dp=cands.dp * cands.cp, shard=cands.grad_shard, stride=cands.tp,
        gather_bytes=dense_gather)
    if model.is_moe:   # expert gradients and weights travel over the expert data-parallel group
        expert_gather = expert_params * (per_param.weights - saved)
        moe_per_mb, moe_end, _ = _data_parallel(
            problem, cands, expert_params, per_param, fwd, bwd, stage_blocks, dp=cands.edp,
            shard=cands.expert_shard, stride=cands.etp * cands.ep, gather_bytes=expert_gather)
        has_experts = expert_params > 0
        dp_per_mb = dp_per_mb + np.where(has_experts, moe_per_mb, 0.0)
        dp_end = dp_end + np.where(has_experts, moe_end, 0.0)
    tau = compute + tp_comm + ep_comm + cp_comm + pp_comm + dp_per_mb + offload
    slowest = tau.argmax(1)
    pipeline = pipeline_time_s(max_stage_s=tau.max(1), sum_stage_s=tau.sum(1),
                               num_micro_batches=m, vpp=v)

    optimizer = (updated - offloaded) \
        * optimizer_step_bytes_per_param(weight_bytes=per_param.weights,
                                         gradient_bytes=per_param.gradients,
                                         optimizer_bytes=per_param.optimizer) \
        / (cluster.gpu.hbm_gb_per_s * 1e9 * cluster.efficiency.hbm_fraction)
    # The offloaded share: gradients down, CPU Adam, weights up; the GPU updates the rest
    # meanwhile (HybridDeviceOptimizer.step launches the GPU optimizer, then steps the CPU ones).
    offload_profile = problem.framework.offload
    cpu_step = 0.0 if not offloaded.any() else offloaded_step_s(
        host_copy_s(offloaded * per_param.gradients, link_bytes_per_s=link_bytes_per_s),
        cpu_optimizer_s(offloaded, gradient_bytes=per_param.gradients,
                        optimizer_bytes=per_param.optimizer,
                        host_memory_bytes_per_s=host_memory_bytes_per_s),
        host_copy_s(offloaded * per_param.weights, link_bytes_per_s=link_bytes_per_s),
        pipelined=offload_profile is not None and offload_profile.pipelined_step)
    offload_end = np.maximum(cpu_step - optimizer, 0.0)
    end = dp_end + optimizer + offload_end
    last = end.argmax(1)

    model_flops, full_extra, selective_extra = step_flops_per_sequence(model, training.seq_len)
    extra = np.select([cands.recompute == 2, cands.recompute == 1],
                      [full_extra, selective_extra], 0.0)
    batch = cands.global_batch.astype(float)
    return Evaluation(
        stage_weights=states.weights, stage_gradients=states.gradients,
        stage_optimizer=states.optimizer, stage_activations=activations, stage_other=other,
        stage_in_flight=in_flight.sum(2) / v, stage_pipe_buffers=pipe_buffers,
        stage_layers=np.array(layout.layers_per_chunk(model)).reshape(v, p).sum(0),
        stage_compute_s=compute, stage_tp_s=tp_comm, stage_ep_s=ep_comm, stage_cp_s=cp_comm,
        stage_pp_s=pp_comm,
        stage_dp_s=dp_per_mb, peak_bytes=total[rows, peak_stage], peak_stage=peak_stage,
        compute_s=m * compute[rows, slowest], tp_comm_s=m * tp_comm[rows, slowest],
        ep_comm_s=m * ep_comm[rows, slowest], cp_comm_s=m * cp_comm[rows, slowest],
        pp_comm_s=m * pp_comm[rows, slowest],
        dp_comm_s=m * dp_per_mb[rows, slowest] + dp_end[rows, last],
        stage_offload_s=offload, offload_s=m * offload[rows, slowest] + offload_end[rows, last],
        host_bytes=host.max(1),
        bubble_s=pipeline - m * tau[rows, slowest], optimizer_s=optimizer[rows, last],
        overhead_s=cluster.efficiency.step_overhead_s,
        step_s=pipeline + end[rows, last] + cluster.efficiency.step_overhead_s,
        slowest_stage=slowest, imbalance=tau.max(1) / tau.mean(1), dp_algorithm=dp_algorithm[rows, last],
        model_flops=model_flops * batch, hardware_flops=(model_flops + extra) * batch,
        mfu_flops=mfu_flops_per_sequence(model, training.seq_len) * batch)


def _host_rates(problem: Problem) -> tuple[float, float]:
    """(host link bytes/s per GPU, host memory bytes/s per GPU); infinite without a host
    block, where the offload rule refuses every offload."""
    cluster = problem.cluster
    if cluster.host is None:
        return np.inf, np.inf
    return cluster.host_link_bytes_per_s, cluster.host_memory_bytes_per_s_per_gpu


def _pipeline_output_bytes(problem: Problem, layout: Layout, costs: BlockCosts,
                           types: ChainTypes, in_flight: np.ndarray) -> np.ndarray:
    """(N, p) bytes of stage outputs the pipeline engine keeps for the backward pass: one per
    in-flight micro-batch of every chunk but the last (its profile's pipeline_keeps_outputs;
    DeepSpeed runtime/pipe/engine.py pipe_buffers['outputs'])."""
    n, p, v = len(costs.forward_s), layout.pp, layout.vpp
    if p == 1 or not problem.framework.pipeline_keeps_outputs:
        return np.zeros((n, p))
    value_bytes = bytes_per_value(problem.training.precision)
    sent = costs.output_elements[:, types.last_type_of_chunk(layout)] * value_bytes   # (N, K)
    sent[:, -1] = 0.0                                       # the last chunk sends nothing
    return (_by_stage(sent, p, v) * in_flight).sum(2)


def _recompute_working_bytes(costs: BlockCosts, counts: np.ndarray, p: int, v: int):
    """(N, p) bytes a stage's largest recomputed block rebuilds during its backward pass: one
    block at a time, on top of what the stage keeps (Korthikanti et al. 2022, Sec. 5)."""
    present = (counts.reshape(v, p, -1).sum(0) > 0)                     # (p, U)
    working = costs.recompute_working_bytes[:, None, :] * present[None, :, :]
    return working.max(2)


def grad_copy_bytes_per_param(problem: Problem, cands: Candidates) -> np.ndarray:
    """(N,) bytes per stored parameter of the framework's second gradient copy (its profile's
    bf16_grad_copy_bytes_per_param): DeepSpeed runs bf16 without ZeRO, and bf16 pipelines with
    its ZeRO-1 equivalent, through BF16_Optimizer (runtime/engine.py, _configure_optimizer)."""
    copy = problem.framework.buffers.bf16_grad_copy_bytes_per_param
    bf16 = problem.training.precision is Precision.BF16
    bf16_optimizer = (cands.zero == 0) | ((cands.zero == 1) & (cands.pp > 1))
    return np.where(bf16 & bf16_optimizer, copy, 0.0)


def framework_buffer_bytes(problem: Problem, cands: Candidates) -> np.ndarray:
    """Bytes of the framework's communication buffers per GPU (its profile's `buffers`).

    Ref: DeepSpeed runtime/zero/config.py: reduce_bucket_size and allgather_bucket_size (5e8
    elements each), the reduce bucket double-buffered with overlap_comm; HCCL_BUFFSIZE (2 x 200
    MB per communicator). Gradients travel in the training dtype.
    """
    b = problem.framework.buffers
    value = bytes_per_value(problem.training.precision)
    data_parallel = cands.dp * cands.cp > 1
    grads = np.where(data_parallel, b.grad_bucket_elements * b.grad_bucket_copies * value, 0.0)
    gather = np.where(data_parallel & ((cands.zero == 1) | (cands.zero == 2)),
                      b.gather_bucket_elements * value, 0.0)
    communicators = ((cands.tp > 1).astype(float) + (cands.pp > 1) + data_parallel
                     + (cands.cp > 1))
    return grads + gather + communicators * b.per_communicator_bytes


def tp_exposed_s(problem: Problem, cands: Candidates, costs: BlockCosts) -> np.ndarray:
    """Seconds of tensor-parallel communication per block left on the critical path (N, U).

    With overlap (Megatron-LM --tp-comm-overlap: Transformer Engine splits each GEMM and its
    all-gather/reduce-scatter into chunks and pipelines them, which needs sequence parallelism;
    torchtitan async TP does the same), the profile's share of a block's collectives hides
    behind that block's compute, still slowing it by the cluster's overlap interference.
    """
    fw = problem.framework
    on = cands.tp_overlap & cands.sp & fw.tp_comm_overlap
    share = np.where(on, fw.tp_comm_overlap_fraction, 0.0)[:, None]
    compute = costs.forward_s + costs.backward_s + costs.recompute_s
    hidden = comm.exposed_time_s(share * costs.tp_comm_s, compute,
                                 interference=problem.cluster.efficiency.overlap_interference)
    return (1 - share) * costs.tp_comm_s + hidden


def ep_exposed_s(problem: Problem, costs: BlockCosts) -> np.ndarray:
    """Seconds of expert-parallel dispatch and combine per block left on the critical path
    (N, U): the framework profile's share overlaps with compute (Megatron-LM
    --overlap-moe-expert-parallel-comm overlaps one micro-batch's all-to-all with another's
    compute), slowing it by the cluster's overlap interference; the rest is exposed."""
    share = problem.framework.ep_comm_overlap_fraction
    compute = costs.forward_s + costs.backward_s + costs.recompute_s
    hidden = comm.exposed_time_s(share * costs.ep_comm_s, compute,
                                 interference=problem.cluster.efficiency.overlap_interference)
    return (1 - share) * costs.ep_comm_s + hidden


def _tied_copy(model, layout: Layout) -> np.ndarray:
    """Sharded parameters a tied output layer adds on its own stage when the embedding it
    shares lives on another stage (Megatron-LM keeps a copy and all-reduces its gradient)."""
    extra = np.zeros(layout.pp)
    embedding_stage = output_stage = None
    for k in range(layout.num_chunks):
        for i in layout.chunk_range(k):
            block = model.blocks[i]
            if isinstance(block, EmbeddingBlock):
                embedding_stage = layout.stage_of_chunk(k)
            if isinstance(block, OutputBlock) and block.tied:
                output_stage, vocab, hidden = layout.stage_of_chunk(k), block.vocab_size, block.hidden
    if output_stage is not None and embedding_stage is not None and output_stage != embedding_stage:
        extra[output_stage] = vocab * hidden
    return extra


def _pipeline_comm(problem: Problem, layout: Layout, cands: Candidates, costs: BlockCosts,
                   types: ChainTypes) -> np.ndarray:
    """Seconds per micro-batch each stage spends in pipeline sends and receives.

    Ref: Narayanan et al. 2021, Sec. 2.2 and 4.1: each micro-batch crosses every chunk
    boundary once forward (activations) and once backward (their gradients); with v chunks
    per stage a stage does this v times. The scatter/gather optimisation sends 1/t per rank
    and all-gathers over NVLink on the receiving side (not needed with sequence parallelism);
    frameworks without it (the profile's pipeline_scatter_gather) send the whole activation.
    The profile's pipeline_micro_batch_overhead_s is added per micro-batch and stage.
    """
    p, v = layout.pp, layout.vpp
    n = len(cands)
    if p == 1:
        return np.zeros((n, 1))
    cluster = problem.cluster
    value_bytes = bytes_per_value(problem.training.precision)
    last_types = types.last_type_of_chunk(layout)
    # A chunk sends its last block's output; the final chunk only receives (use its input).
    senders = np.where(np.arange(layout.num_chunks) < layout.num_chunks - 1,
                       last_types, np.roll(last_types, 1))
    elements = costs.output_elements[:, senders]                              # (N, K)
    tp = cands.tp.astype(float)[:, None]
    scatter_gather = problem.framework.pipeline_scatter_gather
    split = np.where(cands.sp[:, None] | scatter_gather, tp, 1.0)   # SP already splits t ways
    sent = pipeline_send_bytes(elements, tp=split, value_bytes=value_bytes)
    pipe = strided_placement(cands.pp, cands.tp * cands.cp * cands.dp, cluster.nvlink_gpus)
    net = cluster.network
    transfer = comm.send_recv_time_s(sent, across_nodes=(pipe.num_nodes > 1)[:, None], net=net)
    place = tp_placement(cands.tp, cluster.nvlink_gpus)
    tp_group = Group(size=tp, ranks_per_node=place.ranks_per_node[:, None],
                     num_nodes=place.num_nodes[:, None])
    regather = comm.all_gather_time_s(elements * value_bytes, tp_group, net)
    regather = np.where(cands.sp[:, None] | (not scatter_gather), 0.0, regather)
    per_chunk = 2 * (transfer + regather)                                     # forward + backward
    # The engine's own per-micro-batch cost (framework profile), once per stage.
    engine = problem.framework.pipeline_micro_batch_overhead_s
    return _by_stage(per_chunk, p, v).sum(2) + engine


def _dp_collectives(problem: Problem, params: np.ndarray, per_param, stage_blocks, *, dp,
                    shard, stride, num_servers, gather_bytes) -> tuple[np.ndarray, ...]:
    """The data-parallel collectives of `_data_parallel`, (N, p) seconds each: all-reduce and
    its algorithm, the HSDP replica all-reduce, parameter server, ZeRO reduce-scatter and
    all-gather (of `gather_bytes`), ZeRO-3's per-block reduce-scatters and all-gathers."""
    cluster = problem.cluster
    net = cluster.network
    dp_col = dp.astype(float)[:, None]
    place = strided_placement(dp, stride, cluster.nvlink_gpus)
    nodes = place.num_nodes[:, None]
    group = Group(size=dp_col, ranks_per_node=place.ranks_per_node[:, None], num_nodes=nodes)
    sharded = strided_placement(shard, stride, cluster.nvlink_gpus)
    shard_group = Group(size=shard.astype(float)[:, None],
                        ranks_per_node=sharded.ranks_per_node[:, None],
                        num_nodes=sharded.num_nodes[:, None])
    replicas = np.maximum(dp // shard, 1)     # a dp_shard over dp breaks a rule
    across = strided_placement(replicas, stride * shard, cluster.nvlink_gpus)
    replica_group = Group(size=replicas.astype(float)[:, None],
                          ranks_per_node=across.ranks_per_node[:, None],
                          num_nodes=across.num_nodes[:, None])
    grads = params * per_param.gradients
    weights = gather_bytes

    def collective(kind, size_bytes):
        return comm.collective_time_s(kind, size_bytes, shard_group, net)

    allreduce, algorithm = comm.all_reduce(grads, group, net)
    replica_allreduce = comm.all_reduce_time_s(grads / shard_group.size, replica_group, net)
    server = comm.parameter_server_time_s(
        message_bytes=grads, num_workers=dp_col, num_servers=num_servers[:, None],
        worker_bytes_per_s=np.where(nodes > 1, net.nic_bus_bytes_per_s,
                                    net.intra_bus_bytes_per_s),
        server_bytes_per_s=net.nic_bus_bytes_per_s,
        latency_s=np.where(nodes > 1, net.inter_hop_s, net.intra_hop_s))
    reduce_scatter = collective(Collective.REDUCE_SCATTER, grads)
    all_gather = collective(Collective.ALL_GATHER, weights)
    fw = problem.framework
    # ZeRO-3 / FSDP: `fetches_per_block` gathers per block, at the framework's share of the
    # bandwidth (the latency steps are NCCL's own), a share of it hidden by prefetch.
    fetches = stage_blocks[None, :] * fw.zero3.fetches_per_block
    z3_net = replace(net, intra_bus_bytes_per_s=net.intra_bus_bytes_per_s * fw.zero3.collective_efficiency,
                     nic_bus_bytes_per_s=net.nic_bus_bytes_per_s * fw.zero3.collective_efficiency)
    block_reduce_scatter = fetches * comm.reduce_scatter_time_s(grads / fetches, shard_group,
                                                                z3_net)
    block_all_gather = fetches * comm.all_gather_time_s(weights / fetches, shard_group, z3_net)
    shape = grads.shape
    return tuple(np.broadcast_to(t, shape) for t in (
        allreduce, algorithm, replica_allreduce, server, reduce_scatter, all_gather,
        block_reduce_scatter, block_all_gather))


def _data_parallel(problem: Problem, cands: Candidates, params: np.ndarray, per_param,
                   fwd: np.ndarray, bwd: np.ndarray, stage_blocks: np.ndarray, *,
                   dp=None, shard=None, stride=None, gather_bytes=None):
    """Data-parallel communication: (exposed per micro-batch, exposed at step end, algorithm).

    Ref: Rajbhandari et al. 2020, Sec. 7: an all-reduce of the gradients (ZeRO-0); a
    reduce-scatter of gradients and an all-gather of weights, the same volume (ZeRO-1, Megatron's
    distributed optimizer); ZeRO-2 reduce-scatters after every micro-batch because the
    accumulated gradients are sharded; ZeRO-3 also all-gathers the weights before each forward
    and backward, 1.5x the volume. With overlap, gradient traffic hides behind the backward pass
    it follows and weight gathers behind the forward pass they precede; the rest is exposed,
    and the hidden part still slows compute (`communication.exposed_time_s`).
    The parameter-server alternative (Li et al. 2014) replaces the all-reduce for ZeRO-0.
    ZeRO-3 gathers and reduces block by block (Zhao et al. 2023, PyTorch FSDP, Sec. 3.2: one
    FSDP unit per transformer block), so it pays the ring latency once per block.
    HSDP (Zhao et al. 2023, Sec. 3.2.2, hybrid sharding): the ZeRO collectives run inside a
    shard group of dp_shard ranks (consecutive data-parallel ranks, so inside a node when
    tp * dp_shard fits one), and each rank all-reduces its 1/dp_shard of the gradients with its
    peers of the other dp / dp_shard groups once per step.
    The same runs for an MoE model's routed experts over the expert data-parallel group
    (`dp`, `shard` and `stride` given: edp ranks etp x ep apart).
    """
    cluster = problem.cluster
    fw = problem.framework
    dp = cands.dp if dp is None else dp
    shard = cands.shard if shard is None else shard
    stride = cands.tp if stride is None else stride
    dp_col = dp.astype(float)[:, None]
    # The collectives depend on the groups and the parameters a rank holds (set by tp, ep and
    # etp in this layout), not on the micro-batch or recompute: time each distinct row once.
    code = np.zeros(len(cands), dtype=np.int64)
    for column in (dp, shard, stride, cands.num_servers, cands.tp, cands.ep, cands.etp,
                   cands.fp8_gather & (cands.zero > 0)):
        values, index = np.unique(column, return_inverse=True)
        code = code * len(values) + index.reshape(-1)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    gather_bytes = params * per_param.weights if gather_bytes is None else gather_bytes
    times = _dp_collectives(problem, params[first], per_param, stage_blocks, dp=dp[first],
                            shard=shard[first], stride=stride[first],
                            num_servers=cands.num_servers[first],
                            gather_bytes=gather_bytes[first])
    (allreduce, algorithm, replica_allreduce, server, reduce_scatter, all_gather,
     block_reduce_scatter, block_all_gather) = (t[inverse] for t in times)
    zero = cands.zero[:, None]
    # Overlap as asked, where the framework can (DeepSpeed's pipeline engine reduces after the
    # last micro-batch: no overlap once there is a pipeline).
    overlap = (cands.overlap & fw.overlap_grad_reduce
               & ((cands.pp == 1) | fw.overlap_grad_reduce_with_pipeline))[:, None]
    gather_overlap = (cands.param_gather & fw.overlap_param_gather)[:, None]
    use_server = (cands.dp_comm == DP_COMM_ORDER.index(DpComm.PARAMETER_SERVER))[:, None]

    grad_end = np.select([zero == 0, zero == 1], [np.where(use_server, server, allreduce),
                                                  reduce_scatter], 0.0)
    grad_end = grad_end + np.where(zero >= 1, replica_allreduce, 0.0)   # HSDP; 0 without
    gather_end = np.where((zero == 1) | (zero == 2), all_gather, 0.0)
    k = cluster.efficiency.overlap_interference

    def hidden_behind(comm_s, compute_s, share=1.0):
        return (1 - share) * comm_s + comm.exposed_time_s(share * comm_s, compute_s,
                                                          interference=k)

    end = (np.where(overlap, hidden_behind(grad_end, bwd), grad_end)
           + np.where(gather_overlap, hidden_behind(gather_end, fwd), gather_end))
    per_mb_zero2 = np.where(overlap, hidden_behind(reduce_scatter, bwd), reduce_scatter)
    z3 = fw.zero3.overlap_fraction
    per_mb_zero3 = np.where(overlap, hidden_behind(block_all_gather, fwd, z3)
                            + hidden_behind(block_all_gather + block_reduce_scatter, bwd, z3),
                            2 * block_all_gather + block_reduce_scatter)
    per_mb = np.select([zero == 2, zero == 3], [per_mb_zero2, per_mb_zero3], 0.0)
    single = dp_col <= 1
    # The algorithm of the step-end all-reduce (ZeRO-0); ring otherwise.
    algorithm = np.where(~use_server & (zero == 0), algorithm, 0)
    return np.where(single, 0.0, per_mb), np.where(single, 0.0, end), algorithm


# --------------------------------------------------------------------------- one strategy

def layout_for(problem: Problem, strategy: Strategy) -> Layout:
    if strategy.layers_per_stage is not None:
        return layout_from_layer_counts(problem.model, strategy.pp, strategy.vpp,
                                        strategy.layers_per_stage)
    return uniform_layout(problem.model, strategy.pp, strategy.vpp)


def report(problem: Problem, layout: Layout, cands: Candidates, ev: Evaluation, i: int,
           *, num_tokens: float | None = None) -> PlanReport:
    """The PlanReport of candidate `i` of an evaluated batch."""
    p = layout.pp
    fw = problem.framework
    layers = [int(x) for x in layout.layers_per_chunk(problem.model)]
    strategy = StrategyOut(
        dp=int(cands.dp[i]), tp=int(cands.tp[i]), pp=p, vpp=layout.vpp, ep=int(cands.ep[i]),
        etp=int(cands.etp[i]), cp=int(cands.cp[i]), cp_comm=CP_COMM_ORDER[cands.cp_comm[i]],
        cp_a2a=(int(cands.cp_a2a[i]) if CP_COMM_ORDER[cands.cp_comm[i]] is CpComm.A2A_P2P
                else None),
        micro_batch=int(cands.mb[i]), global_batch=int(cands.global_batch[i]),
        sequence_parallel=bool(cands.sp[i]), recompute=RECOMPUTE_ORDER[cands.recompute[i]],
        zero_stage=ZeroStage(int(cands.zero[i])), dp_shard=int(cands.shard[i]),
        num_micro_batches=float(cands.num_micro_batches[i]),
        overlap_grad_reduce=bool(cands.overlap[i] and fw.overlap_grad_reduce
                                 and (p == 1 or fw.overlap_grad_reduce_with_pipeline)),
        overlap_param_gather=bool(cands.param_gather[i] and fw.overlap_param_gather),
        tp_comm_overlap=bool(cands.tp_overlap[i] and cands.sp[i] and fw.tp_comm_overlap),
        fp8_param_gather=bool(fp8_params_gathered(problem, cands)[i]),
        optimizer_offload=float(cands.opt_offload[i]), param_offload=bool(cands.param_offload[i]),
        activation_offload_layers=int(cands.act_offload[i]),
        dp_comm=DP_COMM_ORDER[cands.dp_comm[i]],
        layers_per_stage=layers)
    stages = [StageMemory(stage=r, weights_bytes=float(ev.stage_weights[i, r]),
                          gradients_bytes=float(ev.stage_gradients[i, r]),
                          optimizer_bytes=float(ev.stage_optimizer[i, r]),
                          activations_bytes=float(ev.stage_activations[i, r]),
                          other_bytes=float(ev.stage_other[i, r]),
                          in_flight_micro_batches=float(ev.stage_in_flight[i, r]),
                          num_layers=int(ev.stage_layers[r]))
              for r in range(p)]
    capacity = float(problem.cluster.capacity_bytes)
    peak = float(ev.peak_bytes[i])
    memory = MemoryReport(stages=stages, peak_bytes=peak, peak_stage=int(ev.peak_stage[i]),
                          capacity_bytes=capacity, min_free_bytes=problem.min_free_bytes,
                          fits=peak <= problem.usable_bytes,
                          host_bytes=float(ev.host_bytes[i]),
                          host_capacity_bytes=problem.cluster.host_bytes_per_gpu)
    stage_times = [StageTime(stage=r, compute_s=float(ev.stage_compute_s[i, r]),
                             tp_comm_s=float(ev.stage_tp_s[i, r]),
                             ep_comm_s=float(ev.stage_ep_s[i, r]),
                             cp_comm_s=float(ev.stage_cp_s[i, r]),
                             pp_comm_s=float(ev.stage_pp_s[i, r]),
                             dp_comm_s=float(ev.stage_dp_s[i, r]),
                             offload_s=float(ev.stage_offload_s[i, r])) for r in range(p)]
    time = TimeReport(
        compute_s=float(ev.compute_s[i]), tp_comm_s=float(ev.tp_comm_s[i]),
        ep_comm_s=float(ev.ep_comm_s[i]), cp_comm_s=float(ev.cp_comm_s[i]),
        pp_comm_s=float(ev.pp_comm_s[i]), dp_comm_s=float(ev.dp_comm_s[i]),
        bubble_s=float(ev.bubble_s[i]), optimizer_s=float(ev.optimizer_s[i]),
        offload_s=float(ev.offload_s[i]), overhead_s=float(ev.overhead_s), stages=stage_times, slowest_stage=int(ev.slowest_stage[i]),
        imbalance=float(ev.imbalance[i]),
        dp_algorithm=ALL_REDUCE_ALGORITHMS[int(ev.dp_algorithm[i])].value)
    step = float(ev.step_s[i])
    num_gpus = int(cands.num_gpus[i])
    peak_flops = problem.cluster.gpu.peak_flops(problem.training.precision)
    model_tflops = float(ev.model_flops[i]) / (step * num_gpus) / TFLOPS
    tokens_per_step = float(cands.global_batch[i]) * problem.training.seq_len
    time_to_train = gpu_hours = None
    if num_tokens is not None:
        time_to_train = training_time_s(num_tokens=num_tokens, tokens_per_step=tokens_per_step,
                                        step_s=step)
        gpu_hours = time_to_train * num_gpus / 3600
    throughput = ThroughputReport(
        tokens_per_s=tokens_per_step / step, model_tflops_per_gpu=model_tflops,
        hardware_tflops_per_gpu=float(ev.hardware_flops[i]) / (step * num_gpus) / TFLOPS,
        mfu=float(ev.mfu_flops[i]) / (step * num_gpus) / peak_flops, time_to_train_s=time_to_train,
        gpu_hours=gpu_hours)
    return PlanReport(strategy=strategy, memory=memory, time=time, throughput=throughput)


def evaluate_strategy(problem: Problem, strategy: Strategy, *,
                      num_tokens: float | None = None) -> PlanReport:
    """Memory, time and throughput of one resolved strategy."""
    layout = layout_for(problem, strategy)
    cands = Candidates.from_strategy(strategy, problem.framework.defaults)
    ev = evaluate(problem, layout, cands)
    return report(problem, layout, cands, ev, 0, num_tokens=num_tokens)

