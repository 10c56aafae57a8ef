"""Strategies as named arrays: one entry per candidate strategy, one field per setting, so the
search, the rules and the cost models vectorise over thousands of strategies and name every
column. Option fields hold indices into the orders below."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from cost_models.enums import (DEFAULT_RECOMPUTE_MODULES, CpComm, CudaGraphs, DpComm,
                               MicroBatchGroups, MoeDispatcher, PipelineSchedule, RankOrder,
                               Recompute, RecomputeModule)
from cost_models.pipeline import schedule_group

if TYPE_CHECKING:
    from planner.schemas.framework import OverlapDefaults
    from planner.schemas.strategy import Strategy

RECOMPUTE_ORDER = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
DP_COMM_ORDER = (DpComm.ALL_REDUCE, DpComm.PARAMETER_SERVER)
CP_COMM_ORDER = tuple(CpComm)
RANK_ORDER = tuple(RankOrder)
RECOMPUTE_MODULE_ORDER = tuple(RecomputeModule)
"""Bit i of a `Candidates.rc_modules` mask is RECOMPUTE_MODULE_ORDER[i]."""


def modules_mask(modules) -> int:
    """The bit mask of a set of recompute modules."""
    return sum(1 << RECOMPUTE_MODULE_ORDER.index(m) for m in set(modules))


def mask_modules(mask: int) -> frozenset[RecomputeModule]:
    """The recompute modules of a bit mask."""
    return frozenset(m for i, m in enumerate(RECOMPUTE_MODULE_ORDER) if int(mask) >> i & 1)


DEFAULT_MODULES_MASK = modules_mask(DEFAULT_RECOMPUTE_MODULES)


def strategy_modules(mask: int) -> tuple[RecomputeModule, ...] | None:
    """A mask as a strategy's recompute_modules: None for none or the default (core_attn)."""
    if int(mask) in (0, DEFAULT_MODULES_MASK):
        return None
    return tuple(m for m in RECOMPUTE_MODULE_ORDER if m in mask_modules(mask))


MOE_DISPATCHER_ORDER = tuple(MoeDispatcher)
CUDA_GRAPHS_ORDER = tuple(CudaGraphs)
PIPELINE_SCHEDULE_ORDER = tuple(PipelineSchedule)


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
    nvls: np.ndarray = None  # type: ignore[assignment]
    """NCCL may use NVLS (NCCL_NVLS_ENABLE; None: True, NCCL's default)."""
    rank_order: np.ndarray = None  # type: ignore[assignment]
    """Index into RANK_ORDER (None: 0, tp-cp-ep-dp-pp)."""
    moe_overlap: np.ndarray = None  # type: ignore[assignment]
    """Overlap one micro-batch's expert all-to-all with another's compute (as asked; the
    framework and the strategy gate it). None: False."""
    rc_modules: np.ndarray = None  # type: ignore[assignment]
    """Bit mask over RECOMPUTE_MODULE_ORDER of what selective recompute re-runs; 0 unless
    recompute is selective (None: core_attn where selective, the default)."""
    dispatcher: np.ndarray = None  # type: ignore[assignment]
    """Index into MOE_DISPATCHER_ORDER (None: 0, alltoall)."""
    cuda_graphs: np.ndarray = None  # type: ignore[assignment]
    """Index into CUDA_GRAPHS_ORDER (None: 0, none). Priced where the framework gives host
    costs (whole-layer graphs launch nothing from the host); the search never sets it, a
    strategy file or launch script does, and framework rules gate it."""
    vp_group: np.ndarray = None  # type: ignore[assignment]
    """Micro-batches each model chunk runs in a row under the interleaved schedule (Megatron-LM
    --microbatch-group-size-per-virtual-pipeline-stage); 0: the framework's choice
    (`schedule_group`). None: 0."""
    pipeline_schedule: np.ndarray = None  # type: ignore[assignment]
    """Index into PIPELINE_SCHEDULE_ORDER (None: 0, 1F1B, interleaved with vpp > 1). A
    strategy file or torchtitan config sets it, the search only where --pipeline-schedule asks
    (`SearchSpace.pipeline_schedule`); the pipeline_schedule rule gates it."""

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
        if self.nvls is None:
            self.nvls = np.ones(n, dtype=bool)
        if self.rank_order is None:
            self.rank_order = np.zeros(n, dtype=int)
        if self.moe_overlap is None:
            self.moe_overlap = np.zeros(n, dtype=bool)
        if self.rc_modules is None:
            selective = self.recompute == RECOMPUTE_ORDER.index(Recompute.SELECTIVE)
            self.rc_modules = np.where(selective, DEFAULT_MODULES_MASK, 0) + np.zeros(
                n, dtype=np.int64)
        if self.dispatcher is None:
            self.dispatcher = np.zeros(n, dtype=int)
        if self.cuda_graphs is None:
            self.cuda_graphs = np.zeros(n, dtype=int)
        if self.vp_group is None:
            self.vp_group = np.zeros(n, dtype=int)
        if self.pipeline_schedule is None:
            self.pipeline_schedule = np.zeros(n, dtype=int)

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

    def schedule_group(self, groups: MicroBatchGroups) -> np.ndarray:
        """Micro-batches per group of the interleaved schedule: the pinned `vp_group`, else
        as the framework groups them (`pipeline.schedule_group`)."""
        return schedule_group(pp=self.pp, num_micro_batches=self.num_micro_batches,
                              pinned=self.vp_group, groups=groups)

    def take(self, index) -> Candidates:
        return Candidates(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @classmethod
    def empty(cls) -> Candidates:
        """No strategies, each field with the dtype one strategy gives it."""
        ints = ("tp", "pp", "vpp", "dp", "mb", "global_batch", "recompute", "zero", "shard",
                "dp_comm", "num_servers", "ep", "etp", "cp", "cp_comm", "cp_a2a", "act_offload",
                "rank_order", "rc_modules", "dispatcher", "cuda_graphs", "vp_group",
                "pipeline_schedule")
        bools = ("sp", "overlap", "param_gather", "tp_overlap", "fp8_gather", "param_offload",
                 "nvls", "moe_overlap")
        return cls(**{f.name: np.zeros(0, dtype=int if f.name in ints else
                                       bool if f.name in bools else float)
                      for f in fields(cls)})

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
                   act_offload=one(s.activation_offload_layers), nvls=one(s.nvls),
                   rank_order=one(RANK_ORDER.index(overlap("rank_order"))),
                   moe_overlap=one(overlap("moe_a2a_overlap")),
                   rc_modules=one(modules_mask(s.selective_modules)),
                   dispatcher=one(MOE_DISPATCHER_ORDER.index(overlap("moe_dispatcher"))),
                   cuda_graphs=one(CUDA_GRAPHS_ORDER.index(s.cuda_graphs or CudaGraphs.NONE)),
                   vp_group=one(s.microbatch_group or 0),
                   pipeline_schedule=one(PIPELINE_SCHEDULE_ORDER.index(
                       s.pipeline_schedule or PipelineSchedule.ONE_F_ONE_B)))

