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
from cost_models.enums import AttentionKind, CpComm, Recompute, ZeroStage
from cost_models.memory import reserve_bytes
from cost_models.offload import cpu_optimizer_s, host_copy_s, offloaded_step_s
from cost_models.pipeline import in_flight_per_chunk, pipeline_time_s
from cost_models.units import TFLOPS
from planner.core.problem import Problem
from planner.costing.block_costs import BlockCost, block_cost, block_model_flops, layer_gemms
from planner.costing.data_parallel import step_end_s
from planner.costing.layout import Layout, layout_from_layer_counts, uniform_layout
from planner.costing.placement import tp_placement
from planner.costing.stage_model import (chain_types, fp8_params_gathered,  # noqa: F401 (API)
                                         fp8_weight_extra_bytes, gpu_states, host_rates,
                                         rank_states, shards_to_host, stage_model,
                                         state_floor_bytes, type_fp8_params, type_is_layer,
                                         type_params)
from planner.costing.stage_terms import Linear, Occupancy, stage_values, total_values
from planner.schemas.model import EmbeddingBlock, OutputBlock
from planner.schemas.framework import OverlapDefaults
from planner.schemas.report import (MemoryReport, PlanReport, StageMemory, StageTime,
                                    StrategyOut, ThroughputReport, TimeReport)
from planner.schemas.strategy import DpComm, Strategy

RECOMPUTE_ORDER = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
DP_COMM_ORDER = (DpComm.ALL_REDUCE, DpComm.PARAMETER_SERVER)
CP_COMM_ORDER = tuple(CpComm)


@dataclass
class Candidates:
    """Strategies as parallel integer arrays, one entry per strategy."""

    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    dp: np.ndarray
    mb: np.ndarray
    global_batch: np.ndarray
    sp: np.ndarray
    recompute: np.ndarray
    """Index into RECOMPUTE_ORDER."""
    zero: np.ndarray
    shard: np.ndarray
    """Data-parallel ranks ZeRO shards over (= dp, or less for HSDP)."""
    overlap: np.ndarray
    """Overlap the gradient reduction (as asked; the framework profile gates it)."""
    param_gather: np.ndarray
    """Overlap the parameter all-gather with the next forward."""
    tp_overlap: np.ndarray
    """Overlap tensor-parallel collectives with the GEMMs."""
    dp_comm: np.ndarray
    """Index into DP_COMM_ORDER."""
    num_servers: np.ndarray
    ep: np.ndarray = None  # type: ignore[assignment]
    """Expert-parallel ranks (None: 1 for every candidate)."""
    etp: np.ndarray = None  # type: ignore[assignment]
    """Expert tensor-parallel ranks (None: tp, Megatron-LM's default)."""
    cp: np.ndarray = None  # type: ignore[assignment]
    """Context-parallel ranks sharing each sequence (None: 1 for every candidate)."""
    cp_comm: np.ndarray = None  # type: ignore[assignment]
    """Index into CP_COMM_ORDER (None: p2p)."""
    cp_a2a: np.ndarray = None  # type: ignore[assignment]
    """The all-to-all group of hierarchical CP (a2a+p2p); 1 otherwise (None: 1)."""
    fp8_gather: np.ndarray = None  # type: ignore[assignment]
    """FP8 parameters gathered in FP8 (as asked; precision, recipe, ZeRO and the framework
    gate it). None: False."""
    opt_offload: np.ndarray = None  # type: ignore[assignment]
    """Share of the optimizer states in host memory (None: 0)."""
    param_offload: np.ndarray = None  # type: ignore[assignment]
    """ZeRO-3 weight and gradient shards in host memory (None: False)."""
    act_offload: np.ndarray = None  # type: ignore[assignment]
    """Layers per stage whose saved activations wait in host memory (None: 0)."""

    def __post_init__(self) -> None:
        n = len(self.tp)
        if self.ep is None:
            self.ep = np.ones(n, dtype=int)
        if self.etp is None:
            self.etp = np.asarray(self.tp).copy()
        if self.cp is None:
            self.cp = np.ones(n, dtype=int)
        if self.cp_comm is None:
            self.cp_comm = np.zeros(n, dtype=int)
        if self.cp_a2a is None:
            self.cp_a2a = np.ones(n, dtype=int)
        if self.fp8_gather is None:
            self.fp8_gather = np.zeros(n, dtype=bool)
        if self.opt_offload is None:
            self.opt_offload = np.zeros(n)
        if self.param_offload is None:
            self.param_offload = np.zeros(n, dtype=bool)
        if self.act_offload is None:
            self.act_offload = np.zeros(n, dtype=int)

    @property
    def edp(self) -> np.ndarray:
        """Expert data-parallel ranks, tp x cp x dp / (etp x ep), at least 1 (the expert layers
        fold onto the tp x cp x dp GPUs of a pipeline stage)."""
        return np.maximum(self.tp * self.cp * self.dp // (self.ep * self.etp), 1)

    @property
    def num_gpus(self) -> np.ndarray:
        return self.dp * self.tp * self.cp * self.pp

    @property
    def grad_shard(self) -> np.ndarray:
        """Ranks ZeRO shards the dense model states over: the shard group of every CP rank
        (CP ranks hold the same weights; Megatron-LM's distributed optimizer and torchtitan's
        FSDP shard over dp x cp)."""
        return self.shard * self.cp

    @property
    def expert_shard(self) -> np.ndarray:
        """Expert data-parallel ranks ZeRO shards the experts' states over: all of edp, or
        the same share of it as dp_shard is of dp (HSDP)."""
        return np.maximum(self.edp * self.shard // self.dp, 1)

    def __len__(self) -> int:
        return len(self.tp)

    @property
    def num_micro_batches(self) -> np.ndarray:
        return self.global_batch / (self.dp * self.mb)

    def take(self, index) -> Candidates:
        return Candidates(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @classmethod
    def empty(cls) -> Candidates:
        """No strategies (each field with the type a strategy gives it)."""
        defaults = OverlapDefaults(overlap_grad_reduce=False, overlap_param_gather=False,
                                   tp_comm_overlap=False)
        one = cls.from_strategy(Strategy(dp=1, tp=1, pp=1, global_batch=1), defaults)
        return one.take(np.zeros(0, dtype=np.int64))

    @classmethod
    def concat(cls, parts: list[Candidates]) -> Candidates:
        return cls(**{f.name: np.concatenate([getattr(c, f.name) for c in parts])
                      for f in fields(cls)})

    @classmethod
    def from_strategy(cls, s: Strategy, defaults: OverlapDefaults) -> Candidates:
        """One strategy; overlaps it leaves unsaid take the framework's `defaults`."""
        one = lambda v: np.array([v])  # noqa: E731

        def overlap(name: str) -> bool:
            value = getattr(s, name)
            return getattr(defaults, name) if value is None else value

        return cls(tp=one(s.tp), pp=one(s.pp), vpp=one(s.vpp), dp=one(s.dp),
                   mb=one(s.micro_batch), global_batch=one(s.global_batch),
                   sp=one(s.sequence_parallel), recompute=one(RECOMPUTE_ORDER.index(s.recompute)),
                   zero=one(int(s.zero_stage)), shard=one(s.dp_shard or s.dp),
                   overlap=one(s.overlap_grad_reduce),
                   param_gather=one(overlap("overlap_param_gather")),
                   tp_overlap=one(overlap("tp_comm_overlap")),
                   dp_comm=one(DP_COMM_ORDER.index(s.dp_comm)),
                   num_servers=one(s.num_servers or s.dp), ep=one(s.ep), etp=one(s.expert_tp),
                   cp=one(s.cp), cp_comm=one(CP_COMM_ORDER.index(s.cp_comm)),
                   cp_a2a=one(s.context_a2a),
                   fp8_gather=one(overlap("fp8_param_gather")),
                   opt_offload=one(float(s.optimizer_offload)),
                   param_offload=one(s.param_offload),
                   act_offload=one(s.activation_offload_layers))

    def strategy(self, i: int, layers_per_stage: tuple[int, ...] | None = None) -> Strategy:
        return Strategy(
            dp=int(self.dp[i]), tp=int(self.tp[i]), pp=int(self.pp[i]), vpp=int(self.vpp[i]),
            micro_batch=int(self.mb[i]), global_batch=int(self.global_batch[i]),
            sequence_parallel=bool(self.sp[i]), recompute=RECOMPUTE_ORDER[self.recompute[i]],
            zero_stage=ZeroStage(int(self.zero[i])),
            dp_shard=None if self.shard[i] == self.dp[i] else int(self.shard[i]),
            overlap_grad_reduce=bool(self.overlap[i]),
            overlap_param_gather=bool(self.param_gather[i]),
            tp_comm_overlap=bool(self.tp_overlap[i]),
            dp_comm=DP_COMM_ORDER[self.dp_comm[i]],
            num_servers=int(self.num_servers[i]) if self.dp_comm[i] else None,
            ep=int(self.ep[i]), etp=int(self.etp[i]), cp=int(self.cp[i]),
            cp_comm=CP_COMM_ORDER[self.cp_comm[i]],
            cp_a2a=int(self.cp_a2a[i]) if CP_COMM_ORDER[self.cp_comm[i]] is CpComm.A2A_P2P
            else None,
            fp8_param_gather=bool(self.fp8_gather[i]),
            optimizer_offload=float(self.opt_offload[i]), param_offload=bool(self.param_offload[i]),
            activation_offload_layers=int(self.act_offload[i]),
            layers_per_stage=layers_per_stage)


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


def block_costs(problem: Problem, cands: Candidates) -> BlockCosts:
    """Evaluate every block type once per distinct (tp, micro-batch, SP, recompute) point."""
    types = chain_types(problem.model)
    keys = np.stack([cands.tp, cands.mb, cands.sp.astype(int), cands.recompute, cands.ep,
                     cands.etp, cands.cp, cands.cp_comm, cands.cp_a2a], axis=1)
    # Distinct points through one integer code per row (np.unique over rows sorts them all).
    code = np.zeros(len(cands), dtype=np.int64)
    for column in keys.T:
        values, index = np.unique(column, return_inverse=True)
        code = code * len(values) + index.reshape(-1)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    points, inverse = keys[first], inverse.reshape(-1)
    num_types = len(types.unique_blocks)
    out = {name: np.zeros((len(points), num_types)) for name in BlockCost._fields}
    for sp, rc, kind in np.unique(points[:, [2, 3, 7]], axis=0):
        mask = (points[:, 2] == sp) & (points[:, 3] == rc) & (points[:, 7] == kind)
        tp, mb, ep, etp = points[mask, 0], points[mask, 1], points[mask, 4], points[mask, 5]
        place = tp_placement(tp, problem.cluster.nvlink_gpus)
        for u, block in enumerate(types.unique_blocks):
            cost = block_cost(block, training=problem.training, cluster=problem.cluster,
                              framework=problem.framework, tp=tp, mb=mb,
                              sequence_parallel=bool(sp), recompute=RECOMPUTE_ORDER[rc],
                              place=place, ep=ep, etp=etp, cp=points[mask, 6],
                              cp_comm=CP_COMM_ORDER[kind], cp_a2a=points[mask, 8])
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
                     tied_copy=Linear(const=tied_copy_params(model, layout)[None, :]))
    occ = Occupancy.of_bounds(p, v, layout.bounds, types.type_of_position,
                              type_is_layer(model))
    in_flight = in_flight_per_chunk(stage=np.arange(p)[None, :, None], pp=p, vpp=v,
                                    num_micro_batches=m[:, None, None],
                                    chunk=np.arange(v)[None, None, :])
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
    pp_comm = values(sm.pp)
    dp_per_mb = np.zeros_like(compute)
    for dp_rows, term in sm.dp:
        dp_per_mb[dp_rows] += stage_values(term, occ, in_flight[dp_rows])
    offload = total_values(sm.offload, occ, in_flight)
    tau = compute + tp_comm + ep_comm + cp_comm + pp_comm + dp_per_mb + offload
    slowest = tau.argmax(1)
    pipeline = pipeline_time_s(max_stage_s=tau.max(1), sum_stage_s=tau.sum(1),
                               num_micro_batches=m, vpp=v)

    # ---- after the last micro-batch: gradient reduction, optimizer step, host copies
    dp_end, dp_algorithm = _step_end_data_parallel(problem, cands, sm, values, fwd, bwd)
    updated, offloaded = values(sm.updated), values(sm.offloaded)
    per_param = training.state_bytes
    optimizer_s = memory_bound_time_s(
        (updated - offloaded) * optimizer_step_bytes_per_param(
            weight_bytes=per_param.weights, gradient_bytes=per_param.gradients,
            optimizer_bytes=per_param.optimizer),
        hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9, hbm_fraction=cluster.efficiency.hbm_fraction)
    offload_end = _offloaded_step_s(problem, offloaded, optimizer_s)
    end = dp_end + optimizer_s + offload_end
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
        stage_compute_s=compute, stage_tp_s=tp_comm, stage_ep_s=ep_comm, stage_cp_s=cp_comm,
        stage_pp_s=pp_comm,
        stage_dp_s=dp_per_mb, peak_bytes=total[rows, peak_stage], peak_stage=peak_stage,
        compute_s=m * compute[rows, slowest], tp_comm_s=m * tp_comm[rows, slowest],
        ep_comm_s=m * ep_comm[rows, slowest], cp_comm_s=m * cp_comm[rows, slowest],
        pp_comm_s=m * pp_comm[rows, slowest],
        dp_comm_s=m * dp_per_mb[rows, slowest] + dp_end[rows, last],
        stage_offload_s=offload, offload_s=m * offload[rows, slowest] + offload_end[rows, last],
        host_bytes=(values(sm.host_states) + to_host).max(1),
        bubble_s=pipeline - m * tau[rows, slowest], optimizer_s=optimizer_s[rows, last],
        overhead_s=cluster.efficiency.step_overhead_s,
        step_s=pipeline + end[rows, last] + cluster.efficiency.step_overhead_s,
        slowest_stage=slowest, imbalance=tau.max(1) / tau.mean(1),
        dp_algorithm=dp_algorithm[rows, last],
        model_flops=model_flops * batch, hardware_flops=(model_flops + extra) * batch,
        mfu_flops=mfu_flops_per_sequence(model, training.seq_len) * batch)


def _step_end_data_parallel(problem: Problem, cands: Candidates, sm, values, fwd, bwd):
    """(N, p) seconds of data-parallel traffic after the last micro-batch, and the all-reduce
    algorithm: the dense states over dp x cp, an MoE model's experts over their expert
    data-parallel group where a stage holds experts."""
    use_server = cands.dp_comm == DP_COMM_ORDER.index(DpComm.PARAMETER_SERVER)
    end, algorithm = step_end_s(problem, cands, dp=cands.dp * cands.cp, shard=cands.grad_shard,
                                stride=cands.tp, use_server=use_server,
                                params=values(sm.dense_params),
                                gather_bytes=values(sm.dense_gather), forward_s=fwd,
                                backward_s=bwd)
    if problem.model.is_moe:
        expert_params = values(sm.expert_params)
        moe_end, _ = step_end_s(problem, cands, dp=cands.edp, shard=cands.expert_shard,
                                stride=cands.etp * cands.ep, use_server=use_server,
                                params=expert_params, gather_bytes=values(sm.expert_gather),
                                forward_s=fwd, backward_s=bwd)
        end = end + np.where(expert_params > 0, moe_end, 0.0)
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


def tied_copy_params(model, layout: Layout) -> np.ndarray:
    """(p,) TP-sharded parameters a tied output layer adds on its own stage when the embedding
    it shares lives on another stage (Megatron-LM keeps a copy and all-reduces its gradient)."""
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

