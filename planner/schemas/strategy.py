"""A parallelisation strategy: the degrees and options one training run uses."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cost_models.enums import (DEFAULT_RECOMPUTE_MODULES, CpComm,  # noqa: F401 (re-exported)
                               CudaGraphs, DpComm, MoeDispatcher, PipelineSchedule,
                               RankOrder, Recompute, RecomputeModule, ZeroStage)
from planner.schemas.bounds import GlobalBatch, Gpus, Layers, MAX_LAYERS, at_most


class LaunchTarget(str, Enum):
    """Frameworks a plan can be emitted for, and whose configs `validate` reads."""

    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    TORCHRUN = "torchrun"
    TORCHTITAN = "torchtitan"
    MINDSPORE = "mindspore"
    MINDFORMERS = "mindformers"
    """A MindFormers run YAML: MindSpore runs it (the same framework profile and rules)."""

    @property
    def framework(self) -> str:
        """The framework that runs this target's files (its profile's name)."""
        return "mindspore" if self is LaunchTarget.MINDFORMERS else self.value


class Strategy(BaseModel):
    """Degrees and options of one training run (a strategy.yaml, or one plan of the search).

    Degrees, spelled out: dp data-parallel replicas, tp tensor-parallel ranks, pp pipeline
    stages, vpp interleaved model chunks per pipeline rank (Megatron-LM's virtual stages)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True,
                              allow_inf_nan=False)

    dp: Gpus | None = None
    """None: the GPUs left over, num_gpus / (tp * cp * pp)."""
    tp: Gpus = 1
    pp: Gpus = 1
    vpp: Gpus = 1
    microbatch_group: GlobalBatch | None = None
    """With vpp > 1, the micro-batches each model chunk runs in a row (Megatron-LM
    --microbatch-group-size-per-virtual-pipeline-stage, whose default is pp): from pp to the
    micro-batches per step, with a last group that is whole or at least pp. None: the
    framework's choice (pp where pp divides the micro-batches, else the smallest group Megatron-LM
    runs: `cost_models.pipeline.micro_batch_group_size`)."""
    ep: Gpus = 1
    """Expert-parallel ranks: an MoE layer's routed experts are split over ep ranks, which
    exchange tokens by all-to-all (Megatron-Core MoE parallel folding: expert layers use
    etp x ep x edp x pp over the same GPUs as tp x dp x pp)."""
    etp: Gpus | None = None
    """Expert tensor-parallel ranks: each routed expert's matrices split etp ways. None: tp
    (Megatron-LM's default for --expert-tensor-parallel-size)."""
    cp: Gpus = 1
    """Context-parallel ranks: each sequence is split over cp ranks, which exchange keys and
    values for attention (Megatron-LM --context-parallel-size; rank order tp-cp-ep-dp-pp)."""
    cp_comm: CpComm = CpComm.P2P
    """How CP ranks exchange keys and values: p2p (ring), all_gather, a2a (Ulysses) or a2a+p2p
    (Megatron-LM --cp-comm-type)."""
    cp_a2a: Gpus | None = None
    """With cp_comm a2a+p2p, the ranks of the inner all-to-all (Megatron-LM
    --hierarchical-context-parallel-sizes A B with A * B = cp); None: as many CP ranks as
    share a node, at most cp / 2."""
    micro_batch: GlobalBatch = 1
    global_batch: GlobalBatch | None = None
    """None: the model's training.global_batch."""
    sequence_parallel: bool = False
    recompute: Recompute = Recompute.NONE
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(default=None, min_length=1)
    """With recompute selective, the submodules re-run in the backward pass (Megatron-LM
    --recompute-modules: core_attn, layernorm, mla_up_proj, mlp, moe, moe_act,
    shared_experts; `RecomputeModule` says what each drops and re-runs). None: core_attn, the
    attention core (Megatron-LM's default, and the only selective recompute the other
    frameworks' profiles price)."""
    zero_stage: ZeroStage = ZeroStage.NONE
    overlap_grad_reduce: bool = True
    """Overlap the data-parallel gradient reduction with the last backward pass (Megatron-LM
    --overlap-grad-reduce, DeepSpeed overlap_comm), where the framework can."""
    overlap_param_gather: bool | None = None
    """Overlap the distributed optimizer's / ZeRO's parameter all-gather with the next forward
    (Megatron-LM --overlap-param-gather, FSDP prefetch), where the framework can. None: the
    framework's default."""
    tp_comm_overlap: bool | None = None
    """Overlap tensor-parallel collectives with the GEMMs (Megatron-LM --tp-comm-overlap,
    torchtitan async TP), where the framework can; needs sequence parallelism. None: the
    framework's default."""
    moe_a2a_overlap: bool | None = None
    """Hide one micro-batch's expert-parallel all-to-all behind another's compute: the
    combined 1F1B schedule runs micro-batch i + 1's forward beside micro-batch i's backward,
    layer by layer, dispatch and combine on a communication stream (Megatron-LM
    --overlap-moe-expert-parallel-comm with --delay-wgrad-compute, as Megatron-Bridge's
    moe_a2a_overlap sets them). Needs ep > 1, no full recompute and, with a pipeline, the
    interleaved schedule. None: the framework's default."""
    moe_dispatcher: MoeDispatcher | None = None
    """How an MoE layer's tokens reach their experts: `alltoall` (NCCL all-to-all of every
    (token, expert) copy), `flex-deepep` or `flex-hybridep` (one copy per destination node,
    forwarded over NVLink inside it; Megatron-LM --moe-token-dispatcher-type flex
    --moe-flex-dispatcher-backend deepep|hybridep). None: the framework's default."""
    fp8_param_gather: bool | None = None
    """With precision fp8, keep the linear weights as FP8 parameters and all-gather them in FP8
    (Megatron-LM --fp8-param-gather, needs the distributed optimizer; torchtitan
    enable_fsdp_float8_all_gather), where the framework can with this recipe. None: the
    framework's default."""
    optimizer_offload: float = Field(default=0.0, ge=0, le=1)
    """Share of each rank's optimizer states (fp32 master weights, Adam moments) kept in host
    memory and updated by the CPU (Megatron-LM --optimizer-cpu-offload
    --optimizer-offload-fraction, DeepSpeed zero_optimization.offload_optimizer, torchtitan
    training.enable_cpu_offload); 0: none."""
    param_offload: bool = False
    """With zero_stage 3, keep the sharded weights and gradients in host memory too: each
    gather copies its shard to the GPU first (DeepSpeed offload_param, torchtitan
    enable_cpu_offload with FSDP2's CPUOffloadPolicy)."""
    activation_offload_layers: Annotated[int, Field(ge=0), at_most(MAX_LAYERS, "layers")] = 0
    """Layers per pipeline stage whose saved activations go to host memory between their
    forward and backward passes (Megatron-LM --cpu-offloading-num-layers; DeepSpeed
    cpu_checkpointing, with full recompute, offloads every layer's checkpoint)."""
    dp_shard: Gpus | None = None
    """ZeRO/FSDP shard group: model states are sharded over dp_shard data-parallel ranks and
    replicated over dp / dp_shard groups (HSDP: FSDP HYBRID_SHARD, torchtitan
    data_parallel_shard_degree, Megatron --num-distributed-optimizer-instances, DeepSpeed MiCS).
    None: sharded over all of dp."""
    dp_comm: DpComm = DpComm.ALL_REDUCE
    num_servers: Gpus | None = None
    """Parameter servers (with dp_comm: parameter_server); None: one per data-parallel rank."""
    layers_per_stage: tuple[Layers, ...] | None = None
    """Repeated layers on each of the pp * vpp pipeline chunks, in order; None: an even split."""
    nvls: bool = True
    """Let NCCL reduce inside the NVSwitch (NVLS) where the switch can (Hopper and later
    NVSwitch: presets with efficiency.nvls_bus_fraction). True is NCCL's default; False is
    NCCL_NVLS_ENABLE=0, which NVIDIA's own recipes often set (NCCL docs, env.html)."""
    rank_order: RankOrder | None = None
    """Which parallel axes consecutive ranks share, innermost first: tp-cp-ep-dp-pp (pipeline
    outermost) or tp-cp-ep-pp-dp (Megatron-LM --use-tp-pp-dp-mapping: data parallelism
    outermost). It decides which groups share a node. None: the framework's order."""
    cuda_graphs: CudaGraphs | None = None
    """What the run captures in CUDA graphs (Megatron-LM --cuda-graph-impl). Carried to the
    launch config, not priced: the per-step host time (framework profile step_host_s) was
    fitted on runs with CUDA graphs, and kernel-launch latency is not modelled. None: the
    framework's default, nothing written."""
    pipeline_schedule: PipelineSchedule | None = None
    """The pipeline schedule (with pp > 1): `1f1b` (interleaved with vpp > 1; every
    framework's), or torch.distributed.pipelining's zero-bubble ones that torchtitan runs:
    `zero_bubble` (InterleavedZeroBubble), `zbv` (ZBVZeroBubble, vpp 2) and `dualpipev`
    (DualPipeV, vpp 2). None: 1f1b."""

    @field_validator("recompute_modules")
    @classmethod
    def _modules_in_order(cls, value):
        # One spelling per set, in RecomputeModule's order (so equal sets compare equal).
        return None if value is None else tuple(m for m in RecomputeModule if m in value)

    @model_validator(mode="after")
    def _modules_need_selective(self):
        if self.recompute_modules is not None and self.recompute is not Recompute.SELECTIVE:
            raise ValueError(f"recompute_modules needs recompute selective (recompute is "
                             f"{self.recompute.value})")
        return self

    @property
    def selective_modules(self) -> frozenset[RecomputeModule]:
        """What selective recompute re-runs: recompute_modules, or core_attn when unset; empty
        without selective recompute."""
        if self.recompute is not Recompute.SELECTIVE:
            return frozenset()
        return (DEFAULT_RECOMPUTE_MODULES if self.recompute_modules is None
                else frozenset(self.recompute_modules))

    @property
    def num_micro_batches(self) -> float:
        """Micro-batches per step per data-parallel rank (fractional when the global batch does
        not divide; the rules say so)."""
        assert self.dp is not None and self.global_batch is not None, "resolve() first"
        return self.global_batch / (self.dp * self.micro_batch)

    @property
    def num_chunks(self) -> int:
        return self.pp * self.vpp

    @property
    def edp(self) -> int:
        """Expert data-parallel ranks: tp x cp x dp / (etp x ep) (fractional breaks a rule)."""
        assert self.dp is not None, "resolve() first"
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    @property
    def context_a2a(self) -> int:
        """The inner all-to-all group of hierarchical CP, 1 for the other kinds."""
        if self.cp_comm is not CpComm.A2A_P2P:
            return 1
        assert self.cp_a2a is not None, "resolve() first"
        return self.cp_a2a

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    def degrees_label(self) -> str:
        return degrees_label(self)


def default_cp_a2a(cp: int, tp: int, gpus_per_node: int) -> int:
    """The inner all-to-all group of hierarchical CP when none is given: the CP ranks one node
    holds (gpus_per_node / tp, CP ranks sit tp apart), at least 2 and at most cp / 2, so that
    the all-to-all stays on NVLink and the ring crosses nodes (the split Megatron-LM's
    --hierarchical-context-parallel-sizes is for)."""
    inner = 2
    while inner * 2 <= max(2, gpus_per_node // tp) and cp % (inner * 2) == 0 and inner * 2 < cp:
        inner *= 2
    return inner if cp % inner == 0 and inner < cp else 1


def degrees_label(s) -> str:
    """'dp 8, tp 8, pp 2, vpp 3, mb 1' for a Strategy or a plan's StrategyOut."""
    parts = [f"dp {s.dp}", f"tp {s.tp}", f"pp {s.pp}"]
    if s.vpp > 1:
        group = getattr(s, "microbatch_group", None)
        parts.append(f"vpp {s.vpp}" + (f" (groups of {group})" if group and group != s.pp
                                       else ""))
    if s.cp > 1:
        parts.append(f"cp {s.cp}" + ("" if s.cp_comm is CpComm.P2P else f" {s.cp_comm.value}"))
    if s.ep > 1:
        parts.append(f"ep {s.ep}")
    etp = s.etp or s.tp
    if etp != s.tp:
        parts.append(f"etp {etp}")
    parts.append(f"mb {s.micro_batch}")
    return ", ".join(parts)


def strategy_label(s) -> str:
    """The degrees and the options: 'dp 8, tp 8, pp 1, mb 1, sp, recompute selective, zero 1'."""
    parts = [degrees_label(s)]
    if s.sequence_parallel:
        parts.append("sp")
    if s.recompute is not Recompute.NONE:
        parts.append(f"recompute {s.recompute.value}")
        modules = getattr(s, "recompute_modules", None)
        if modules and set(modules) != DEFAULT_RECOMPUTE_MODULES:
            parts[-1] += f" ({', '.join(m.value for m in modules)})"
    if s.zero_stage:
        parts.append(f"zero {int(s.zero_stage)}")
        shard = getattr(s, "dp_shard", None)
        if shard is not None and shard != s.dp:
            parts.append(f"hsdp {shard}x{s.dp // shard}" if s.dp % shard == 0 else
                         f"dp_shard {shard}")
    if s.dp_comm is DpComm.PARAMETER_SERVER:
        parts.append("parameter server")
    schedule = getattr(s, "pipeline_schedule", None)
    if schedule not in (None, PipelineSchedule.ONE_F_ONE_B):
        parts.append(f"schedule {schedule.value}")
    parts.extend(offload_labels(s))
    return ", ".join(parts)


def offload_labels(s) -> list[str]:
    """'offload optimizer 50%', 'offload params', 'offload activations 4 layers' as set."""
    parts = []
    if s.optimizer_offload:
        share = "" if s.optimizer_offload == 1 else f" {s.optimizer_offload:.0%}"
        parts.append(f"offload optimizer{share}")
    if s.param_offload:
        parts.append("offload params")
    if s.activation_offload_layers:
        n = s.activation_offload_layers
        parts.append(f"offload activations {n} layer{'s' if n > 1 else ''}")
    return parts
