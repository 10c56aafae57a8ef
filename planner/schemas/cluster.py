"""The cluster: nodes of identical GPUs, the links between them, and named efficiency data."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from cost_models.communication import Network
from cost_models.enums import Fp8Recipe, Precision
from cost_models.units import GB, GiB, TFLOPS, US
from planner.schemas.bounds import MAX_GPUS, Gpus

_FROZEN = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True,
                     allow_inf_nan=False)


class LinkKind(str, Enum):
    NVLINK = "nvlink"
    HCCS = "hccs"
    XGMI = "xgmi"
    """AMD Infinity Fabric (xGMI): a full mesh of point-to-point links between a node's GPUs;
    RCCL reads NCCL's environment variables, so launch files treat it as NCCL."""
    PCIE = "pcie"
    NVLINK_C2C = "nvlink_c2c"
    INFINIBAND = "infiniband"
    ROCE = "roce"
    ETHERNET = "ethernet"


class PeakTflops(BaseModel):
    """Dense (no sparsity) peak TFLOP/s of the matrix units, per datatype."""

    model_config = _FROZEN
    fp32: PositiveFloat
    fp16: PositiveFloat
    bf16: PositiveFloat
    tf32: PositiveFloat | None = None
    fp8: PositiveFloat | None = None
    fp4: PositiveFloat | None = None
    """Of the FP4 tensor cores (Blackwell: NVFP4 and MXFP4), where the GPU has them."""


class GpuSpec(BaseModel):
    model_config = _FROZEN
    name: str
    memory_gib: PositiveFloat
    """Device memory as nvidia-smi reports it (memory.total), in GiB."""
    peak_tflops: PeakTflops
    hbm_gb_per_s: PositiveFloat
    """Datasheet HBM bandwidth, GB/s (1e9 bytes)."""
    fp8_transpose_free: bool = False
    """Its FP8 tensor cores read an operand in either layout, so per-tensor-scaled FP8 needs
    no transposed copy (Blackwell); Hopper and Ada do (Transformer Engine
    performance_considerations.rst, Table 2)."""

    def peak_flops(self, precision: Precision) -> float:
        """Dense peak FLOP/s for matrix multiplies at a training precision (FP8: of the FP8
        tensor cores, which MXFP8 runs on too; a GPU without them is priced at its bf16 peak,
        and the fp8_hardware rule refuses the request)."""
        peak = getattr(self.peak_tflops, precision.value)
        return (self.peak_tflops.bf16 if peak is None else peak) * TFLOPS

    def _recipe_peak_tflops(self, recipe: Fp8Recipe | None) -> float | None:
        """Dense TFLOP/s of the tensor cores a low-precision recipe's GEMMs run on: the FP4
        ones for NVFP4, the FP8 ones otherwise; None where the GPU lacks them."""
        return self.peak_tflops.fp4 if recipe is Fp8Recipe.NVFP4 else self.peak_tflops.fp8

    def linear_peak_flops(self, recipe: Fp8Recipe) -> float:
        """Dense peak FLOP/s of a low-precision recipe's GEMMs (the bf16 peak where the GPU
        lacks their tensor cores, and the fp8_hardware rule refuses the request)."""
        peak = self._recipe_peak_tflops(recipe)
        return (self.peak_tflops.bf16 if peak is None else peak) * TFLOPS

    def runs_recipe(self, recipe: Fp8Recipe | None) -> bool:
        """Whether it has the tensor cores the recipe's GEMMs need (FP4 for NVFP4, else FP8)."""
        return self._recipe_peak_tflops(recipe) is not None


class LinkSpec(BaseModel):
    model_config = _FROZEN
    kind: LinkKind
    bandwidth_gb_per_s: PositiveFloat
    """Per GPU, per direction, GB/s (NVLink: half the bidirectional datasheet figure)."""
    latency_us: float = Field(gt=0)
    """Per-step latency of NCCL's Simple protocol over this link, microseconds (NCCL's own
    tuning.cc: 3.4 on NVLink, 14 on the network); LL and LL128 use NCCL's values."""


class NetworkSpec(LinkSpec):
    """The network between nodes. `bandwidth_gb_per_s` is per NIC."""

    nics_per_node: PositiveInt | None = None
    """NICs (rails) per node; None: one per GPU, a rail-optimised fabric (DGX SuperPOD). Fewer
    NICs are shared by the node's GPUs: when all of them cross the network at once (the
    data-parallel reduction of every tensor-parallel rank, a pipeline boundary, an expert
    all-to-all) each gets nics / gpus_per_node of one."""
    oversubscription: float = Field(default=1.0, ge=1)
    """Fabric oversubscription above the leaf switches (2.0 for 2:1; 1.0 non-blocking): a group
    spanning more nodes than one leaf holds gets 1 / oversubscription of the NIC bandwidth."""
    nodes_per_leaf: PositiveInt | None = None
    """Nodes under one leaf switch, whose traffic stays below the oversubscribed tier (None:
    every group that crosses nodes is priced as crossing it)."""


class HostSpec(BaseModel):
    """The host side of a node: the link from each GPU to host memory, and that memory. CPU
    offload (optimizer states, activations) is priced with these numbers."""

    model_config = _FROZEN
    link: LinkKind
    """pcie (x86 hosts) or nvlink_c2c (Grace Hopper / Grace Blackwell superchips)."""
    link_gb_per_s: PositiveFloat
    """Datasheet bandwidth between one GPU and host memory, per direction, GB/s."""
    link_fraction: float = Field(gt=0, le=1)
    """Share of `link_gb_per_s` pinned-memory copies reach with every GPU of the node copying
    at once (nvbandwidth, cudaMemcpyAsync)."""
    memory_gib: PositiveFloat
    """Host memory of one node, GiB."""
    memory_gb_per_s: PositiveFloat
    """Datasheet bandwidth of a node's host memory (all CPU sockets), GB/s."""
    memory_fraction: float = Field(gt=0, le=1)
    """Share of `memory_gb_per_s` a CPU optimizer step (a streaming read-modify-write) reaches
    with every GPU's process stepping at once."""


class ReserveSpec(BaseModel):
    """Memory a GPU loses outside the model's tensors."""

    model_config = _FROZEN
    framework_gib: float = Field(ge=0)
    """CUDA context, driver-reserved memory, cuBLAS workspace and communication buffers."""
    fragmentation_fraction: float = Field(ge=0, lt=1)
    """Share of allocated bytes the caching allocator loses to fragmentation."""
    zero3_prefetch_blocks: PositiveInt = 2
    """Blocks whose full weights ZeRO-3 keeps gathered at once (the one computing + prefetch)."""


class EfficiencySpec(BaseModel):
    """Achieved fractions of datasheet peaks. Invented or calibrated numbers live here, each
    with its reason in the preset file, never in a formula."""

    model_config = _FROZEN
    gemm_peak_fraction: float = Field(gt=0, le=1)
    """Share of peak FLOP/s that large GEMMs reach inside a training step."""
    gemm_half_efficiency_k: float = Field(ge=0)
    """Reduction length k at which each output tile's prologue and epilogue halve a GEMM's
    achieved FLOP/s (`cost_models.compute.gemm_time_s`)."""
    gemm_fill_dim: float = Field(default=0.0, ge=0)
    """GEMM size (m = n = k) at which too few output tiles for the GPU's SMs halve the achieved
    FLOP/s (`cost_models.compute.gemm_time_s`); 0: not modelled."""
    flash_attention_fraction: float = Field(gt=0, le=1)
    """Share of peak a fused attention kernel reaches, forward and backward, at 4096 attended
    keys per query (a causal 8K sequence) and head dim 128 (`cost_models.compute.
    attention_kernel_fraction`)."""
    flash2_attention_fraction: float | None = Field(default=None, gt=0, le=1)
    """The same share for FlashAttention-2 (attention flash2: PyTorch SDPA's flash backend,
    the flash-attn 2 package), where it differs; None: as `flash_attention_fraction` (Ampere,
    where FA2 is the fastest kernel, or not measured)."""
    attention_half_keys: float = Field(default=0.0, ge=0)
    """Keys per query at which the attention kernel's per-tile fixed cost halves its rate; 0:
    the rate does not depend on the sequence (not measured for this GPU)."""
    attention_half_head_dim: float = Field(default=0.0, ge=0)
    """Head dim at which the per-score exponential halves the attention kernel's rate; 0: the
    rate does not depend on the head dim (not measured for this GPU)."""
    attention_sink_row_s: float = Field(default=0.0, ge=0)
    """Seconds a fused attention backward with attention sinks (a learnable softmax offset,
    gpt-oss) adds per query row and head: the offset's gradient, summed over every row
    (`cost_models.compute.attention_sink_backward_s`); 0: not priced (not measured for this
    GPU)."""
    hbm_fraction: float = Field(gt=0, le=1)
    """Share of datasheet HBM bandwidth memory-bound kernels reach."""
    intra_node_bus_fraction: float = Field(gt=0, le=1)
    """NCCL bus bandwidth inside a node / per-direction link bandwidth (nccl-tests)."""
    inter_node_bus_fraction: float = Field(gt=0, le=1)
    """NCCL bus bandwidth per NIC across nodes / NIC line rate (nccl-tests)."""
    nvls_bus_fraction: float | None = Field(default=None, gt=0, le=2)
    """NCCL all-reduce bus bandwidth with NVLS (NVSwitch in-switch reduction) / per-direction
    NVLink bandwidth; it can exceed 1 because the switch reduces. None: no NVLS (before Hopper)."""
    fp8_gemm_efficiency: dict[Fp8Recipe, float] = Field(default_factory=dict)
    """Per FP8 scaling recipe this GPU runs: the share of the FP8 peak its GEMMs reach
    relative to the share bf16 GEMMs reach of theirs (`gemm_peak_fraction`), at large size:
    GEMMs of short k lose the time bf16's do (`compute.gemm_time_s`), so a value above 1 still
    runs them below twice bf16's speed (`compute.low_precision_gemm_efficiency` derives it
    from a measured speed-up). Quantization is priced apart. Recipes absent do not run on this
    GPU (none: no FP8 training)."""
    fp8_attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Share of the FP8 peak a fused FP8 attention kernel reaches relative to the share
    `flash_attention_fraction` gives bf16 attention of the bf16 peak (`fp8.
    fp8_attention_fraction`). None: no published rate for this GPU, and FP8 attention is priced
    at the bf16 kernel's speed (its memory saving still counts)."""
    overlap_interference: float = Field(ge=0, le=1)
    """Share of a collective's time hidden behind compute that still slows that compute."""
    step_overhead_s: float = Field(ge=0)
    """Fixed time per optimizer step outside the model: data loading, logging, launches."""


class ClusterSource(BaseModel):
    model_config = _FROZEN
    datasheets: tuple[str, ...]
    calibration: str | None = None


class ClusterSpec(BaseModel):
    """A homogeneous GPU cluster."""

    model_config = _FROZEN
    name: str
    description: str | None = None
    num_nodes: Gpus
    gpus_per_node: Gpus
    nvlink_domain: Gpus | None = None
    """GPUs one NVLink fabric joins, a multiple of gpus_per_node (GB200 NVL72: 72, over 18
    compute trays of 4); None: one node. Tensor, expert and context groups within it stay on
    NVLink; nodes stay the unit of launch and host memory."""
    gpu: GpuSpec
    intra_node: LinkSpec
    inter_node: NetworkSpec
    reserve: ReserveSpec
    efficiency: EfficiencySpec
    host: HostSpec | None = None
    """Host link and memory (None: not described; CPU offload is refused)."""
    source: ClusterSource | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_library(cls, data):
        # `collectives` (nccl, hccl, gloo, mpi) changed no cost: the collective model is
        # NCCL's (tuning.cc), fed with this cluster's measured links; the launch environment's
        # library follows intra_node.kind (hccs: HCCL, else NCCL).
        if isinstance(data, dict) and "collectives" in data:
            raise ValueError("collectives: not a field: collectives are priced with NCCL's "
                             "algorithms and this cluster's measured links (efficiency "
                             "fractions, latency_us), and the launch environment's library "
                             "follows intra_node.kind (hccs: HCCL); remove it")
        return data

    @model_validator(mode="after")
    def _domain(self):
        if self.nvlink_domain is not None and self.nvlink_domain % self.gpus_per_node:
            raise ValueError(f"nvlink_domain ({self.nvlink_domain}) must be a multiple of "
                             f"gpus_per_node ({self.gpus_per_node}): an NVLink domain joins "
                             f"whole nodes")
        return self

    @model_validator(mode="after")
    def _bounded(self):
        if self.num_gpus > MAX_GPUS:
            raise ValueError(f"num_nodes x gpus_per_node ({self.num_nodes:,} x "
                             f"{self.gpus_per_node:,}) exceeds the largest accepted, "
                             f"{MAX_GPUS:,} GPUs (5x the largest clusters built)")
        return self

    @property
    def nvlink_gpus(self) -> int:
        """GPUs reachable over NVLink from one GPU: the placement unit of every collective."""
        return self.nvlink_domain or self.gpus_per_node

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def runs_flex_dispatch(self) -> bool:
        """Whether DeepEP and HybridEP, the backends of Megatron-Core's flex token dispatcher,
        run here: NVIDIA GPUs of Hopper or later (NVLink and FP8 tensor cores; DeepEP README:
        SM90 and later, NVLink inside a node) and, between nodes, RDMA over InfiniBand or RoCE
        (NVSHMEM IBGDA)."""
        return (self.intra_node.kind is LinkKind.NVLINK and self.gpu.peak_tflops.fp8 is not None
                and (self.num_nodes == 1
                     or self.inter_node.kind in (LinkKind.INFINIBAND, LinkKind.ROCE)))

    @property
    def capacity_bytes(self) -> int:
        return int(self.gpu.memory_gib * GiB)

    @property
    def intra_bus_bytes_per_s(self) -> float:
        return self.intra_node.bandwidth_gb_per_s * GB * self.efficiency.intra_node_bus_fraction

    @property
    def inter_bus_bytes_per_s(self) -> float:
        """Bus bandwidth one GPU gets across nodes while all GPUs of its node cross at once:
        its share of the node's NICs (one NIC each on a rail-optimised fabric)."""
        nics = self.inter_node.nics_per_node or self.gpus_per_node
        share = min(nics, self.gpus_per_node) / self.gpus_per_node
        return (self.inter_node.bandwidth_gb_per_s * GB * self.efficiency.inter_node_bus_fraction
                * share)

    @property
    def network(self) -> Network:
        """The achieved link numbers the collective model (cost_models.communication) uses."""
        nvls = self.efficiency.nvls_bus_fraction
        return Network(
            intra_bus_bytes_per_s=self.intra_bus_bytes_per_s,
            nic_bus_bytes_per_s=self.inter_bus_bytes_per_s,
            intra_hop_s=self.intra_latency_s, inter_hop_s=self.inter_latency_s,
            oversubscription=self.inter_node.oversubscription,
            # Placements count NVLink domains: a leaf's nodes in that unit.
            nodes_per_leaf=(self.inter_node.nodes_per_leaf or 1) * self.gpus_per_node
            / self.nvlink_gpus,
            nvls_bus_bytes_per_s=None if nvls is None
            else self.intra_node.bandwidth_gb_per_s * GB * nvls)

    @property
    def host_bytes_per_gpu(self) -> float | None:
        """Host memory per GPU: the node's over its GPUs (None: no host block)."""
        return None if self.host is None else self.host.memory_gib * GiB / self.gpus_per_node

    @property
    def host_link_bytes_per_s(self) -> float:
        """Achieved bytes per second between one GPU and host memory, per direction."""
        assert self.host is not None, "no host block"
        return self.host.link_gb_per_s * GB * self.host.link_fraction

    @property
    def host_memory_bytes_per_s_per_gpu(self) -> float:
        """Achieved host memory bandwidth one GPU's CPU optimizer gets while all step."""
        assert self.host is not None, "no host block"
        return self.host.memory_gb_per_s * GB * self.host.memory_fraction / self.gpus_per_node

    @property
    def intra_latency_s(self) -> float:
        return self.intra_node.latency_us * US

    @property
    def inter_latency_s(self) -> float:
        return self.inter_node.latency_us * US
