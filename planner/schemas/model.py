"""The model: an ordered chain of blocks, and the training settings that go with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cost_models.compute import MlaDims, MoeDims
from cost_models.enums import (AttentionKind, LoadBalancing, MlpKind, NormKind, Optimizer,
                               PositionKind, Precision, Fp8Recipe)
from cost_models.evoformer import EvoformerShape, evoformer_block_params
from cost_models.memory import StateBytes, state_bytes_per_param
from cost_models.parameters import (ParamCount, attention_params, embedding_params, mla_params,
                                    mlp_params, moe_params, norm_params, output_head_params)
from planner.schemas.bounds import GlobalBatch, NonNegativeInt, PositiveInt, SeqLen

if TYPE_CHECKING:
    from planner.schemas.framework import FrameworkProfile

_FROZEN = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True,
                     allow_inf_nan=False)


class EmbeddingBlock(BaseModel):
    """Token embedding (vocabulary-parallel), with optional learned positions and a norm."""

    model_config = _FROZEN
    kind: Literal["embedding"] = "embedding"
    vocab_size: PositiveInt
    hidden: PositiveInt
    position: PositionKind = PositionKind.ROTARY
    max_positions: NonNegativeInt = 0
    """Rows of a learned position table (0 unless `position` is learned)."""
    num_token_types: NonNegativeInt = 0
    """BERT's segment embeddings."""
    norm: NormKind | None = None
    """A norm right after the embedding (BERT, BLOOM)."""
    dropout: bool = True

    def params(self) -> ParamCount:
        positions = self.max_positions if self.position is PositionKind.LEARNED else 0
        return embedding_params(vocab_size=self.vocab_size, hidden=self.hidden,
                                num_positions=positions, num_token_types=self.num_token_types,
                                norm=self.norm)


class TransformerBlock(BaseModel):
    """One transformer layer: self-attention and an MLP (dense or mixture of experts)."""

    model_config = _FROZEN
    kind: Literal["transformer"] = "transformer"
    hidden: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt | None = None
    """Grouped-query attention heads; None means num_heads (multi-head attention)."""
    head_dim: PositiveInt | None = None
    """None means hidden / num_heads."""
    ffn_hidden: PositiveInt | None = None
    """MLP inner width; None means 4 * hidden."""
    mlp: MlpKind = MlpKind.GELU
    norm: NormKind = NormKind.LAYERNORM
    norms_per_layer: Literal[1, 2, 4] = 2
    """Falcon-7B's parallel attention shares one norm; Gemma 2/3 normalise each sub-layer's
    input and output (pre- and post-norm: 4), and every norm keeps its input for backward."""
    position: PositionKind = PositionKind.LEARNED
    """Rotary embeddings add a memory-bound kernel on Q and K."""
    partial_rotary: float = Field(1.0, gt=0, le=1)
    """The share of each head's dimensions the rotary embedding turns (GLM-4.5, Nemotron-4:
    0.5; Phi-2: 0.4; Megatron-LM --rotary-percent). No parameters; Transformer Engine's fused
    rotary kernel reads and writes the whole head either way (it copies the rest), so the
    kernel is priced on the whole head."""
    causal: bool = True
    bias: bool = True
    """Biases on every linear layer (GPT-2/3, BLOOM, BERT); Llama has none."""
    qkv_bias: bool = False
    """Biases on Q, K, V only (Qwen2)."""
    dropout: bool = True
    qk_norm: bool = False
    """RMSNorm on each head's queries and keys (Qwen3): 2 d parameters."""
    qk_norm_per_head: bool = False
    """The query and key norms hold weights per head, (heads + kv heads) d of them, split
    with the heads (Command R+'s (heads, d) norms; OLMo 2's over the whole projection), not
    one d vector the heads share (Qwen3). Only the parameter count differs."""
    attention_sinks: bool = False
    """A learned sink logit per head (gpt-oss)."""
    sliding_window: PositiveInt | None = None
    """Keys each query sees at most (a local attention layer); None: the whole context."""
    attention_chunk: PositiveInt | None = None
    """Chunked local attention (Llama 4's attention_chunk_size): each query sees only the keys
    of its own block of this many positions; None: no chunking. Not with `sliding_window`."""
    q_lora_rank: NonNegativeInt = 0
    """Multi-head latent attention (DeepSeek-V2/V3): rank of the query latent (0: no query
    compression)."""
    kv_lora_rank: NonNegativeInt = 0
    """Rank of MLA's key-value latent; 0 means ordinary (GQA) attention. With MLA, `head_dim`
    is the non-rotary query/key head dim."""
    qk_rope_head_dim: NonNegativeInt = 0
    """MLA's decoupled rotary query/key head dim."""
    v_head_dim: PositiveInt | None = None
    """MLA's value head dim (None: head_dim)."""
    num_experts: PositiveInt = 1
    """Routed experts; 1 is a dense MLP."""
    top_k: PositiveInt = 1
    """Routed experts per token."""
    moe_ffn_hidden: PositiveInt | None = None
    """Inner width of one routed expert (None: ffn_hidden)."""
    shared_ffn_hidden: NonNegativeInt = 0
    """Inner width of the shared experts every token also passes through (DeepSeek: n_shared
    x the expert width; Qwen2-MoE: shared_expert_intermediate_size); 0 for none."""
    shared_expert_gate: bool = False
    """A sigmoid gate (h x 1) on the shared expert's output (Qwen2-MoE)."""
    router_bias: bool = False
    """A bias per expert in the router (gpt-oss; DeepSeek-V3's e_score_correction_bias)."""
    glu_clamp: float | None = Field(None, gt=0)
    """The routed experts' gated MLP clamps its input: the gate from above and the linear half
    to [-limit, limit] (gpt-oss: 7; HF swiglu_limit, Megatron-Core activation_func_clamp_value).
    None: no clamp. A dense MLP's clamp is not priced (no model has one)."""
    load_balancing: LoadBalancing = LoadBalancing.AUX_LOSS
    """How the router balances the experts' load (sets the dropless imbalance)."""
    capacity_factor: float | None = Field(None, gt=0)
    """Token-drop routing: each expert takes at most this many times its even share of the
    tokens. None: dropless (every token reaches its experts)."""
    router_groups: PositiveInt | None = None
    """Group-limited routing: the experts in this many equal groups, each token's top_k taken
    from its `router_group_topk` best groups (DeepSeek-V3 n_group 8 = its 8 nodes, Sec. 3.2.2;
    Megatron-LM --moe-router-num-groups). None: no groups."""
    router_group_topk: PositiveInt | None = None
    """Groups a token may use under group-limited routing (DeepSeek-V3 topk_group 4;
    Megatron-LM --moe-router-group-topk)."""
    keep_bf16: bool = Field(False, exclude=True)
    """Kept out of FP8 (and FP4) under low-precision training: its linear layers and its
    attention run in bf16 (Megatron-LM --first-last-layers-bf16). Set from the run's
    training.bf16_first_layers / bf16_last_layers when the problem is built
    (`ModelSpec.with_bf16_layers`), never read from a model file (and left out of dumps)."""

    @model_validator(mode="before")
    @classmethod
    def _keep_bf16_is_the_runs(cls, data):
        if isinstance(data, dict) and "keep_bf16" in data:
            raise ValueError("keep_bf16 is a setting of the run: give training.bf16_first_layers "
                             "/ bf16_last_layers")
        return data

    @model_validator(mode="after")
    def _one_local_attention(self):
        if self.sliding_window is not None and self.attention_chunk is not None:
            raise ValueError("sliding_window and attention_chunk: a layer attends locally "
                             "through one of them")
        return self

    @model_validator(mode="after")
    def _partial_rotary_needs_rotary(self):
        if self.partial_rotary < 1 and self.position is not PositionKind.ROTARY:
            raise ValueError(f"partial_rotary ({self.partial_rotary:g}) turns part of each head "
                             f"with rotary positions: it needs position rotary (got "
                             f"{self.position.value})")
        return self

    @model_validator(mode="after")
    def _per_head_needs_norms(self):
        if self.qk_norm_per_head and not self.qk_norm:
            raise ValueError("qk_norm_per_head describes the query and key norms: set qk_norm "
                             "too, or drop it")
        return self

    @model_validator(mode="after")
    def _router_groups(self):
        g, top = self.router_groups, self.router_group_topk
        if (g is None) != (top is None):
            raise ValueError("router_groups and router_group_topk go together")
        if g is not None and (self.num_experts % g or top > g):
            raise ValueError(f"router_groups ({g}) must divide num_experts ({self.num_experts}) "
                             f"and be at least router_group_topk ({top})")
        return self

    @model_validator(mode="after")
    def _heads_divide_hidden(self):
        if self.head_dim is None and self.hidden % self.num_heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by num_heads "
                             f"({self.num_heads})")
        return self

    @model_validator(mode="after")
    def _kv_heads_divide_heads(self):
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be divisible by num_kv_heads "
                             f"({self.num_kv_heads})")
        return self

    @model_validator(mode="after")
    def _top_k_within_experts(self):
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) must not exceed num_experts "
                             f"({self.num_experts})")
        return self

    @model_validator(mode="after")
    def _mla_is_complete(self):
        if self.kv_lora_rank and not self.qk_rope_head_dim:
            raise ValueError("kv_lora_rank (multi-head latent attention) needs qk_rope_head_dim")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def mla(self) -> MlaDims | None:
        if not self.kv_lora_rank:
            return None
        return MlaDims(self.q_lora_rank, self.kv_lora_rank, self.qk_rope_head_dim,
                       self.v_head_dim or self.dim_per_head)

    @property
    def moe(self) -> MoeDims | None:
        return MoeDims(self.num_experts, self.top_k, self.expert_ffn) if self.is_moe else None

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden or self.ffn

    @property
    def tp_ffn(self) -> int:
        """Width of the tensor-parallel MLP: the dense MLP, or an MoE layer's shared experts."""
        return self.shared_ffn_hidden if self.is_moe else self.ffn

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden // self.num_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def tp_head_counts(self) -> tuple[int, ...]:
        """Head counts tensor parallelism must divide (MLA has no separate key-value heads)."""
        return (self.num_heads,) if self.mla else (self.num_heads, self.kv_heads)

    @property
    def attention_core_shape(self) -> tuple[int, int, int]:
        """(key/value heads, query-key dim, value dim) of the attention core: MLA expands keys
        and values per query head, with d_nope + d_rope and d_v (DeepSeek-V2, Sec. 2.1.2)."""
        mla = self.mla
        if mla is None:
            return self.kv_heads, self.dim_per_head, self.dim_per_head
        return self.num_heads, self.dim_per_head + mla.qk_rope_head_dim, mla.v_head_dim

    def params(self) -> ParamCount:
        mla = self.mla
        if mla is None:
            attention = attention_params(hidden=self.hidden, num_heads=self.num_heads,
                                         num_kv_heads=self.kv_heads, head_dim=self.dim_per_head,
                                         bias=self.bias, qkv_bias=self.qkv_bias)
        else:
            attention = mla_params(hidden=self.hidden, num_heads=self.num_heads,
                                   q_lora_rank=mla.q_lora_rank, kv_lora_rank=mla.kv_lora_rank,
                                   qk_nope_head_dim=self.dim_per_head,
                                   qk_rope_head_dim=mla.qk_rope_head_dim,
                                   v_head_dim=mla.v_head_dim, norm=self.norm)
        if self.is_moe:
            mlp = moe_params(hidden=self.hidden, expert_ffn_hidden=self.expert_ffn, mlp=self.mlp,
                             bias=self.bias, num_experts=self.num_experts,
                             shared_ffn_hidden=self.shared_ffn_hidden,
                             router_bias=self.router_bias)
            if self.shared_expert_gate:
                mlp = mlp + ParamCount(0, self.hidden)
        else:
            mlp = mlp_params(hidden=self.hidden, ffn_hidden=self.ffn, mlp=self.mlp,
                             bias=self.bias)
        norms = self.norms_per_layer * norm_params(hidden=self.hidden, norm=self.norm).replicated
        per_head = 0
        if self.qk_norm and self.qk_norm_per_head:    # Command R+, OLMo 2: per head
            per_head = (self.num_heads + self.kv_heads) * self.dim_per_head
        elif self.qk_norm:   # Qwen3, Gemma 3: one RMSNorm of head_dim for queries, one for keys
            norms += 2 * self.dim_per_head
        sinks = self.num_heads if self.attention_sinks else 0      # sharded with the heads
        return attention + mlp + ParamCount(sinks + per_head, norms)

    def active_params(self) -> ParamCount:
        """Parameters a token passes through: all but the routed experts it is not sent to."""
        total = self.params()
        idle = (self.num_experts - self.top_k) * total.expert // self.num_experts
        return ParamCount(total.sharded, total.replicated, total.expert - idle)


class MtpBlock(BaseModel):
    """A multi-token-prediction module (DeepSeek-V3, arXiv:2412.19437, Sec. 2.2, Eq. 21-23):
    the previous depth's hidden state and the next token's embedding, each normalised, are
    concatenated and projected (2h -> h), run through one transformer layer, normalised and fed
    to the shared output head for one more token's loss. Embedding and output head are the
    main model's (Megatron-LM --mtp-num-layers puts the module on the last pipeline stage)."""

    model_config = _FROZEN
    kind: Literal["mtp"] = "mtp"
    layer: TransformerBlock
    vocab_size: PositiveInt

    @property
    def hidden(self) -> int:
        return self.layer.hidden

    def _own(self) -> ParamCount:
        h = self.hidden
        norms = 3 * norm_params(hidden=h, norm=self.layer.norm).replicated   # enorm, hnorm, final
        return ParamCount(2 * h * h, norms)          # the projection is TP-sharded

    def params(self) -> ParamCount:
        return self.layer.params() + self._own()

    def active_params(self) -> ParamCount:
        return self.layer.active_params() + self._own()

    @property
    def embedding_copy(self) -> int:
        """Word-embedding parameters this block needs on its own stage: the module embeds the
        next tokens, so Megatron-Core builds the word embedding on every stage that runs it
        (models/gpt/gpt_model.py @d98e8a64, `if self.pre_process or self.mtp_process`) and
        keeps it equal to the first stage's through the embedding group's gradient
        all-reduce."""
        return self.vocab_size * self.hidden


class NormBlock(BaseModel):
    """The final norm before the output layer."""

    model_config = _FROZEN
    kind: Literal["norm"] = "norm"
    hidden: PositiveInt
    norm: NormKind = NormKind.LAYERNORM

    def params(self) -> ParamCount:
        return norm_params(hidden=self.hidden, norm=self.norm)


class OutputBlock(BaseModel):
    """The output layer (logits) and the loss."""

    model_config = _FROZEN
    kind: Literal["output"] = "output"
    vocab_size: PositiveInt
    hidden: PositiveInt
    tied: bool = False
    """Shares the word-embedding matrix (counted once in the model's parameters)."""
    transform_norm: NormKind | None = None
    """BERT's masked-LM head: a dense h x h transform and a norm before the logits."""
    bias: bool = False
    """A vocabulary bias on the logits (BERT)."""

    def params(self) -> ParamCount:
        return output_head_params(vocab_size=self.vocab_size, hidden=self.hidden,
                                  tied=self.tied, transform_norm=self.transform_norm,
                                  bias=self.bias)

    @property
    def embedding_copy(self) -> int:
        """Word-embedding parameters this block needs on its own stage: a tied layer computes
        the logits with the embedding matrix, so a stage without the embedding keeps a copy
        (Megatron-LM, which all-reduces its gradient with the first stage's)."""
        return self.vocab_size * self.hidden if self.tied else 0


class EvoformerBlock(BaseModel):
    """One AlphaFold-2 Evoformer block (Jumper et al. 2021, Suppl. Algorithm 6).

    Its sequence length is the number of residues; `num_msa_rows` is the MSA depth."""

    model_config = _FROZEN
    kind: Literal["evoformer"] = "evoformer"
    msa_dim: PositiveInt = 256
    pair_dim: PositiveInt = 128
    num_msa_heads: PositiveInt = 8
    num_pair_heads: PositiveInt = 4
    head_dim: PositiveInt = 32
    outer_dim: PositiveInt = 32
    tri_mul_dim: PositiveInt = 128
    transition_factor: PositiveInt = 4
    num_msa_rows: PositiveInt = 128
    attention: AttentionKind = AttentionKind.UNFUSED
    """The kernel of its MSA and pair attention (OpenFold's default: unfused; its
    use_flash / use_deepspeed_evo_attention are fused). A block setting, beside the run's
    `attention` that sets the transformer layers' kernel."""

    @property
    def shape(self) -> EvoformerShape:
        return EvoformerShape(self.msa_dim, self.pair_dim, self.num_msa_heads,
                              self.num_pair_heads, self.head_dim, self.outer_dim,
                              self.tri_mul_dim, self.transition_factor, self.num_msa_rows)

    @property
    def tp_head_counts(self) -> tuple[int, ...]:
        return (self.num_msa_heads, self.num_pair_heads)

    def params(self) -> ParamCount:
        return evoformer_block_params(self.shape)


Block = Annotated[
    Union[EmbeddingBlock, TransformerBlock, NormBlock, OutputBlock, EvoformerBlock, MtpBlock],
    Field(discriminator="kind"),
]
REPEATED_KINDS = ("transformer", "evoformer")
"""Block kinds that make up the repeated body of a model (the `layers` a pipeline splits)."""


class TrainingSpec(BaseModel):
    """Training settings that go with a model; CLI flags override them."""

    model_config = _FROZEN
    seq_len: SeqLen = 2048
    """Tokens per sequence (residues for an Evoformer)."""
    global_batch: GlobalBatch | None = None
    """Sequences per optimizer step; None: about 4M tokens (`loader.DEFAULT_TOKENS_PER_BATCH`)
    at whatever seq_len the run uses."""
    precision: Precision = Precision.BF16
    fp8_recipe: Fp8Recipe | None = None
    """How FP8 tensors are scaled, with precision fp8; None: the framework's default recipe
    that the GPU runs."""
    optimizer: Optimizer = Optimizer.ADAM
    bf16_gradients: bool = False
    """Mixed precision: accumulate and reduce the gradients in bf16 (Megatron-LM
    --grad-reduce-in-bf16); False: in fp32, Megatron-LM's default for bf16 and FP8."""
    bf16_moments: bool = False
    """Adam keeps its two moments in bf16 beside the fp32 master weights (Megatron-LM
    --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, Transformer
    Engine's FusedAdam; Megatron-Bridge's DeepSeek recipes); False: in fp32."""
    attention: AttentionKind | None = None
    """The attention kernel of the transformer layers: flash (fused, no s x s scores kept) or
    unfused (the scores, softmax and dropout mask stored for the backward pass, as 2020-2022
    runs did). A setting of the run, not of the model: None is the framework's default
    (`FrameworkProfile.attention`: flash wherever the framework has it)."""
    compile: bool | None = None
    """torch.compile of the model (torchtitan `[compile] enable` with "model" in its
    components): the norms, rotary embedding, activation and residual adds run as fused
    kernels; False: as eager PyTorch ops, each a kernel that reads its inputs and writes its
    output (`cost_models.compute.eager_layer_elementwise_bytes`). None: the framework's default
    (`FrameworkProfile.compiles`); no effect where the framework runs its own fused kernels."""
    compile_loss: bool | None = None
    """torch.compile of the loss (torchtitan: "loss" in [compile] components): fused, the
    logits' fp32 copy is all it keeps; False: PyTorch's eager cross entropy, 12 bytes per logit
    at its peak, 16 under DTensor's loss_parallel with TP
    (`cost_models.memory.eager_cross_entropy_working_bytes`). None: compiled with the model
    (torchtitan's default components since bbb1b616e, 2025-04; its 2024 releases left the loss
    eager: say false for them); no effect where the framework has a fused loss of its own
    (Megatron-LM)."""
    fp8_attention: bool = False
    """With precision fp8: the attention core (Q K^T, softmax . V), forward and backward, in
    FP8 as well (Transformer Engine's FP8 DotProductAttention, fp8_dpa in its recipe;
    Megatron-Core TransformerConfig.fp8_dot_product_attention); False: bf16 attention."""
    fp8_output_layer: bool = False
    """With precision fp8: the output layer (logits GEMM) in FP8 as well (Megatron-LM
    --fp8-output-proj, MXFP8 only; torchtitan: "output" left out of filter_fqns); False: in
    bf16, every framework's default."""
    bf16_first_layers: NonNegativeInt = 0
    """With precision fp8: the first N transformer layers kept in bf16 (Megatron-LM
    --first-last-layers-bf16 --num-layers-at-start-in-bf16 N)."""
    bf16_last_layers: NonNegativeInt = 0
    """With precision fp8: the last N transformer layers kept in bf16 (Megatron-LM
    --num-layers-at-end-in-bf16 N)."""

    def attention_kernel(self, framework: FrameworkProfile, *, sinks: bool = False
                         ) -> AttentionKind:
        """The attention kernel the run uses: its own, else its framework's default. With
        attention sinks (`sinks`) a FlashAttention-2 default gives way to flash: FA2 has no
        sinks, and Hugging Face runs GPT-OSS on FlashAttention-3 with them
        (kernels-community/vllm-flash-attn3), Transformer Engine on cuDNN."""
        if self.attention is not None:
            return self.attention
        if sinks and framework.attention is AttentionKind.FLASH2:
            return AttentionKind.FLASH
        return framework.attention

    @property
    def state_bytes(self) -> StateBytes:
        """Bytes per parameter of weights, gradients and optimizer state, unsharded."""
        return state_bytes_per_param(self.precision, self.optimizer,
                                     gradients_16bit=self.bf16_gradients,
                                     moments_16bit=self.bf16_moments)

    @property
    def low_precision_extras(self) -> tuple[str, ...]:
        """What the run puts in FP8 beyond the linear layers, or keeps out of it: 'fp8
        attention', 'fp8 output layer', 'bf16 layers 1+1' (first + last)."""
        extras = []
        if self.fp8_attention:
            extras.append("fp8 attention")
        if self.fp8_output_layer:
            extras.append("fp8 output layer")
        if self.bf16_first_layers or self.bf16_last_layers:
            extras.append(f"bf16 layers {self.bf16_first_layers}+{self.bf16_last_layers}")
        return tuple(extras)

    def eager_elementwise(self, framework: FrameworkProfile) -> bool:
        """The layers' memory-bound ops run as eager PyTorch ops: the run (else its framework)
        does not compile, on a framework without fused kernels of its own."""
        if framework.compiles is None:
            return False
        return not (framework.compiles if self.compile is None else self.compile)

    def eager_loss(self, framework: FrameworkProfile) -> bool:
        """The loss runs as PyTorch's eager cross entropy: the framework's loss is
        F.cross_entropy (`FrameworkProfile.torch_cross_entropy`) and the run does not compile
        it (compile_loss; unset: compiled with the model)."""
        if not framework.torch_cross_entropy:
            return False
        if self.compile_loss is not None:
            return not self.compile_loss
        return self.eager_elementwise(framework)

    @property
    def precision_label(self) -> str:
        """'bf16', 'fp8 (tensorwise)' with the FP8 recipe, or 'nvfp4' (its linear layers in
        FP4); then what else runs in FP8 or stays bf16 ('fp8 (tensorwise), fp8 attention')."""
        if self.precision is Precision.FP8 and self.fp8_recipe is Fp8Recipe.NVFP4:
            label = self.fp8_recipe.value
        elif self.precision is Precision.FP8 and self.fp8_recipe is not None:
            label = f"{self.precision.value} ({self.fp8_recipe.value})"
        else:
            label = self.precision.value
        return ", ".join((label, *self.low_precision_extras))


class Source(BaseModel):
    """Where a zoo model's numbers come from."""

    model_config = _FROZEN
    reference: str
    """Key in cost_models/references.py."""
    where: str
    published_num_params: float
    """The parameter count its authors publish; tests pin the model against it."""
    published_rounding: float = 0.0
    """Half the last printed digit of `published_num_params` (0 for an exact count)."""
    notes: str | None = None


class ModelSpec(BaseModel):
    """A model as the cost models see it: an ordered chain of blocks."""

    model_config = _FROZEN
    name: str
    blocks: tuple[Block, ...]
    description: str | None = None
    max_context: PositiveInt | None = None
    """The longest sequence the model was built for (Hugging Face max_position_embeddings);
    None where the file does not say."""
    source: Source | None = None
    notes: tuple[str, ...] = ()
    """What the model leaves out that its file describes (a Hugging Face config's vision
    tower); the loader passes them on to the plan's notes."""

    def __hash__(self) -> int:
        # The costing caches key on the model; pydantic's hash would hash every block of the
        # chain (10,000 layers: the same few objects again and again). Equal models have equal
        # chains, hence the same set of distinct blocks.
        distinct = frozenset({id(b): b for b in self.blocks}.values())
        return hash((self.name, self.description, self.max_context, self.source,
                     len(self.blocks), distinct))

    @model_validator(mode="after")
    def _has_layers(self):
        if not any(b.kind in REPEATED_KINDS for b in self.blocks):
            raise ValueError("the model has no transformer or evoformer blocks")
        return self

    @property
    def num_params(self) -> int:
        """Parameters of the model, without its multi-token-prediction modules (a training-only
        head: DeepSeek-V3's 671B excludes its 14B; they are `num_mtp_params`)."""
        return sum(b.params().total for b in self.blocks if b.kind != "mtp")

    @property
    def num_mtp_params(self) -> int:
        return sum(b.params().total for b in self.blocks if b.kind == "mtp")

    @property
    def num_active_params(self) -> int:
        """Parameters one token's forward pass uses: all but the routed experts it skips (the
        convention of Mixtral's 12.9B and DeepSeek-V3's 37B, embeddings included)."""
        return sum((b.active_params() if isinstance(b, TransformerBlock) else b.params()).total
                   for b in self.blocks if b.kind != "mtp")

    @property
    def is_moe(self) -> bool:
        return any(getattr(b, "is_moe", False) for b in self.blocks)

    @property
    def wide_experts(self) -> bool:
        """Some MoE layer's experts are at least as wide inside as the model (Mixtral's 14,336
        against 4,096), not fine-grained (DeepSeek-V3's 2,048 against 7,168)."""
        return any(getattr(b, "is_moe", False) and b.expert_ffn >= b.hidden for b in self.blocks)

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer (the largest, should layers differ); 1 if dense."""
        return max((getattr(b, "num_experts", 1) for b in self.blocks), default=1)

    def with_bf16_layers(self, first: int, last: int) -> ModelSpec:
        """The chain with its first `first` and last `last` transformer layers marked
        `keep_bf16` and the others not (Megatron-Core fp8_utils.is_first_last_bf16_layer counts
        the decoder's layers, not those of multi-token-prediction modules); the model itself
        where that changes nothing."""
        positions = [i for i, b in enumerate(self.blocks) if isinstance(b, TransformerBlock)]
        kept = set(positions[:first]) | set(positions[len(positions) - last:] if last else ())
        if all(self.blocks[i].keep_bf16 == (i in kept) for i in positions):
            return self
        blocks = list(self.blocks)
        for i in positions:
            if blocks[i].keep_bf16 != (i in kept):
                blocks[i] = blocks[i].model_copy(update={"keep_bf16": i in kept})
        return self.model_copy(update={"blocks": tuple(blocks)})

    @property
    def layer_indices(self) -> tuple[int, ...]:
        """Chain positions of the repeated blocks (transformer or evoformer layers)."""
        return tuple(i for i, b in enumerate(self.blocks) if b.kind in REPEATED_KINDS)

    @property
    def num_layers(self) -> int:
        return len(self.layer_indices)

    def attention_layers(self):
        """The transformer layers of the chain, those inside multi-token-prediction modules too."""
        for b in self.blocks:
            layer = b.layer if isinstance(b, MtpBlock) else b
            if isinstance(layer, TransformerBlock):
                yield layer

    @property
    def has_attention_sinks(self) -> bool:
        """Some transformer layer has attention sinks (a learnable softmax offset, GPT-OSS)."""
        return any(layer.attention_sinks for layer in self.attention_layers())

    @property
    def context_parallel_heads(self) -> tuple[int, ...]:
        """Head counts an all-to-all context parallelism splits: query heads and the key/value
        heads core attention sees (MLA expands keys and values per query head)."""
        counts: set[int] = set()
        for layer in self.attention_layers():
            counts.update((layer.num_heads, layer.attention_core_shape[0]))
        return tuple(sorted(counts))

    @property
    def has_evoformer(self) -> bool:
        """Has Evoformer blocks (whose pair attention has no context parallelism)."""
        return any(b.kind == "evoformer" for b in self.blocks)

    @property
    def tp_head_counts(self) -> tuple[int, ...]:
        """Every head count tensor parallelism must divide, over all blocks."""
        counts: set[int] = set()
        for b in self.blocks:
            counts.update(getattr(b, "tp_head_counts", ()))
        return tuple(sorted(counts))
