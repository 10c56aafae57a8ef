"""The discrete choices the cost models branch on."""

from __future__ import annotations

from enum import Enum, IntEnum


class Precision(str, Enum):
    """Training precision of weights and activations."""

    FP32 = "fp32"
    FP16 = "fp16"
    """fp16 mixed precision with dynamic loss scaling (fp32 master weights)."""
    BF16 = "bf16"
    """bf16 mixed precision (fp32 master weights, fp32 gradient accumulation in Megatron-LM)."""
    FP8 = "fp8"
    """bf16 mixed precision whose linear layers multiply in a low-precision format
    (Transformer Engine fp8_autocast, torchao float8): QKV, attention output, MLP and expert
    GEMMs, forward and backward; attention, embedding, output layer, router and norms stay
    bf16. The recipe (`Fp8Recipe`) sets the format and its scaling: FP8, or NVFP4's FP4."""


class Fp8Recipe(str, Enum):
    """How FP8 tensors are scaled (Transformer Engine transformer_engine/common/recipe;
    Megatron-LM --fp8-recipe; torchao float8 recipe names)."""

    DELAYED = "delayed"
    """One scale per tensor from an amax history of earlier steps (TE DelayedScaling)."""
    TENSORWISE = "tensorwise"
    """One scale per tensor from its current amax: an extra pass over it (TE
    Float8CurrentScaling, Megatron-Bridge "FP8-CS", torchao tensorwise)."""
    BLOCKWISE = "blockwise"
    """fp32 scales per 1x128 activation tile and 128x128 weight tile (TE Float8BlockScaling,
    DeepSeek-V3's recipe)."""
    MXFP8 = "mxfp8"
    """OCP microscaling: one E8M0 scale per 32 values (TE MXFP8BlockScaling; Blackwell)."""
    ROWWISE = "rowwise"
    """One scale per row, from its current amax (torchao float8 rowwise)."""
    NVFP4 = "nvfp4"
    """4-bit E2M1 values, one E4M3 scale per 16 and one fp32 scale per tensor, the weights
    scaled in 16x16 tiles; stochastic rounding of gradients and a random Hadamard transform
    of the weight-gradient GEMM's operands (TE NVFP4BlockScaling, nvfp4.rst; Megatron-LM
    --fp4-format e2m1 --fp4-recipe nvfp4; Blackwell FP4 tensor cores)."""


class Optimizer(str, Enum):
    ADAM = "adam"
    """Adam/AdamW: two fp32 moments per parameter."""
    SGD = "sgd"
    """Plain SGD: no optimizer state."""
    SGD_MOMENTUM = "sgd_momentum"
    """SGD with momentum: one fp32 buffer per parameter."""


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 5)."""

    NONE = "none"
    SELECTIVE = "selective"
    """Recompute only the core attention (QK^T, softmax, dropout, attention over V)."""
    FULL = "full"
    """Store only each layer's input and recompute the whole layer in the backward pass."""


class RecomputeModule(str, Enum):
    """A submodule selective recompute re-runs in the backward pass: Megatron-Core's
    --recompute-granularity selective --recompute-modules (TransformerConfig.recompute_modules,
    megatron/core/transformer/transformer_config.py @d98e8a64; default ["core_attn"]). The
    planner prices these seven; Megatron's gdn_norm_out, gdp_in_proj, gdp_qkv and mhc belong
    to layer kinds it does not model."""

    CORE_ATTN = "core_attn"
    """The attention core (attention.py, standard checkpoint): its softmax statistics (and
    with unfused attention the s x s scores) are dropped; the core re-runs."""
    LAYERNORM = "layernorm"
    """The input and pre-MLP norms (transformer_layer.py, output-discarding
    CheckpointWithoutOutput): their outputs, the QKV (or MLA down-projection) input and the MLP
    (router, shared-expert) input, are dropped; the two norms re-run."""
    MLA_UP_PROJ = "mla_up_proj"
    """MLA's up projections and RoPE (multi_latent_attention.py, output-discarding): the Q, K
    and V the attention core saves are dropped; the query and key-value up-projection GEMMs
    and RoPE re-run. Needs multi-latent attention."""
    MLP = "mlp"
    """A dense layer's MLP (transformer_layer.py, standard checkpoint on the norm output; not
    an MoE layer): its internals are dropped; the MLP's forward, with its TP collectives,
    re-runs."""
    MOE = "moe"
    """The whole MoE layer (moe_layer.py, standard checkpoint): router and expert activations
    and the shared experts' are dropped; the MoE forward, dispatch and combine included,
    re-runs."""
    MOE_ACT = "moe_act"
    """The routed experts' activation function (moe/experts.py, output-discarding): its output,
    the second expert GEMM's input, is dropped; the activation re-runs."""
    SHARED_EXPERTS = "shared_experts"
    """An MoE layer's shared experts (moe_layer.py, standard checkpoint): their internals are
    dropped; their forward, with its TP collectives, re-runs."""


DEFAULT_RECOMPUTE_MODULES = frozenset({RecomputeModule.CORE_ATTN})
"""Megatron-Core's default --recompute-modules, and what the other frameworks' selective
recompute is priced as (Korthikanti et al. 2022, Sec. 5)."""


class ZeroStage(IntEnum):
    """ZeRO stages (Rajbhandari et al. 2020, arXiv:1910.02054, Sec. 5)."""

    NONE = 0
    OPTIMIZER_STATES = 1
    """P_os; Megatron-LM's distributed optimizer."""
    GRADIENTS = 2
    """P_os+g."""
    PARAMETERS = 3
    """P_os+g+p; FSDP full sharding."""


class MasterWeights(str, Enum):
    """Where mixed-precision training keeps its fp32 master weights."""

    OPTIMIZER = "optimizer"
    """The model's parameters are 16-bit and the optimizer keeps an fp32 copy, sharded with
    the optimizer states (Megatron-LM's distributed optimizer, DeepSpeed ZeRO)."""
    PARAMETERS = "parameters"
    """The parameters themselves are fp32 and are the master; a 16-bit copy exists only
    unsharded, for compute (FSDP/FSDP2 MixedPrecisionPolicy(param_dtype=bf16), autocast)."""


class MlpKind(str, Enum):
    GELU = "gelu"
    """Two matrices h->f->h with an elementwise activation (GeLU, ReLU)."""
    SWIGLU = "swiglu"
    """Three matrices: gate and up h->f, down f->h (Shazeer 2020, arXiv:2002.05202)."""
    GEGLU = "geglu"
    """SwiGLU's three matrices with a GeLU gate (Shazeer 2020; Gemma's gelu_pytorch_tanh):
    the same parameters, FLOPs and stored tensors as SwiGLU."""
    SQUARED_RELU = "squared_relu"
    """GeLU's two matrices with relu(x)^2 between them (So et al. 2021, Primer,
    arXiv:2109.08668; Nemotron-4, arXiv:2402.16819 Sec. 2): the same parameters, FLOPs and
    stored tensors as GeLU (Megatron-LM --squared-relu; HF hidden_act relu2)."""

    @property
    def gated(self) -> bool:
        """Gate and up projections (three matrices) rather than one fc1 (two)."""
        return self in (MlpKind.SWIGLU, MlpKind.GEGLU)


class NormKind(str, Enum):
    LAYERNORM = "layernorm"
    """Weight and bias: 2h parameters."""
    RMSNORM = "rmsnorm"
    """Weight only: h parameters."""


class AttentionKind(str, Enum):
    """The attention kernel a run uses: a setting of the run (its framework's default, or
    --attention), not of the model, whose layers compute the same function either way."""

    FLASH = "flash"
    """Fused kernel (Dao et al. 2022, arXiv:2205.14135): no s x s tensor is stored. The
    fastest one the framework runs on the GPU: cuDNN fused attention (Transformer Engine's
    pick on Hopper and Blackwell) or FlashAttention-3; FlashAttention-2 on Ampere."""
    FLASH2 = "flash2"
    """The fused kernel of FlashAttention-2 (Dao 2023, arXiv:2307.08691): the same memory as
    flash, at FA2's rate, which on Hopper is about 0.6 of cuDNN's or FlashAttention-3's (no
    wgmma or TMA; bench/data/kernels_h100.json). PyTorch SDPA's flash backend, first in its
    default order (PyTorch issue 142132) and torchtitan's before 2025-10 (#1776), the
    flash-attn 2 package (Megatron-LM --attention-backend flash without FlashAttention-3,
    Megatron-DeepSpeed --use-flash-attn-v2)."""
    UNFUSED = "unfused"
    """Materialises the s x s scores, softmax and dropout (kept for the backward pass): the
    attention of 2020-2022 training (Megatron-LM's fused softmax, Korthikanti et al. 2022,
    arXiv:2205.05198, Sec. 4.1), Megatron-LM's --attention-backend unfused."""

    @property
    def fused(self) -> bool:
        """No s x s tensor is stored (flash or flash2)."""
        return self is not AttentionKind.UNFUSED
    @classmethod
    def _missing_(cls, value):
        # "standard", the value before issue 25, still reads as unfused (old model files).
        return cls.UNFUSED if value == "standard" else None


AttentionKind.STANDARD = AttentionKind.UNFUSED   # the member's name before issue 25 (not a member)


class PositionKind(str, Enum):
    LEARNED = "learned"
    """A learned table of max_positions x h (GPT-2, GPT-3, BERT, OPT)."""
    ROTARY = "rotary"
    ALIBI = "alibi"
    NONE = "none"


class Collective(str, Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


class CollectiveAlgorithm(str, Enum):
    """NCCL's algorithms (NVIDIA/nccl src/graph/tuning.cc)."""

    RING = "ring"
    TREE = "tree"
    """Double binary tree across nodes, a chain inside each (all-reduce only)."""
    NVLS = "nvls"
    """NVSwitch in-switch reduction (Hopper and later; NVLSTree across nodes)."""


class RankOrder(str, Enum):
    """How global ranks map to the parallel axes, innermost (consecutive ranks) first.

    Megatron-LM megatron/core/parallel_state.py RankGenerator `order` (initialize.py:
    'tp-cp-ep-dp-pp', or 'tp-cp-ep-pp-dp' with --use-tp-pp-dp-mapping). torchtitan's device
    mesh ["pp", "dp_replicate", "dp_shard", "cp", "tp"] (torchtitan/distributed/parallel_dims.py,
    row-major: tp innermost) and DeepSpeed's PipeModelDataParallelTopology axes
    ['pipe', 'data', 'model'] (deepspeed/runtime/pipe/topology.py) are the first order."""

    TP_CP_EP_DP_PP = "tp-cp-ep-dp-pp"
    """Pipeline outermost: pipeline neighbours sit tp x cp x dp ranks apart."""
    TP_CP_EP_PP_DP = "tp-cp-ep-pp-dp"
    """Data parallelism outermost: pipeline neighbours sit tp x cp apart, data-parallel peers
    tp x cp x pp apart."""


class LoadBalancing(str, Enum):
    """How an MoE router keeps experts evenly loaded."""

    AUX_LOSS = "aux_loss"
    """An auxiliary balance loss (Switch Transformer; Megatron-LM's default)."""
    EXPERT_BIAS = "expert_bias"
    """Auxiliary-loss-free: a per-expert bias on the routing scores (DeepSeek-V3; Megatron-LM
    --moe-router-enable-expert-bias)."""
    FORCED = "forced"
    """Tokens dealt out evenly whatever the router says: a benchmark setting (Megatron-LM
    --moe-router-force-load-balancing; NVIDIA's MoE performance tables run with it)."""


class CpComm(str, Enum):
    """How context-parallel ranks exchange keys and values for attention (Megatron-LM
    --cp-comm-type, Transformer Engine's context-parallel attention)."""

    P2P = "p2p"
    """Ring attention: K/V chunks passed around the CP ring, each step overlapped with the
    attention of the chunk in hand (Liu et al. 2023, Ring Attention, arXiv:2310.01889)."""
    ALL_GATHER = "all_gather"
    """All-gather K/V before attention, reduce-scatter their gradients after (Llama 3,
    arXiv:2407.21783, Sec. 3.3.2)."""
    A2A = "a2a"
    """All-to-all from sequence shards to head shards around attention (DeepSpeed-Ulysses,
    Jacobs et al. 2023, arXiv:2309.14509); bounded by the head count."""
    A2A_P2P = "a2a+p2p"
    """Hierarchical: all-to-all inside an inner group (NVLink), ring p2p across the outer one
    (Megatron-LM --hierarchical-context-parallel-sizes)."""


class CudaGraphs(str, Enum):
    """What a run captures in CUDA graphs, replayed instead of launching each kernel from the
    host (Megatron-LM --cuda-graph-impl @d98e8a64, docs/user-guide/features/cuda_graph.md)."""

    NONE = "none"
    """Every kernel launched from Python (--cuda-graph-impl none, the default)."""
    LAYER = "layer"
    """One graph per transformer layer's forward and backward (--cuda-graph-impl local, or
    transformer_engine: TE make_graphed_callables)."""
    FULL_ITERATION = "full_iteration"
    """The whole forward-backward of a step, the optimizer outside (--cuda-graph-impl
    full_iteration, which needs --no-check-for-nan-in-loss-and-grad)."""


class DpComm(str, Enum):
    """How data-parallel replicas exchange gradients."""

    ALL_REDUCE = "all_reduce"
    """Collective all-reduce (or reduce-scatter + all-gather under ZeRO)."""
    PARAMETER_SERVER = "parameter_server"
    """Workers push gradients to and pull weights from parameter servers (Li et al. 2014)."""


class PipelinePartition(str, Enum):
    """How a pipeline engine that places layers itself splits them over its stages (DeepSpeed
    PipelineModule(partition_method=...), deepspeed/runtime/pipe/module.py _partition_layers):
    balanced over the layer specs whose class name matches the pattern, each weighing 1."""

    TRANSFORMER = "type:transformer"
    """Transformer layers only (Megatron-DeepSpeed's GPTModelPipe default)."""
    TRANSFORMER_EMBEDDING = "type:transformer|embedding"
    """Transformer layers and the two embedding specs (input embedding on the first stage,
    tied output embedding on the last) count alike: the ends hold one layer fewer (BLOOM,
    `--pp-partition-method 'type:transformer|embedding'`)."""


class MicroBatchGroups(str, Enum):
    """How an interleaved pipeline schedule groups the micro-batches each model chunk runs in a
    row (`pipeline.schedule_group`)."""

    PP = "pp"
    """Groups of pp only: the micro-batches must be a multiple of pp (Megatron-LM before
    November 2024, the planner's other frameworks)."""
    SMALLEST = "smallest"
    """Any group N from pp to the micro-batches whose last group is whole or at least pp,
    set by the run (Megatron-LM --microbatch-group-size-per-virtual-pipeline-stage): the
    planner runs the smallest."""
    ROUNDS = "rounds"
    """Equal rounds of N = m / max(1, m // pp) micro-batches, where they divide m
    (torch.distributed.pipelining ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble,
    "flex_pp": number_of_rounds, microbatches_per_round)."""


class PipelineSchedule(str, Enum):
    """The order in which a pipeline runs its micro-batches' forward and backward passes
    (`pipeline.schedule_bubble_s`, `pipeline.in_flight_chunk_micro_batches`)."""

    ONE_F_ONE_B = "1f1b"
    """1F1B (Narayanan et al. 2021, Sec. 2.2.1), interleaved over the chunks with vpp > 1
    (Sec. 2.2.2): Megatron-LM's schedules, torch.distributed.pipelining Schedule1F1B and
    ScheduleInterleaved1F1B. The default."""
    ZERO_BUBBLE = "zero_bubble"
    """Each backward split into its input gradient (B) and its weight gradient (W), the W's
    run in the bubble (Qi et al. 2024, arXiv:2401.10241, ZB-H1): torch.distributed.pipelining
    ScheduleInterleavedZeroBubble (torchtitan InterleavedZeroBubble), any vpp."""
    ZBV = "zbv"
    """ZB-V: two chunks per rank placed in a V (rank r holds stages r and 2 pp - 1 - r), the
    W's in the bubble (Qi et al. 2024, Sec. 6): ScheduleZBVZeroBubble (torchtitan
    ZBVZeroBubble); vpp 2."""
    DUALPIPEV = "dualpipev"
    """DualPipeV: DeepSeek's DualPipe folded onto pp ranks of two V-placed chunks, one
    micro-batch's forward paired with another's backward (deepseek-ai/DualPipe):
    ScheduleDualPipeV (torchtitan DualPipeV); vpp 2, at least 2 pp micro-batches."""

    @property
    def v_shaped(self) -> bool:
        """Two stages on each rank, placed in a V (ZB-V and DualPipeV)."""
        return self in (PipelineSchedule.ZBV, PipelineSchedule.DUALPIPEV)


class MoeDispatcher(str, Enum):
    """How an MoE layer's tokens reach their experts' ranks and come back (Megatron-Core
    --moe-token-dispatcher-type, with --moe-flex-dispatcher-backend for flex;
    megatron/core/transformer/moe/README.md "Token Dispatching")."""

    ALLTOALL = "alltoall"
    """NCCL all-to-all of every (token, expert) copy (MoEAlltoAllTokenDispatcher)."""
    FLEX_DEEPEP = "flex-deepep"
    """DeepEP normal kernels: one copy per destination node over RDMA, NVLink forwarding
    inside a node of at most 8 GPUs."""
    FLEX_HYBRIDEP = "flex-hybridep"
    """HybridEP (DeepEP hybrid-ep branch): the same over the whole NVLink domain (MNNVL)."""

    @property
    def flex_backend(self) -> str | None:
        """The flex dispatcher's backend (--moe-flex-dispatcher-backend); None: not flex."""
        return self.value.removeprefix("flex-") if self is not MoeDispatcher.ALLTOALL else None
