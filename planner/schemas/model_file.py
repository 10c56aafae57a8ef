"""The two shapes of a model.yaml: the transformer shorthand and a `layers:` list.

Both expand into a `ModelSpec` chain: embedding, the repeated blocks, final norm, output.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from cost_models.enums import AttentionKind, MlpKind, NormKind, PositionKind
from planner.schemas.model import (Block, EmbeddingBlock, ModelSpec, NormBlock, OutputBlock,
                                   Source, TrainingSpec, TransformerBlock)

_FILE = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class TransformerShorthand(BaseModel):
    """A stack of identical transformer layers, described by its shapes."""

    model_config = _FILE
    name: str
    description: str | None = None
    num_layers: PositiveInt
    hidden: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    ffn_hidden: PositiveInt | None = None
    vocab_size: PositiveInt
    mlp: MlpKind = MlpKind.GELU
    norm: NormKind = NormKind.LAYERNORM
    norms_per_layer: Literal[1, 2] = 2
    position: PositionKind = PositionKind.LEARNED
    max_positions: int = Field(0, ge=0)
    """Rows of the learned position table; 0 means the training sequence length."""
    num_token_types: int = Field(0, ge=0)
    embedding_norm: NormKind | None = None
    tie_embeddings: bool = True
    bias: bool = True
    qkv_bias: bool = False
    dropout: bool = True
    attention: AttentionKind = AttentionKind.STANDARD
    causal: bool = True
    final_norm: bool = True
    num_experts: PositiveInt = 1
    top_k: PositiveInt = 1
    lm_head_transform: NormKind | None = None
    lm_head_bias: bool = False
    training: TrainingSpec = TrainingSpec()
    source: Source | None = None

    @model_validator(mode="after")
    def _layer_is_valid(self):
        self.layer()  # the block's own validators name the fields in their messages
        return self

    def layer(self) -> TransformerBlock:
        return TransformerBlock(
            hidden=self.hidden, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim, ffn_hidden=self.ffn_hidden, mlp=self.mlp, norm=self.norm,
            norms_per_layer=self.norms_per_layer, attention=self.attention,
            position=self.position, causal=self.causal, bias=self.bias,
            qkv_bias=self.qkv_bias, dropout=self.dropout, num_experts=self.num_experts,
            top_k=self.top_k)

    def to_model(self) -> ModelSpec:
        positions = self.max_positions or self.training.seq_len
        embedding = EmbeddingBlock(
            vocab_size=self.vocab_size, hidden=self.hidden, position=self.position,
            max_positions=positions if self.position is PositionKind.LEARNED else 0,
            num_token_types=self.num_token_types, norm=self.embedding_norm,
            dropout=self.dropout)
        blocks: list = [embedding]
        blocks += [self.layer()] * self.num_layers
        if self.final_norm:
            blocks.append(NormBlock(hidden=self.hidden, norm=self.norm))
        blocks.append(OutputBlock(vocab_size=self.vocab_size, hidden=self.hidden,
                                  tied=self.tie_embeddings,
                                  transform_norm=self.lm_head_transform,
                                  bias=self.lm_head_bias))
        return ModelSpec(name=self.name, blocks=tuple(blocks), description=self.description,
                         source=self.source)


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

    def to_model(self) -> ModelSpec:
        counts = self.repeats or (1,) * len(self.layers)
        blocks: list = []
        for block, count in zip(self.layers, counts):
            blocks += [block] * count
        return ModelSpec(name=self.name, blocks=tuple(blocks), description=self.description,
                         source=self.source)
