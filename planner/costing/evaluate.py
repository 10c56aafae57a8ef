"""Evaluate strategies: memory per pipeline stage, step time and throughput.

Everything is vectorised over a batch of candidate strategies that share one pipeline layout,
so the search and `validate` run the same code: `validate` is a batch of one. Formulas live in
`cost_models`; this module only places blocks on stages and adds their costs up.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np

from cost_models.communication import ALL_REDUCE_ALGORITHMS
from cost_models.compute import (attended_keys, gemm_flops, memory_bound_time_s,
                                 optimizer_step_bytes_per_param, training_time_s)
from cost_models.enums import AttentionKind, CpComm, ZeroStage
from cost_models.memory import reserve_bytes
from cost_models.offload import cpu_optimizer_s, host_copy_s, offloaded_step_s
from cost_models.pipeline import in_flight_per_chunk, pipeline_time_s, schedule_bubble_s
from cost_models.units import TFLOPS
from planner.core.candidates import (CP_COMM_ORDER, DP_COMM_ORDER, MOE_DISPATCHER_ORDER,
                                     PIPELINE_SCHEDULE_ORDER, RANK_ORDER, RECOMPUTE_ORDER,
                                     Candidates, mask_modules, strategy_modules)
from planner.core.problem import Problem
from planner.costing.block_costs import BlockCost, block_cost, block_model_flops, layer_gemms
from planner.costing.data_parallel import step_end_s
from planner.costing.layout import Layout, framework_layouts, layout_from_layer_counts
from planner.costing.placement import data_parallel_gap, tp_placement
from planner.costing.step_fixed import step_fixed_s, step_overhead_s
from planner.costing.stage_model import (block_times, chain_types,  # noqa: F401 (API)
                                         fp8_params_gathered,
                                         fp8_weight_extra_bytes, gpu_states, host_rates,
                                         rank_states, shards_to_host, stage_model,
                                         moe_overlap_applies, state_floor_bytes,
                                         tp_overlap_applies, type_fp8_params, type_is_layer,
                                         type_params)
from planner.costing.stage_terms import Linear, Occupancy, stage_values, total_values
from planner.costing.uncertainty import step_band
from planner.schemas.model import EmbeddingBlock
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
    expert_forward_s: np.ndarray
    host_wait_s: np.ndarray
    paired_host_wait_s: np.ndarray
    weight_grad_s: np.ndarray

    def take(self, index) -> BlockCosts:
        return BlockCosts(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @classmethod
    def concat(cls, parts: list[BlockCosts]) -> BlockCosts:
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts])
                      for f in fields(cls)})


BLOCK_COST_FIELDS = ("tp", "mb", "sp", "recompute", "rc_modules", "ep", "etp", "cp", "cp_comm",
                     "cp_a2a", "nvls", "dispatcher", "cuda_graphs")
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
    flags = np.stack([points.sp.astype(np.int64), points.recompute, points.cp_comm,
                      points.rc_modules], axis=1)
    for sp, rc, kind, modules in np.unique(flags, axis=0):
        mask = ((points.sp == sp) & (points.recompute == rc) & (points.cp_comm == kind)
                & (points.rc_modules == modules))
        at = points.take(np.flatnonzero(mask))
        place = tp_placement(at.tp, problem.cluster.nvlink_gpus, nvls=at.nvls)
        for u, block in enumerate(types.unique_blocks):
            cost = block_cost(block, training=problem.training, cluster=problem.cluster,
                              framework=problem.framework, tp=at.tp, mb=at.mb,
                              sequence_parallel=bool(sp), recompute=RECOMPUTE_ORDER[rc],
                              place=place, ep=at.ep, etp=at.etp, cp=at.cp,
                              cp_comm=CP_COMM_ORDER[kind], cp_a2a=at.cp_a2a,
                              recompute_modules=mask_modules(modules),
                              dispatcher=at.dispatcher, cuda_graphs=at.cuda_graphs)
            for name, value in zip(BlockCost._fields, cost):
                out[name][mask, u] = value
    return BlockCosts(**{name: table[inverse] for name, table in out.items()})


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
def mfu_flops_per_sequence(model, seq_len: int, attention: AttentionKind) -> float:
    """Model FLOPs per sequence per step as the time model runs them: Megatron-LM's count
    (`step_flops_per_sequence`) less the attention blocks a fused kernel skips, the masked
    half of a causal score matrix and everything outside a sliding window or an attention
    chunk (Dao 2023,
    FlashAttention-2, Sec. 3.1.1; `compute.attended_keys`). The numerator of MFU, so that MFU
    and the step time agree; Megatron-LM's count stays the "model TFLOP/s per GPU".
    `attention` is the run's kernel: an unfused one computes every score."""
    full, _, _ = step_flops_per_sequence(model, seq_len)
    if not attention.fused:
        return full
    skipped = 0.0
    for layer in model.attention_layers():
        g = layer_gemms(layer, seq_len=seq_len)
        kept = float(attended_keys(seq_len, causal=layer.causal, window=layer.sliding_window,
                                   chunk=layer.attention_chunk)) / seq_len
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
    stage_forward_s: np.ndarray
    """Of stage_compute_s, the forward pass (the rest: backward and recomputation)."""
    stage_tp_s: np.ndarray
    stage_ep_s: np.ndarray
    stage_cp_s: np.ndarray
    stage_host_s: np.ndarray
    """The GPU waiting on the host's launches of eager MoE token paths, per micro-batch."""
    stage_pp_s: np.ndarray
    stage_engine_s: np.ndarray
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
    host_wait_s: np.ndarray
    pp_comm_s: np.ndarray
    pipeline_engine_s: np.ndarray
    """The pipeline engine's own time (framework profile), all micro-batches."""
    dp_comm_s: np.ndarray
    bubble_s: np.ndarray
    optimizer_s: np.ndarray
    grad_zero_s: np.ndarray
    """Zeroing the gradient buffer before the first micro-batch (`step_fixed`)."""
    grad_norm_s: np.ndarray
    """The gradient norm, its all-reduce and the clipping after the last micro-batch."""
    loss_reduce_s: np.ndarray
    """The loss all-reduce over the data-parallel ranks after the last micro-batch."""
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

    def take(self, index) -> Evaluation:
        """The rows `index` (what the layout fixes kept)."""
        return Evaluation(**{f.name: (getattr(self, f.name) if f.name in _PER_LAYOUT
                                      else getattr(self, f.name)[index])
                             for f in fields(self)})

    @classmethod
    def concat(cls, parts: list[Evaluation]) -> Evaluation:
        """Evaluations in one layout, row after row."""
        return cls(**{f.name: (getattr(parts[0], f.name) if f.name in _PER_LAYOUT
                               else np.concatenate([getattr(p, f.name) for p in parts]))
                      for f in fields(cls)})


_PER_LAYOUT = frozenset({"stage_layers", "overhead_s"})
"""The `Evaluation` fields the layout fixes (one value, or one per stage, for every row)."""


def evaluate(problem: Problem, layout: Layout, cands: Candidates,
             costs: BlockCosts | None = None) -> Evaluation:
    """Memory and time of every candidate in `cands`, all laid out as `layout`: the terms of
    `stage_model` summed over what each stage holds (`stage_terms`), then the pipeline
    schedule and what the step does after its last micro-batch."""
    model, cluster, training = problem.model, problem.cluster, problem.training
    costs = costs if costs is not None else block_costs(problem, cands)
    p, v = layout.pp, layout.vpp
    types = chain_types(model)
    m = cands.num_micro_batches
    sm = stage_model(problem, cands, costs, pp=p,
                     embedding_copy=Linear(const=embedding_copy_params(model, layout)[None, :]))
    occ = Occupancy.of_bounds(p, v, layout.bounds, types.type_of_position,
                              type_is_layer(model))
    group = cands.schedule_group(problem.framework.micro_batch_groups)
    in_flight = _in_flight(cands, p, v, m, group)
    rows = np.arange(len(cands))

    def values(term) -> np.ndarray:
        return stage_values(term, occ, in_flight) if term is not None else np.zeros((len(cands), p))

    # ---- memory per stage
    to_host = values(sm.activations_to_host)
    pipe_buffers = values(sm.pipe_buffers)
    activations = values(sm.activations) - to_host + values(sm.working) + pipe_buffers
    weights, gradients, optimizer = values(sm.weights), values(sm.gradients), values(sm.optimizer)
    gathered = sm.gathered[:, None]
    buffers = values(sm.buffers)
    allocated = weights + gradients + optimizer + activations + gathered + buffers
    other = gathered + buffers + reserve_bytes(allocated_bytes=allocated,
                                               framework_bytes=sm.framework_bytes,
                                               fragmentation_fraction=sm.fragmentation)
    total = allocated - gathered - buffers + other
    peak_stage = total.argmax(1)

    # ---- time per micro-batch per stage
    fwd, bwd = values(sm.forward), values(sm.backward)
    compute = fwd + bwd + values(sm.recompute)
    tp_comm, ep_comm, cp_comm = values(sm.tp), values(sm.ep), values(sm.cp)
    host_wait = values(sm.host)
    pp_comm, engine = values(sm.pp), values(sm.engine)
    dense, dense_gather = values(sm.dense_params), values(sm.dense_gather)
    experts = expert_gather = None
    if problem.model.is_moe:
        experts, expert_gather = values(sm.expert_params), values(sm.expert_gather)
    dp_per_mb = np.zeros_like(compute)
    for traffic in sm.dp:
        params, gather = (experts, expert_gather) if traffic.experts else (dense, dense_gather)
        dp_per_mb[traffic.rows] += traffic.values(problem, cands, params=params, gather=gather,
                                                  forward=fwd, backward=bwd,
                                                  held=occ.stage_counts)
    offload = total_values(sm.offload, occ, in_flight)
    tau = (compute + tp_comm + ep_comm + cp_comm + host_wait + pp_comm + engine + dp_per_mb
           + offload)
    slowest = tau.argmax(1)
    pipeline = pipeline_time_s(max_stage_s=tau.max(1), sum_stage_s=tau.sum(1),
                               num_micro_batches=m, vpp=v)
    pipeline = pipeline + _schedule_bubble_change(cands, p, v, tau, pipeline - m * tau.max(1),
                                                  forward=fwd,
                                                  weight_grad=values(sm.weight_grad))

    # ---- after the last micro-batch: gradient reduction, optimizer step, host copies
    dp_end, dp_algorithm = _step_end_data_parallel(problem, cands, dense, dense_gather, experts,
                                                   expert_gather, fwd, bwd)
    updated, offloaded = values(sm.updated), values(sm.offloaded)
    per_param = training.state_bytes
    optimizer_s = memory_bound_time_s(
        (updated - offloaded) * optimizer_step_bytes_per_param(
            weight_bytes=per_param.weights, gradient_bytes=per_param.gradients,
            optimizer_bytes=per_param.optimizer),
        hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9, hbm_fraction=cluster.efficiency.hbm_fraction)
    offload_end = _offloaded_step_s(problem, offloaded, optimizer_s)
    fixed = step_fixed_s(problem, cands, gradient_bytes=gradients, updated_params=updated)
    end = (dp_end + optimizer_s + offload_end + fixed.grad_zero_s + fixed.grad_norm_s
           + fixed.loss_reduce_s)
    last = end.argmax(1)

    model_flops, full_extra, selective_extra = step_flops_per_sequence(model, training.seq_len)
    extra = np.select([cands.recompute == 2, cands.recompute == 1],
                      [full_extra, selective_extra], 0.0)
    batch = cands.global_batch.astype(float)
    return Evaluation(
        stage_weights=weights, stage_gradients=gradients,
        stage_optimizer=optimizer, stage_activations=activations, stage_other=other,
        stage_in_flight=in_flight.sum(2) / v, stage_pipe_buffers=pipe_buffers,
        stage_layers=occ.stage_counts[:, occ.is_layer].sum(1),
        stage_compute_s=compute, stage_forward_s=fwd, stage_tp_s=tp_comm, stage_ep_s=ep_comm, stage_cp_s=cp_comm,
        stage_host_s=host_wait, stage_pp_s=pp_comm, stage_engine_s=engine,
        stage_dp_s=dp_per_mb, peak_bytes=total[rows, peak_stage], peak_stage=peak_stage,
        compute_s=m * compute[rows, slowest], tp_comm_s=m * tp_comm[rows, slowest],
        ep_comm_s=m * ep_comm[rows, slowest], cp_comm_s=m * cp_comm[rows, slowest],
        host_wait_s=m * host_wait[rows, slowest], pp_comm_s=m * pp_comm[rows, slowest],
        pipeline_engine_s=m * engine[rows, slowest],
        dp_comm_s=m * dp_per_mb[rows, slowest] + dp_end[rows, last],
        stage_offload_s=offload, offload_s=m * offload[rows, slowest] + offload_end[rows, last],
        host_bytes=(values(sm.host_states) + to_host).max(1),
        bubble_s=pipeline - m * tau[rows, slowest], optimizer_s=optimizer_s[rows, last],
        grad_zero_s=fixed.grad_zero_s[rows, last], grad_norm_s=fixed.grad_norm_s[rows, last],
        loss_reduce_s=fixed.loss_reduce_s[rows, last],
        overhead_s=step_overhead_s(problem),
        step_s=pipeline + end[rows, last] + step_overhead_s(problem),
        slowest_stage=slowest, imbalance=tau.max(1) / tau.mean(1),
        dp_algorithm=dp_algorithm[rows, last],
        model_flops=model_flops * batch, hardware_flops=(model_flops + extra) * batch,
        mfu_flops=mfu_flops_per_sequence(model, training.seq_len, problem.attention) * batch)


def _in_flight(cands: Candidates, p: int, v: int, m, group) -> np.ndarray:
    """(N, p, v) forward passes each stage's chunks hold at the peak, as each candidate's
    pipeline schedule runs them (`pipeline.in_flight_per_chunk`)."""
    out = None
    for index in np.unique(cands.pipeline_schedule):
        held = in_flight_per_chunk(stage=np.arange(p)[None, :, None], pp=p, vpp=v,
                                   num_micro_batches=m[:, None, None],
                                   chunk=np.arange(v)[None, None, :], group=group[:, None, None],
                                   schedule=PIPELINE_SCHEDULE_ORDER[index])
        held = np.broadcast_to(held, (len(cands), p, v))
        rows = (cands.pipeline_schedule == index)[:, None, None]
        out = np.where(rows, held, 0 if out is None else out)
    return out


def _schedule_bubble_change(cands: Candidates, p: int, v: int, tau: np.ndarray,
                            one_f_one_b: np.ndarray, *, forward, weight_grad) -> np.ndarray:
    """(N,) seconds a zero-bubble schedule adds to `pipeline_time_s` (negative: saves): its
    bubble (`pipeline.schedule_bubble_s`) in place of 1F1B's (`one_f_one_b`), from the
    slowest stage's chunk times per micro-batch: the forward, the weight gradients, and the
    rest of its time (input gradients, recomputation, exposed communication) with the
    backward. Both closed forms are for equal stages; the schedule's bubble is scaled by the
    share of 1F1B's equal-stage bubble, (p - 1) tau / v, that unequal stages leave."""
    out = np.zeros(len(cands))
    if p == 1:
        return out
    rows = np.arange(len(cands))
    slowest = tau.argmax(1)
    f = forward[rows, slowest] / v
    w = weight_grad[rows, slowest] / v
    b = tau[rows, slowest] / v - f - w
    filled = one_f_one_b / np.maximum((p - 1) * (f + b + w), 1e-30)
    for index in np.unique(cands.pipeline_schedule):
        if index == 0:
            continue
        bubble = schedule_bubble_s(PIPELINE_SCHEDULE_ORDER[index], pp=p, forward_s=f,
                                   input_grad_s=b, weight_grad_s=w)
        out = np.where(cands.pipeline_schedule == index, filled * bubble - one_f_one_b, out)
    return out


def step_lower_bound_s(problem: Problem, cands: Candidates, costs: BlockCosts) -> np.ndarray:
    """Per candidate, a step time that `evaluate` in no layout goes below: a stage's time per
    micro-batch is its blocks' `block_times`, which add up to the chain's total however the
    layers are split, plus pipeline sends, ZeRO traffic and host copies, none negative; the
    slowest stage takes at least the mean, `pipeline_time_s` rises with both, and what
    follows the last micro-batch takes no less than nothing. The search evaluates only the
    candidates whose bound can reach its best plans (`search.pool.evaluate_promising`)."""
    types = chain_types(problem.model)
    counts = np.bincount(types.type_of_position, minlength=len(types.unique_blocks))
    total = block_times(problem, cands, costs).total @ counts
    pipeline = pipeline_time_s(max_stage_s=total / cands.pp, sum_stage_s=total,
                               num_micro_batches=cands.num_micro_batches, vpp=cands.vpp)
    # A zero-bubble schedule's bubble may be shorter than 1F1B's: bound it by none at all.
    no_bubble = (cands.pp - 1) * total / cands.pp / cands.vpp
    return (pipeline - np.where(cands.pipeline_schedule > 0, no_bubble, 0.0)
            + step_overhead_s(problem))


def _step_end_data_parallel(problem: Problem, cands: Candidates, dense, dense_gather, experts,
                            expert_gather, fwd, bwd):
    """(N, p) seconds of data-parallel traffic after the last micro-batch, and the all-reduce
    algorithm: the dense states over dp x cp, an MoE model's experts over their expert
    data-parallel group where a stage holds experts; from the stages' (N, p) parameters and
    gather bytes."""
    use_server = cands.dp_comm == DP_COMM_ORDER.index(DpComm.PARAMETER_SERVER)
    gap = data_parallel_gap(cands)
    end, algorithm = step_end_s(problem, cands, dp=cands.dp * cands.cp, shard=cands.grad_shard,
                                stride=cands.tp, inner=cands.cp, gap=gap,
                                use_server=use_server, params=dense,
                                gather_bytes=dense_gather, forward_s=fwd, backward_s=bwd)
    if experts is not None:
        moe_end, _ = step_end_s(problem, cands, dp=cands.edp, shard=cands.expert_shard,
                                stride=cands.etp * cands.ep, inner=np.ones_like(cands.ep),
                                gap=gap, use_server=use_server,
                                params=experts, gather_bytes=expert_gather,
                                forward_s=fwd, backward_s=bwd)
        end = end + np.where(experts > 0, moe_end, 0.0)
    return end, algorithm


def _offloaded_step_s(problem: Problem, offloaded: np.ndarray, gpu_step_s: np.ndarray):
    """(N, p) seconds the offloaded optimizer share adds after the GPU's own step: gradients
    down, CPU Adam, weights up, while the GPU updates the rest (HybridDeviceOptimizer.step
    launches the GPU optimizer, then steps the CPU ones)."""
    if not offloaded.any():
        return np.zeros_like(gpu_step_s)
    per_param = problem.training.state_bytes
    link_bytes_per_s, host_memory_bytes_per_s = host_rates(problem)
    profile = problem.framework.offload
    cpu_step = offloaded_step_s(
        host_copy_s(offloaded * per_param.gradients, link_bytes_per_s=link_bytes_per_s),
        cpu_optimizer_s(offloaded, gradient_bytes=per_param.gradients,
                        optimizer_bytes=per_param.optimizer,
                        host_memory_bytes_per_s=host_memory_bytes_per_s),
        host_copy_s(offloaded * per_param.weights, link_bytes_per_s=link_bytes_per_s),
        pipelined=profile is not None and profile.pipelined_step)
    return np.maximum(cpu_step - gpu_step_s, 0.0)


def embedding_copy_params(model, layout: Layout) -> np.ndarray:
    """(p,) TP-sharded parameters of the word-embedding copy a stage keeps when a block on it
    needs the embedding (a tied output layer, an MTP module: `embedding_copy`) and the
    embedding itself lives on another stage; one copy per stage, shared by its blocks."""
    extra = np.zeros(layout.pp)
    embedding_stages = set()
    for k in range(layout.num_chunks):
        stage = layout.stage_of_chunk(k)
        for i in layout.chunk_range(k):
            block = model.blocks[i]
            if isinstance(block, EmbeddingBlock):
                embedding_stages.add(stage)
            extra[stage] = max(extra[stage], getattr(block, "embedding_copy", 0))
    if not embedding_stages:
        return np.zeros(layout.pp)
    extra[sorted(embedding_stages)] = 0.0
    return extra


# --------------------------------------------------------------------------- one strategy

def layout_for(problem: Problem, strategy: Strategy) -> Layout:
    if strategy.layers_per_stage is not None:
        return layout_from_layer_counts(problem.model, strategy.pp, strategy.vpp,
                                        strategy.layers_per_stage)
    return framework_layouts(problem.model, problem.framework, strategy.pp, strategy.vpp)[0]


def report(problem: Problem, layout: Layout, cands: Candidates, ev: Evaluation, i: int,
           *, num_tokens: float | None = None) -> PlanReport:
    """The PlanReport of candidate `i` of an evaluated batch."""
    p = layout.pp
    fw = problem.framework
    layers = [int(x) for x in layout.layers_per_chunk(problem.model)]
    group = int(cands.schedule_group(fw.micro_batch_groups)[i])
    strategy = StrategyOut(
        dp=int(cands.dp[i]), tp=int(cands.tp[i]), pp=p, vpp=layout.vpp,
        microbatch_group=group if layout.vpp > 1 and group != p else None, ep=int(cands.ep[i]),
        etp=int(cands.etp[i]), cp=int(cands.cp[i]), cp_comm=CP_COMM_ORDER[cands.cp_comm[i]],
        cp_a2a=(int(cands.cp_a2a[i]) if CP_COMM_ORDER[cands.cp_comm[i]] is CpComm.A2A_P2P
                else None),
        micro_batch=int(cands.mb[i]), global_batch=int(cands.global_batch[i]),
        sequence_parallel=bool(cands.sp[i]), recompute=RECOMPUTE_ORDER[cands.recompute[i]],
        recompute_modules=strategy_modules(cands.rc_modules[i]),
        zero_stage=ZeroStage(int(cands.zero[i])), dp_shard=int(cands.shard[i]),
        num_micro_batches=float(cands.num_micro_batches[i]),
        overlap_grad_reduce=bool(cands.overlap[i] and fw.overlap_grad_reduce
                                 and (p == 1 or fw.overlap_grad_reduce_with_pipeline)),
        overlap_param_gather=bool(cands.param_gather[i] and fw.overlap_param_gather),
        tp_comm_overlap=bool(tp_overlap_applies(problem, cands)[i]),
        moe_a2a_overlap=bool(moe_overlap_applies(problem, cands)[i]),
        moe_dispatcher=MOE_DISPATCHER_ORDER[cands.dispatcher[i]],
        fp8_param_gather=bool(fp8_params_gathered(problem, cands)[i]),
        optimizer_offload=float(cands.opt_offload[i]), param_offload=bool(cands.param_offload[i]),
        activation_offload_layers=int(cands.act_offload[i]),
        dp_comm=DP_COMM_ORDER[cands.dp_comm[i]],
        layers_per_stage=layers, nvls=bool(cands.nvls[i]),
        rank_order=RANK_ORDER[cands.rank_order[i]],
        pipeline_schedule=PIPELINE_SCHEDULE_ORDER[cands.pipeline_schedule[i]])
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
                          capacity_bytes=capacity, min_free_bytes=problem.min_free_bytes or 0.0,
                          fits=peak <= problem.usable_bytes,
                          host_bytes=float(ev.host_bytes[i]),
                          host_capacity_bytes=problem.cluster.host_bytes_per_gpu)
    stage_times = [StageTime(stage=r, compute_s=float(ev.stage_compute_s[i, r]),
                             forward_s=float(ev.stage_forward_s[i, r]),
                             tp_comm_s=float(ev.stage_tp_s[i, r]),
                             ep_comm_s=float(ev.stage_ep_s[i, r]),
                             cp_comm_s=float(ev.stage_cp_s[i, r]),
                             host_wait_s=float(ev.stage_host_s[i, r]),
                             pp_comm_s=float(ev.stage_pp_s[i, r]),
                             pipeline_engine_s=float(ev.stage_engine_s[i, r]),
                             dp_comm_s=float(ev.stage_dp_s[i, r]),
                             offload_s=float(ev.stage_offload_s[i, r])) for r in range(p)]
    time = TimeReport(
        compute_s=float(ev.compute_s[i]), tp_comm_s=float(ev.tp_comm_s[i]),
        ep_comm_s=float(ev.ep_comm_s[i]), cp_comm_s=float(ev.cp_comm_s[i]),
        host_wait_s=float(ev.host_wait_s[i]), pp_comm_s=float(ev.pp_comm_s[i]),
        pipeline_engine_s=float(ev.pipeline_engine_s[i]),
        dp_comm_s=float(ev.dp_comm_s[i]),
        bubble_s=float(ev.bubble_s[i]), optimizer_s=float(ev.optimizer_s[i]),
        grad_zero_s=float(ev.grad_zero_s[i]), grad_norm_s=float(ev.grad_norm_s[i]),
        loss_reduce_s=float(ev.loss_reduce_s[i]),
        offload_s=float(ev.offload_s[i]), overhead_s=float(ev.overhead_s), stages=stage_times, slowest_stage=int(ev.slowest_stage[i]),
        imbalance=float(ev.imbalance[i]),
        dp_algorithm=ALL_REDUCE_ALGORITHMS[int(ev.dp_algorithm[i])].value)
    step = float(ev.step_s[i])
    time = time.model_copy(update={"step_s_band": step_band(problem, strategy.cp, time.step_s)})
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
    out = report(problem, layout, cands, ev, 0, num_tokens=num_tokens)
    if strategy.cuda_graphs is None:
        return out
    # Priced as its index (none where unset); the report keeps the strategy's own value.
    return out.model_copy(update={"strategy": out.strategy.model_copy(
        update={"cuda_graphs": strategy.cuda_graphs})})

