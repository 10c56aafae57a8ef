"""The two shapes of a model.yaml: the transformer shorthand and a `layers:` list.

Both expand into a `ModelSpec` chain: embedding, the repeated blocks, final norm, output.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cost_models.enums import LoadBalancing, MlpKind, NormKind, PositionKind
from planner.schemas.bounds import MAX_LAYERS, Layers, NonNegativeInt, PositiveInt
from planner.schemas.model import (Block, EmbeddingBlock, ModelSpec, MtpBlock, NormBlock,
                                   OutputBlock, Source, TrainingSpec, TransformerBlock)

_FILE = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)


class TransformerShorthand(BaseModel):
    """A stack of identical transformer layers, described by its shapes."""

    model_config = _FILE
    name: str
    description: str | None = None
    num_layers: Layers
    hidden: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    ffn_hidden: PositiveInt | None = None
    vocab_size: PositiveInt
    mlp: MlpKind = MlpKind.GELU
    norm: NormKind = NormKind.LAYERNORM
    norms_per_layer: Literal[1, 2, 4] = 2
    position: PositionKind = PositionKind.LEARNED
    partial_rotary: float = Field(1.0, gt=0, le=1)
    max_positions: NonNegativeInt = 0
    """Rows of the learned position table; 0 means the training sequence length."""
    max_context: PositiveInt | None = None
    """The longest sequence the model was built for (a warning when seq_len exceeds it)."""
    num_token_types: NonNegativeInt = 0
    embedding_norm: NormKind | None = None
    tie_embeddings: bool = True
    bias: bool = True
    qkv_bias: bool = False
    dropout: bool = True
    causal: bool = True
    final_norm: bool = True
    qk_norm: bool = False
    qk_norm_per_head: bool = False
    attention_sinks: bool = False
    sliding_window: PositiveInt | None = None
    """Keys a local-attention layer's queries see (None: every layer attends to the whole
    context)."""
    attention_chunk: PositiveInt | None = None
    """Chunked local attention instead of a sliding window: a local layer's queries see only
    the keys of their own block of this many positions (Llama 4: 8192). Not with
    `sliding_window`."""
    sliding_window_pattern: PositiveInt = 1
    """With `sliding_window` or `attention_chunk`: every n-th layer (the n-th, 2n-th, ...)
    attends globally, the others locally (Gemma's convention; gpt-oss alternates: 2; Llama 4:
    4). 1: every layer is local."""
    q_lora_rank: NonNegativeInt = 0
    kv_lora_rank: NonNegativeInt = 0
    qk_rope_head_dim: NonNegativeInt = 0
    v_head_dim: PositiveInt | None = None
    num_experts: PositiveInt = 1
    top_k: PositiveInt = 1
    moe_ffn_hidden: PositiveInt | None = None
    shared_ffn_hidden: NonNegativeInt = 0
    shared_expert_gate: bool = False
    router_bias: bool = False
    glu_clamp: float | None = Field(None, gt=0)
    """gpt-oss clamps its experts' GLU input to this limit (HF swiglu_limit)."""
    load_balancing: LoadBalancing = LoadBalancing.AUX_LOSS
    capacity_factor: float | None = Field(None, gt=0)
    router_groups: PositiveInt | None = None
    router_group_topk: PositiveInt | None = None
    first_k_dense: NonNegativeInt = 0
    """Leading layers with a dense MLP of `ffn_hidden` before the MoE layers (DeepSeek's
    first_k_dense_replace)."""
    moe_layer_freq: PositiveInt = 1
    """After the first dense layers, layer i (counting from 1) is MoE when i is a multiple of
    this (Qwen2-MoE decoder_sparse_step); the others are dense."""
    mtp_layers: NonNegativeInt = 0
    """Multi-token-prediction modules trained after the output layer (DeepSeek-V3: 1), each
    one more transformer layer like the last one."""
    lm_head_transform: NormKind | None = None
    lm_head_bias: bool = False
    training: TrainingSpec = TrainingSpec()
    source: Source | None = None
    notes: tuple[str, ...] = ()
    """What the model leaves out that its source describes (passed on to the plan's notes)."""

    @model_validator(mode="after")
    def _layer_is_valid(self):
        self.layers()  # the block's own validators name the fields in their messages
        if self.first_k_dense >= self.num_layers and self.num_experts > 1:
            raise ValueError(f"first_k_dense ({self.first_k_dense}) leaves no MoE layer of "
                             f"num_layers ({self.num_layers})")
        return self

    def layers(self) -> list[TransformerBlock]:
        """The transformer layers in order (dense-first and MoE-frequency patterns applied)."""
        common = dict(
            hidden=self.hidden, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim, ffn_hidden=self.ffn_hidden, mlp=self.mlp, norm=self.norm,
            norms_per_layer=self.norms_per_layer, position=self.position,
            partial_rotary=self.partial_rotary, causal=self.causal,
            bias=self.bias, qkv_bias=self.qkv_bias, dropout=self.dropout, qk_norm=self.qk_norm,
            qk_norm_per_head=self.qk_norm_per_head, attention_sinks=self.attention_sinks,
            q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank, qk_rope_head_dim=self.qk_rope_head_dim,
            v_head_dim=self.v_head_dim)
        moe = dict(num_experts=self.num_experts, top_k=self.top_k,
                   moe_ffn_hidden=self.moe_ffn_hidden, shared_ffn_hidden=self.shared_ffn_hidden,
                   shared_expert_gate=self.shared_expert_gate, router_bias=self.router_bias,
                   glu_clamp=self.glu_clamp,
                   load_balancing=self.load_balancing,
                   capacity_factor=self.capacity_factor, router_groups=self.router_groups,
                   router_group_topk=self.router_group_topk)
        kinds: dict[tuple[bool, bool], TransformerBlock] = {}
        out = []
        for i in range(self.num_layers):
            is_moe = (self.num_experts > 1 and i >= self.first_k_dense
                      and (i + 1) % self.moe_layer_freq == 0)
            local = (self.sliding_window is not None or self.attention_chunk is not None) and (
                self.sliding_window_pattern == 1 or (i + 1) % self.sliding_window_pattern != 0)
            key = (is_moe, local)
            if key not in kinds:   # one object per kind: the costing evaluates each kind once
                kinds[key] = TransformerBlock(
                    **common, **(moe if is_moe else {}),
                    sliding_window=self.sliding_window if local else None,
                    attention_chunk=self.attention_chunk if local else None)
            out.append(kinds[key])
        return out

    def to_model(self) -> ModelSpec:
        positions = self.max_positions or self.training.seq_len
        embedding = EmbeddingBlock(
            vocab_size=self.vocab_size, hidden=self.hidden, position=self.position,
            max_positions=positions if self.position is PositionKind.LEARNED else 0,
            num_token_types=self.num_token_types, norm=self.embedding_norm,
            dropout=self.dropout)
        blocks: list = [embedding]
        blocks += self.layers()
        if self.final_norm:
            blocks.append(NormBlock(hidden=self.hidden, norm=self.norm))
        blocks.append(OutputBlock(vocab_size=self.vocab_size, hidden=self.hidden,
                                  tied=self.tie_embeddings,
                                  transform_norm=self.lm_head_transform,
                                  bias=self.lm_head_bias))
        layers = [b for b in blocks if isinstance(b, TransformerBlock)]
        blocks += [MtpBlock(layer=layers[-1], vocab_size=self.vocab_size)] * self.mtp_layers
        return ModelSpec(name=self.name, blocks=tuple(blocks), description=self.description,
                         max_context=self.max_context or (
                             self.max_positions if self.position is PositionKind.LEARNED
                             and self.max_positions else None),
                         source=self.source, notes=self.notes + self._idle_expert_fields())

    def _idle_expert_fields(self) -> tuple[str, ...]:
        """A note naming the routed experts' fields a dense model sets: with num_experts 1
        every layer is a dense MLP, and they change nothing."""
        idle = [f for f in EXPERT_FIELDS if f in self.model_fields_set]
        if self.num_experts > 1 or not idle:
            return ()
        verb = "has" if len(idle) == 1 else "have"
        return (f"{self.name}: {', '.join(idle)} {verb} no effect: num_experts is 1 (every layer "
                f"a dense MLP); set num_experts for routed experts",)


EXPERT_FIELDS = ("top_k", "moe_ffn_hidden", "shared_ffn_hidden", "shared_expert_gate",
                 "router_bias", "glu_clamp", "load_balancing", "capacity_factor",
                 "router_groups", "router_group_topk", "first_k_dense", "moe_layer_freq")
"""ModelFile's fields that describe routed experts (and where they sit)."""


class LayersFile(BaseModel):
    """A model described block by block; an entry may carry `repeat: N`."""

    model_config = _FILE
    name: str
    description: str | None = None
    layers: tuple[Block, ...] = Field(min_length=1)
    repeats: tuple[PositiveInt, ...] = ()
    """Filled by the loader from each entry's `repeat` key."""
    training: TrainingSpec = TrainingSpec()
    source: Source | None = None

    @model_validator(mode="after")
    def _bounded(self):
        total = sum(self.repeats) if self.repeats else len(self.layers)
        if total > MAX_LAYERS:     # checked before to_model() builds the chain
            raise ValueError(f"layers: {total:,} blocks in all exceed the largest accepted, "
                             f"{MAX_LAYERS:,} (80x the deepest models trained)")
        return self

    def to_model(self) -> ModelSpec:
        counts = self.repeats or (1,) * len(self.layers)
        blocks: list = []
        for block, count in zip(self.layers, counts):
            blocks += [block] * count
        return ModelSpec(name=self.name, blocks=tuple(blocks), description=self.description,
                         source=self.source)
