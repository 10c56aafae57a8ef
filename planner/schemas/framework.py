"""A framework profile: which features and overlaps a training framework has, and its constants.

One YAML file per framework in planner/inputs/profiles/, each number with its source. The
cost model reads a profile; it never branches on a framework's name.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

from cost_models.enums import (AttentionKind, CpComm, Fp8Recipe, MasterWeights, MicroBatchGroups,
                               MoeDispatcher, PipelinePartition, PipelineSchedule, RankOrder)

_FROZEN = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Zero3Profile(BaseModel):
    """How a framework's ZeRO-3 / FSDP gathers parameters and reduces gradients."""

    model_config = _FROZEN
    fetches_per_block: PositiveInt
    """Separate parameter all-gathers per transformer block (FSDP: one unit per block;
    DeepSpeed: one per submodule whose parameters it fetches)."""
    collective_efficiency: float = Field(gt=0, le=1)
    """Share of NCCL's bus bandwidth its gathers and reduce-scatters reach."""
    overlap_fraction: float = Field(ge=0, le=1)
    """Share of its collectives that prefetching can hide behind compute."""


class BufferProfile(BaseModel):
    """Communication buffers a framework allocates outside the model's tensors."""

    model_config = _FROZEN
    grad_bucket_elements: NonNegativeFloat = 0
    """Gradient reduction bucket (ZeRO 1-2), in elements of the gradient dtype; 0 where buckets
    are views into a contiguous gradient buffer (Megatron-LM)."""
    grad_bucket_copies: PositiveInt = 1
    """Buckets alive at once (DeepSpeed double-buffers with overlap_comm)."""
    gather_bucket_elements: NonNegativeFloat = 0
    """Parameter all-gather bucket (ZeRO 1-2 after the step; ZeRO-3 prefetch), elements."""
    per_communicator_bytes: NonNegativeFloat = 0
    """Buffers the collective library reserves per communicator (HCCL: 2 x 200 MB)."""
    bf16_grad_copy_bytes_per_param: NonNegativeFloat = 0
    """A second gradient copy per parameter in bf16 training without ZeRO, or with ZeRO-1 under
    a pipeline, besides the fp32 gradients the model states count (DeepSpeed's BF16_Optimizer
    keeps each bf16 .grad)."""


class Fp8Profile(BaseModel):
    """How a framework trains in FP8."""

    model_config = _FROZEN
    recipes: tuple[Fp8Recipe, ...]
    """Scaling recipes it configures, its default first."""
    caches_weights: bool
    """Keeps each linear weight's FP8 copies across micro-batches (Transformer Engine's weight
    workspaces) rather than quantizing the weight in every pass (torchao)."""
    saves_fp8_inputs: bool
    """Saves each linear layer's input quantized for the backward pass (Transformer Engine)
    rather than in bf16 (torchao Float8Linear saves the high-precision input)."""
    param_gather_recipes: tuple[Fp8Recipe, ...] = ()
    """Recipes with which it can keep the linear weights as FP8 parameters and all-gather them
    in FP8 across data-parallel ranks (Megatron-LM --fp8-param-gather, torchtitan
    enable_fsdp_float8_all_gather)."""
    attention_recipes: tuple[Fp8Recipe, ...] = ()
    """Recipes with which it runs the attention core in FP8 too (training.fp8_attention);
    none: it has no FP8 attention."""
    output_layer_recipes: tuple[Fp8Recipe, ...] = ()
    """Recipes with which it can run the output layer in FP8 (training.fp8_output_layer);
    none: the output layer always stays bf16."""
    bf16_layers_recipes: tuple[Fp8Recipe, ...] = ()
    """Recipes with which it can keep the first and last transformer layers in bf16
    (training.bf16_first_layers / bf16_last_layers); none: it cannot."""
    separate_layout_recipes: tuple[Fp8Recipe, ...] = ()
    """Recipes it casts one GEMM layout at a time, each operand along the dimension its GEMM
    scales (torchao's axiswise rowwise), the layout torch._scaled_mm wants made by a separate
    transposing copy, all at the rates below; other recipes' casts write both layouts in one
    fused pass (Transformer Engine's cast-transpose; torchao's tensorwise casts under
    torch.compile)."""
    cast_efficiency: float = Field(default=1.0, gt=0, le=1)
    """The rate its casts of `separate_layout_recipes` move their bytes at, as a share of what
    the GPU's memory-bound kernels reach (`hbm_fraction`), measured."""
    layout_copy_elements_per_s: float | None = Field(default=None, gt=0)
    """The rate of those transposing copies (`fp8.layout_copy_s`), elements per second; None:
    no such copies."""


class OffloadProfile(BaseModel):
    """What a framework can keep in host memory, and how it moves it."""

    model_config = _FROZEN
    optimizer: bool
    """Keeps optimizer states in host memory and steps them on the CPU."""
    optimizer_min_zero: int = Field(default=0, ge=0, le=3)
    """The lowest ZeRO stage it offloads the optimizer from (Megatron-LM: the distributed
    optimizer; DeepSpeed: ZeRO-1; torchtitan: FSDP)."""
    optimizer_fraction: bool = False
    """Offloads any share of them (Megatron-LM --optimizer-offload-fraction), not all or none."""
    pipelined_step: bool = False
    """Pipelines the gradient copies, the CPU step and the weight copies per parameter."""
    params: bool = False
    """With ZeRO-3 / FSDP, keeps the weight and gradient shards in host memory too."""
    activations: str | None = Field(default=None, pattern="^(partial|all)$")
    """Activation offload: 'partial' offloads a chosen number of a stage's layers (at most all
    but one), 'all' every layer's checkpoint (with full recompute); None: none."""
    activation_copies_overlap: bool = False
    """Copies saved activations on a side stream while neighbouring layers compute, rather
    than blocking."""


class OverlapDefaults(BaseModel):
    """What the framework does when the user does not say (its flags' defaults)."""

    model_config = _FROZEN
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    tp_comm_overlap: bool
    fp8_param_gather: bool = False
    """FP8 parameters gathered in FP8, where the recipe and ZeRO allow (`Fp8Profile`)."""
    moe_a2a_overlap: bool = False
    """Expert all-to-all of one micro-batch hidden behind another's compute, where it applies
    (`FrameworkProfile.moe_a2a_overlap`)."""
    rank_order: RankOrder = RankOrder.TP_CP_EP_DP_PP
    """The rank order the framework builds its process groups in (`RankOrder`)."""
    moe_dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL
    """The MoE token dispatcher it runs unless told (`MoeDispatcher`)."""


class FrameworkProfile(BaseModel):
    """Features, overlaps and constants of one training framework."""

    model_config = _FROZEN
    name: str
    description: str
    interleaved_pipeline: bool
    """Has an interleaved (virtual-stage) pipeline schedule."""
    micro_batch_groups: MicroBatchGroups = MicroBatchGroups.PP
    """How its interleaved schedule groups the micro-batches each model chunk runs in a row
    (`MicroBatchGroups`): pp only (their number a multiple of pp), any group a run sets
    (Megatron-LM), or equal rounds (torch.distributed.pipelining)."""
    overlap_grad_reduce: bool
    """Can overlap the data-parallel gradient reduction with the backward pass."""
    overlap_grad_reduce_with_pipeline: bool
    """...also when there is a pipeline (DeepSpeed's engine reduces after the last micro-batch)."""
    overlap_param_gather: bool
    """Can overlap the distributed optimizer's parameter all-gather with the next forward."""
    tp_comm_overlap: bool
    """Can overlap tensor-parallel collectives with the GEMMs (TE userbuffers, async TP)."""
    tp_comm_overlap_fraction: float = Field(ge=0, le=1)
    rank_orders: tuple[RankOrder, ...] = (RankOrder.TP_CP_EP_DP_PP,)
    """The rank orders the framework can build its process groups in (Megatron-LM: both, the
    second with --use-tp-pp-dp-mapping; torchtitan's mesh and DeepSpeed's topology: the first)."""
    pipeline_schedules: tuple[PipelineSchedule, ...] = (PipelineSchedule.ONE_F_ONE_B,)
    """The pipeline schedules the framework runs (`PipelineSchedule`): 1F1B (interleaved with
    vpp > 1) everywhere; torchtitan also torch.distributed.pipelining's zero-bubble ones."""
    """Share of the tensor-parallel collectives that overlap hides behind the GEMMs."""
    pipeline_unsharded_accumulation: bool = False
    """Under a pipeline, FSDP keeps each stage's gradients unsharded (accumulated over the
    micro-batches, reduced after the last) and its 16-bit weights gathered through the step
    (torch.distributed.pipelining, `memory.model_state_bytes` unsharded_accumulation)."""
    master_weights: MasterWeights = MasterWeights.OPTIMIZER
    """Where mixed precision keeps the fp32 master weights: in the optimizer beside 16-bit
    parameters (Megatron-LM, DeepSpeed: 18 bytes per parameter for bf16 Adam), or as the fp32
    parameters themselves with a 16-bit copy only for compute (FSDP: 16 bytes per parameter
    sharded, plus the gathered copy; `memory.model_state_bytes`)."""
    pipeline_scatter_gather: bool
    """Sends 1/tp of a stage's output and all-gathers it (Narayanan et al. 2021, Sec. 4.1)."""
    pipeline_p2p_overlap_interleaved: bool = False
    """In the interleaved schedule, each pipeline send and receive runs while the device
    computes another chunk, so the transfers are hidden (Megatron-LM overlap_p2p_comm)."""
    pipeline_keeps_outputs: bool = False
    """The pipeline engine keeps each in-flight micro-batch's stage output (what it sent) for
    the backward pass, beside the activations the layers store."""
    pipeline_partitions: tuple[PipelinePartition, ...] = ()
    """The layer placements its pipeline engine makes by itself, whatever pp
    (`cost_models.pipeline.partitioned_layer_counts`), and the only ones it runs; empty: the
    even split (pp * vpp dividing the layers) or the layer counts a plan gives."""
    grad_bucket_elements_min: int = Field(default=0, ge=0)
    grad_bucket_elements_per_rank: int = Field(default=0, ge=0)
    """The overlapped data-parallel collectives run bucket by bucket, each bucket
    max(`grad_bucket_elements_min`, `grad_bucket_elements_per_rank` x dp) parameters
    (`cost_models.data_parallel.ddp_bucket_count`); 0 and 0: one collective per stage."""
    step_host_s: NonNegativeFloat = 0
    """Seconds per step the GPUs wait on the host, once per step whatever the step's size
    (`cost_models.step_fixed.step_sync_time_s`); fitted, see the profile."""
    step_cross_node_s: NonNegativeFloat = 0
    """Seconds more per step where the job spans more than one NVLink domain; fitted, see the
    profile."""
    pipeline_layer_overhead_s: NonNegativeFloat = 0
    """Seconds the pipeline engine adds per layer a stage holds and per micro-batch, beyond
    compute and transfers; fitted, see the profile."""
    pipeline_engine_single_stage: bool = False
    """The model runs in the pipeline engine with one stage too (Megatron-DeepSpeed's
    pretrain_gpt.py builds GPTModelPipe unless --no-pipeline-parallel), paying
    `pipeline_layer_overhead_s` at pp 1."""
    zeroes_grad_buffer: bool = False
    """Zeroes a contiguous gradient buffer (every local gradient) before each step's first
    micro-batch (Megatron-LM DDP zero_grad_buffer); False where gradients are set to None
    instead (PyTorch optimizer.zero_grad(set_to_none=True), DeepSpeed ZeRO zero_grad)."""
    clips_grad_norm: bool = False
    """Computes the global gradient norm and clips every step (Megatron-LM --clip-grad 1.0,
    torchtitan training.max_norm 1.0): passes over the local gradients and an all-reduce of
    one value (`cost_models.step_fixed.grad_clip_time_s`)."""
    reduces_loss_every_step: bool = False
    """All-reduces the loss over the data x context-parallel group every step (Megatron-LM
    train_step); False where only logging steps reduce it."""
    selective_recompute_attention: bool = True
    """Selective recomputation re-runs the attention core (Megatron-LM; Korthikanti et al.
    2022, Sec. 5); False where the framework saves the attention output instead."""
    selective_recompute_gemm_share: float = Field(default=0.0, ge=0, le=1)
    """Share of the dense GEMMs' forward that selective recomputation re-runs."""
    selective_keeps_alternate_linears: bool = False
    """Selective recomputation keeps of a dense layer only its input, the attention kernel's
    outputs and every second linear layer's output (torchtitan's per-op policy,
    `memory.op_sac_layer_activation_bytes`); False: all but what the recompute modules drop
    (Megatron-LM)."""
    selective_fp8_linears_as_mm: bool = False
    """With selective_keeps_alternate_linears, under FP8: the policy sees each FP8 linear as
    an aten.mm (torchao's Float8Tensor subclass takes the mm and runs _scaled_mm beneath the
    policy) and keeps every second one, as in bf16; False: it sees aten._scaled_mm, one of
    PyTorch's compute-intensive ops (torchtitan's save set since #2357, 2026-03-23), keeps
    every one and the backward re-runs none."""
    selective_recompute_elementwise: bool = False
    """Selective recomputation also re-runs a layer's memory-bound ops (norms, rotary
    embedding, activation, residual adds): torchtitan's per-op policy saves only matmuls and
    attention (parallelize_llama.py _save_list); False where they are kept (Megatron-LM)."""
    complex_rotary: bool = False
    """Its rotary embedding multiplies complex numbers (torchtitan's ComplexRoPE: Llama 3,
    DeepSeek-V3; models/common/rope.py), which torch.compile leaves to eager kernels: priced
    eager even when compiled (`compute.complex_rotary_extra_bytes`)."""
    eager_expert_bias: bool = False
    """Biased experts (gpt-oss) add their output bias as eager PyTorch ops after the grouped
    GEMM (Megatron-Core's TEGroupedMLP without the Transformer Engine op fuser:
    `compute.expert_bias_bytes`); False where nothing is known to add it apart."""
    eager_glu_clamp: bool = False
    """A clamped GLU (gpt-oss's experts) clamps and concatenates its input as eager PyTorch ops
    before the fused activation (Megatron-Core's weighted_bias_quick_geglu_impl without the
    Transformer Engine op fuser: `compute.glu_clamp_bytes`); False where the clamp is fused
    or nothing is known of it."""
    expert_gemms_one_kernel: bool = False
    """The routed experts' GEMMs run as one grouped kernel (torch._grouped_mm: torchtitan), whose
    tiles of every local expert fill the GPU together; False: one GEMM kernel per expert
    (Transformer Engine's grouped linear on Hopper: a cuBLAS GEMM per expert over 4 streams,
    measured no faster than one stream, bench/data/kernels_h100_grouped_streams.json; a loop
    of per-expert GEMMs), each filling it alone (`compute.gemm_time_s` fill_batch)."""
    moe_dispatchers: tuple[MoeDispatcher, ...] = (MoeDispatcher.ALLTOALL,)
    """The MoE token dispatchers it runs, which the search tries (on the GPUs that run them,
    rule moe_flex_hardware); a config that names none runs `defaults.moe_dispatcher`."""
    moe_padding_copies: tuple[MoeDispatcher, ...] = ()
    """The dispatchers after which a quantized (FP8/FP4) grouped expert GEMM's tokens are
    padded to the recipe's alignment by copies (`compute.quantization_padding_bytes`); the
    others pad as they dispatch."""
    tp_comm_overlap_needs_compile: bool = False
    """Its TP overlap runs only in a compiled model (torchtitan: "Async TP requires 'model' in
    --compile.components", torchtitan/config/configs.py): off where
    training.compile is false."""
    compiles: bool | None = None
    """Whether a run compiles its model unless it says (training.compile): torchtitan's
    configs as the planner writes them ([compile] enable); None: the framework runs its own
    fused kernels (Megatron-LM, Transformer Engine) and training.compile has no effect."""
    torch_cross_entropy: bool = False
    """Its loss is PyTorch's F.cross_entropy on the logits cast to fp32 (torchtitan
    components/loss.py), which eager holds 12 bytes per logit at its peak, 16 under DTensor's
    loss_parallel (`memory.eager_cross_entropy_working_bytes`); False: a fused
    vocabulary-parallel cross entropy (Megatron-LM) that keeps the fp32 logits only. The loss
    compiles with the model unless the run says (`TrainingSpec.compile_loss`)."""
    loss_keeps_logits: bool = False
    """The model returns its 16-bit logits and the training step holds them through the
    backward, beside the loss's fp32 copies (Hugging Face's CausalLMOutputWithPast; a plain
    script's `logits, loss = model(x, y)`): `memory.returned_logits_bytes` more kept on the
    last stage; False where the step drops them (torchtitan's `del pred`) or the loss is fused
    (Megatron-LM)."""
    recompute_modules: bool = False
    """Selective recomputation re-runs the submodules a run names (Megatron-Core
    --recompute-modules, `RecomputeModule`); False: only its own selective policy, priced as
    recompute_modules core_attn."""
    attention: AttentionKind
    """The attention kernel a run gets unless it says (training.attention, --attention):
    flash wherever the framework runs a fused kernel by default."""
    expert_parallel: bool = False
    """Splits an MoE layer's routed experts over expert-parallel ranks."""
    ep_comm_overlap_fraction: float = Field(default=0.0, ge=0, le=1)
    """Share of the expert-parallel all-to-all hidden behind compute without moe_a2a_overlap."""
    moe_dispatcher_sync_s: float = Field(default=0.0, ge=0)
    """GPU idle time of the token dispatcher's host synchronisation, per MoE layer and forward
    pass (`expert_parallel.dispatcher_sync_s`); 0 where the dispatcher does not sync."""
    moe_token_path_host_s: float = Field(default=0.0, ge=0)
    moe_gemm_launch_host_s: float = Field(default=0.0, ge=0)
    moe_quantize_launch_host_s: float = Field(default=0.0, ge=0)
    """Host seconds to issue one MoE layer's token path in one pass outside a CUDA graph:
    `moe_token_path_host_s` for the dispatcher's and permutation's kernels, plus
    `moe_gemm_launch_host_s` per expert GEMM and `moe_quantize_launch_host_s` per expert FP8
    cast (`expert_parallel.moe_host_s`); the GPU waits where they exceed its work. 0: not
    priced."""
    moe_a2a_overlap_interference: float | None = Field(default=None, ge=0, le=1)
    """Share of an overlapped expert all-to-all's time the compute beside it still loses
    (`communication.overlap_pieces`); None: the cluster's overlap_interference."""
    moe_a2a_overlap: bool = False
    """Can overlap one micro-batch's expert all-to-all with another micro-batch's compute
    (Megatron-Core's combined 1F1B schedule, --overlap-moe-expert-parallel-comm)."""
    context_parallel: tuple[CpComm, ...] = ()
    """The ways it exchanges keys and values across context-parallel ranks (empty: no CP)."""
    fp8: Fp8Profile | None = None
    """FP8 training (None: the framework has no FP8 setting)."""
    offload: OffloadProfile | None = None
    """CPU offload (None: the framework keeps everything on the GPU)."""
    zero3: Zero3Profile
    buffers: BufferProfile
    defaults: OverlapDefaults
    sources: tuple[str, ...]
