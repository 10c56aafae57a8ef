"""Outputs: memory breakdowns, step times, throughput, violations and whole plans.

`--json` is `model_dump_json` of these models, so every key is a field here."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, computed_field

from cost_models.enums import (CpComm, CudaGraphs, MoeDispatcher, PipelineSchedule,
                               RankOrder, Recompute, RecomputeModule, ZeroStage)
from planner.schemas.strategy import DpComm

OUTPUT_CONFIG = ConfigDict(frozen=True, use_attribute_docstrings=True)
"""Every output model's: frozen, each field's docstring its JSON Schema description."""


class StrategyOut(BaseModel):
    """The strategy of a plan, with every degree resolved."""

    model_config = OUTPUT_CONFIG
    dp: int
    tp: int
    pp: int
    vpp: int
    microbatch_group: int | None = None
    """With vpp > 1, the micro-batches each model chunk runs in a row where that is not pp
    (Megatron-LM --microbatch-group-size-per-virtual-pipeline-stage); None: pp."""
    ep: int = 1
    """Expert-parallel ranks (1 for a dense model)."""
    etp: int = 1
    """Expert tensor-parallel ranks."""
    cp: int = 1
    """Context-parallel ranks sharing each sequence."""
    cp_comm: CpComm = CpComm.P2P
    """How CP ranks exchange keys and values (meaningful with cp > 1)."""
    cp_a2a: int | None = None
    """The all-to-all group of hierarchical CP (cp_comm a2a+p2p)."""
    micro_batch: int
    global_batch: int
    sequence_parallel: bool
    recompute: Recompute
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    """With recompute selective, what it re-runs (None: core_attn, the default)."""
    zero_stage: ZeroStage
    dp_shard: int
    """Data-parallel ranks ZeRO shards over (dp: all of them; less: HSDP)."""
    num_micro_batches: float
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    tp_comm_overlap: bool
    """The overlaps as run: on only where the strategy asks and the framework has them."""
    moe_a2a_overlap: bool = False
    """Expert all-to-all hidden behind another micro-batch's compute, as run."""
    moe_dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL
    """The MoE token dispatcher priced (`MoeDispatcher`)."""
    fp8_param_gather: bool = False
    """FP8 parameters gathered in FP8, as run (precision fp8 only)."""
    optimizer_offload: float = 0.0
    """Share of the optimizer states in host memory, updated by the CPU."""
    param_offload: bool = False
    """ZeRO-3 weight and gradient shards in host memory."""
    activation_offload_layers: int = 0
    """Layers per stage whose saved activations wait in host memory."""
    dp_comm: DpComm
    layers_per_stage: list[int]
    """Repeated layers on each pipeline chunk (pp * vpp entries, pipeline order)."""
    nvls: bool = True
    """NCCL may reduce inside the NVSwitch (NCCL_NVLS_ENABLE not 0)."""
    cuda_graphs: CudaGraphs | None = None
    """What the run captures in CUDA graphs (None: the framework's default)."""
    rank_order: RankOrder = RankOrder.TP_CP_EP_DP_PP
    """The rank order the process groups are built in."""
    pipeline_schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    """The pipeline schedule priced (1f1b: interleaved with vpp > 1)."""


class StageMemory(BaseModel):
    """Bytes one GPU of one pipeline stage holds at its peak."""

    model_config = OUTPUT_CONFIG
    stage: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float
    """Framework reserve, allocator fragmentation and ZeRO-3 gathered weights."""
    in_flight_micro_batches: float
    """Micro-batches (chunk passes, interleaved) whose activations the stage holds at its peak."""
    num_layers: int
    """Repeated layers (transformer or evoformer blocks) on this stage."""

    @computed_field
    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.other_bytes)


class MemoryReport(BaseModel):
    model_config = OUTPUT_CONFIG
    stages: list[StageMemory]
    peak_bytes: float
    peak_stage: int
    capacity_bytes: float
    min_free_bytes: float = 0.0
    """Memory kept free on every GPU (--min-free): the plan fits when its peak leaves this."""
    fits: bool
    host_bytes: float = 0.0
    """Host memory one GPU's offloaded states and activations take (CPU offload)."""
    host_capacity_bytes: float | None = None
    """Host memory per GPU: the node's host memory over its GPUs (None: not described)."""

    @computed_field
    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.peak_bytes


class StageTime(BaseModel):
    """Seconds one micro-batch spends on one pipeline stage (forward + backward)."""

    model_config = OUTPUT_CONFIG
    stage: int
    compute_s: float
    forward_s: float = 0.0
    """Of compute_s, the forward pass; the rest is the backward pass and any recomputation
    (what `planner plan --timeline` splits each micro-batch's work by)."""
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    """Data-parallel traffic per micro-batch not hidden by compute (ZeRO-2/3)."""
    ep_comm_s: float = 0.0
    """Expert-parallel token dispatch and combine not hidden by compute."""
    cp_comm_s: float = 0.0
    """Context-parallel K/V exchange not hidden by attention."""
    host_wait_s: float = 0.0
    """The GPU waiting for the host to launch eager MoE token paths."""
    pipeline_engine_s: float = 0.0
    """The pipeline engine's own time beyond compute and transfers (fitted, framework
    profile's pipeline_layer_overhead_s)."""
    offload_s: float = 0.0
    """Host copies (offloaded activations, ZeRO-3 shards) not hidden by compute."""

    @computed_field
    @property
    def total_s(self) -> float:
        return (self.compute_s + self.tp_comm_s + self.ep_comm_s + self.cp_comm_s
                + self.host_wait_s + self.pp_comm_s + self.pipeline_engine_s + self.dp_comm_s
                + self.offload_s)


class TimeReport(BaseModel):
    """One optimizer step, split into its parts (they add up to step_s)."""

    model_config = OUTPUT_CONFIG
    compute_s: float
    """Forward, backward and recomputation of the slowest stage, all micro-batches."""
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    """Data-parallel communication not hidden behind compute."""
    ep_comm_s: float = 0.0
    """Expert-parallel all-to-all (and expert-TP gathers) not hidden behind compute."""
    cp_comm_s: float = 0.0
    """Context-parallel K/V exchange (ring steps, all-gathers, all-to-alls) not hidden behind
    the attention kernels."""
    host_wait_s: float = 0.0
    """The GPU idle while the host launches the MoE layers' eager token paths (dispatch,
    one GEMM per local expert, combine) after the dispatcher's sync: what whole-layer CUDA
    graphs, fewer local experts or larger micro-batches remove (cost_models/
    expert_parallel.py host_wait_s)."""
    pipeline_engine_s: float = 0.0
    """The pipeline engine's own time per micro-batch beyond compute and transfers, on the
    slowest stage, all micro-batches (fitted: the framework profile's
    pipeline_layer_overhead_s per layer the stage holds; DeepSpeed's pipeline engine, and
    Megatron-DeepSpeed's at pp 1 too)."""
    bubble_s: float
    optimizer_s: float
    """The optimizer step on the GPU (of the states it keeps)."""
    offload_s: float = 0.0
    """CPU offload left on the critical path: host copies of activations and ZeRO-3 shards,
    and the offloaded optimizer step (gradients down, CPU Adam, weights up) beyond the GPU's."""
    grad_zero_s: float = 0.0
    """Zeroing the gradient buffer before the first micro-batch (Megatron-LM DDP's
    zero_grad_buffer: a memset of every local gradient; cost_models/step_fixed.py)."""
    grad_norm_s: float = 0.0
    """The gradient norm and clipping after the last micro-batch: passes over the local
    gradients and an all-reduce of one value."""
    loss_reduce_s: float = 0.0
    """The loss all-reduce over the data x context-parallel ranks (Megatron-LM, every step)."""
    overhead_s: float
    stages: list[StageTime]
    slowest_stage: int
    imbalance: float
    """Slowest stage time / mean stage time (1.0 is perfectly balanced)."""
    dp_algorithm: str
    step_s_band: tuple[float, float] | None = None
    """Seconds, [low, high]: where the measured step of a run of this kind lands, by the
    model's error on held-out published runs of that kind (10th to 90th percentile;
    planner/costing/uncertainty.py). None where no band was attached."""

    @computed_field
    @property
    def step_s(self) -> float:
        return (self.compute_s + self.tp_comm_s + self.ep_comm_s + self.cp_comm_s
                + self.host_wait_s + self.pp_comm_s + self.pipeline_engine_s + self.dp_comm_s
                + self.bubble_s + self.optimizer_s
                + self.offload_s + self.grad_zero_s + self.grad_norm_s + self.loss_reduce_s
                + self.overhead_s)


class ThroughputReport(BaseModel):
    model_config = OUTPUT_CONFIG
    tokens_per_s: float
    model_tflops_per_gpu: float
    """Model FLOPs (no recomputation) per second per GPU, by Megatron-LM's formula: every
    matmul of the model, attention scores over the full s^2 (Narayanan et al. 2021, Sec. 5.1),
    the number published runs report."""
    hardware_tflops_per_gpu: float
    """FLOPs executed, recomputation included (what Narayanan et al. 2021 Table 1 reports)."""
    mfu: float
    """Model FLOPs utilisation as the kernels run: the model FLOPs less the attention a fused
    kernel skips (the masked causal half, keys outside a sliding window), over peak."""
    time_to_train_s: float | None = None
    gpu_hours: float | None = None
    cost_usd: float | None = None
    """GPU-hours x --gpu-hour-price: what training the --tokens costs (None without both)."""

    def priced(self, gpu_hour_price: float | None) -> ThroughputReport:
        """This report with the cost to train at `gpu_hour_price` USD per GPU-hour (the unit
        clouds bill GPUs in); unchanged without a price or without --tokens."""
        if gpu_hour_price is None or self.gpu_hours is None:
            return self
        return self.model_copy(update={"cost_usd": self.gpu_hours * gpu_hour_price})


class PlanReport(BaseModel):
    """One strategy, evaluated: memory, time and throughput."""

    def priced(self, gpu_hour_price: float | None) -> PlanReport:
        """The plan with its cost to train (`ThroughputReport.priced`)."""
        return self.model_copy(update={"throughput": self.throughput.priced(gpu_hour_price)})

    model_config = OUTPUT_CONFIG
    strategy: StrategyOut
    memory: MemoryReport
    time: TimeReport
    throughput: ThroughputReport
    tied_with_best: bool | None = None
    """In a ranking (`planner plan`): its predicted step lies within the model's ranking error
    of the fastest plan's, so the difference is not to be trusted (true for the fastest plan
    itself). None outside a ranking (validate, diff, memory)."""

    @computed_field
    @property
    def dominant_cost(self) -> str:
        parts = {"compute": self.time.compute_s, "tp_comm": self.time.tp_comm_s,
                 "ep_comm": self.time.ep_comm_s, "cp_comm": self.time.cp_comm_s,
                 "host_wait": self.time.host_wait_s, "pp_comm": self.time.pp_comm_s,
                 "pipeline_engine": self.time.pipeline_engine_s,
                 "dp_comm": self.time.dp_comm_s,
                 "bubble": self.time.bubble_s, "optimizer": self.time.optimizer_s,
                 "offload": self.time.offload_s}
        return max(parts, key=parts.get)


class Violation(BaseModel):
    model_config = OUTPUT_CONFIG
    rule: str
    message: str
    fix: str


class SearchReport(BaseModel):
    """How the search went."""

    model_config = OUTPUT_CONFIG
    status: str
    """CP-SAT's status for the best plan: OPTIMAL, or FEASIBLE when a limit stopped it."""
    proven_optimal: bool
    """The plans are the best in the space: CP-SAT proved the pick, and every candidate whose
    balanced stage layout could win was balanced to optimality."""
    unproven: str | None = None
    """Why the plans are not proven the best, in one plain line (None when they are)."""
    wall_clock_stopped: bool = False
    """The wall-clock safety net (--time-limit) stopped part of the search: the result may then
    differ from run to run. Every other limit is counted in CP-SAT work units and stops at the
    same point on every run."""
    num_candidates: int
    """Strategies in the search space."""
    num_valid: int
    """Those that pass every rule but memory, and the user's pins."""
    num_evaluated: int = 0
    """Of those, the ones priced: whose step bound could reach the plans listed, and the rule
    of thumb's (`search.pool.evaluate_promising`); the others can be none of them. None whose
    model states alone overfill the average pipeline stage."""
    num_in_model: int
    """Those left in the CP-SAT model: the fastest fitting candidate of each set of degrees."""
    num_layouts_balanced: int = 0
    """Candidates whose stage layout CP-SAT balanced (planner/rebalance.py)."""
    num_layouts_improved: int = 0
    """Of those, how many beat their even layout or fit only when balanced."""
    seconds: float | None = None
    """Wall time of the search; None where not shown (`plan` shows it with --timings only)."""
    heuristic_step_s: float | None = None
    """Step time of Megatron-LM's rule of thumb (tp = node, fewest stages that fit)."""
    heuristic_strategy: str | None = None
    note: str | None = None
    """What the search did beyond the asked-for space (pp widened past powers of two)."""
    tie_tolerance: float = 0.0
    """Plans whose predicted step lies within this share of the fastest plan's are tied with
    it (`PlanReport.tied_with_best`): the model's measured error on the gap between two
    strategies of one job. 0: ties were not ranked (only equal steps tie)."""
