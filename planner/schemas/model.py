"""The model: an ordered chain of blocks, and the training settings that go with it."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from cost_models.enums import (AttentionKind, MlpKind, NormKind, Optimizer, PositionKind,
                               Precision)
from cost_models.evoformer import EvoformerShape, evoformer_block_params
from cost_models.parameters import (ParamCount, attention_params, embedding_params, mlp_params,
                                    norm_params, output_head_params)

_FROZEN = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class EmbeddingBlock(BaseModel):
    """Token embedding (vocabulary-parallel), with optional learned positions and a norm."""

    model_config = _FROZEN
    kind: Literal["embedding"] = "embedding"
    vocab_size: PositiveInt
    hidden: PositiveInt
    position: PositionKind = PositionKind.ROTARY
    max_positions: int = Field(0, ge=0)
    """Rows of a learned position table (0 unless `position` is learned)."""
    num_token_types: int = Field(0, ge=0)
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
    norms_per_layer: Literal[1, 2] = 2
    """Falcon-7B's parallel attention shares one norm."""
    attention: AttentionKind = AttentionKind.STANDARD
    position: PositionKind = PositionKind.LEARNED
    """Rotary embeddings add a memory-bound kernel on Q and K."""
    causal: bool = True
    bias: bool = True
    """Biases on every linear layer (GPT-2/3, BLOOM, BERT); Llama has none."""
    qkv_bias: bool = False
    """Biases on Q, K, V only (Qwen2)."""
    dropout: bool = True
    num_experts: PositiveInt = 1
    top_k: PositiveInt = 1

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

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden // self.num_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def tp_head_counts(self) -> tuple[int, ...]:
        """Head counts tensor parallelism must divide."""
        return (self.num_heads, self.kv_heads)

    def params(self) -> ParamCount:
        attention = attention_params(hidden=self.hidden, num_heads=self.num_heads,
                                     num_kv_heads=self.kv_heads, head_dim=self.dim_per_head,
                                     bias=self.bias, qkv_bias=self.qkv_bias)
        mlp = mlp_params(hidden=self.hidden, ffn_hidden=self.ffn, mlp=self.mlp, bias=self.bias,
                         num_experts=self.num_experts)
        norms = norm_params(hidden=self.hidden, norm=self.norm)
        return attention + mlp + ParamCount(0, self.norms_per_layer * norms.replicated)

    def active_params(self) -> ParamCount:
        """Parameters a token passes through: all but the experts it is not routed to."""
        idle = self.num_experts - self.top_k
        expert = mlp_params(hidden=self.hidden, ffn_hidden=self.ffn, mlp=self.mlp,
                            bias=self.bias)
        total = self.params()
        return ParamCount(total.sharded - idle * expert.sharded,
                          total.replicated - idle * expert.replicated)


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

    def stored_params(self) -> ParamCount:
        """Parameters the stage holding this block keeps in memory: a tied layer keeps its own
        copy of the embedding matrix when it is on another stage (Megatron-LM)."""
        own = self.params()
        if self.tied:
            own = own + ParamCount(self.vocab_size * self.hidden, 0)
        return own


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
    attention: AttentionKind = AttentionKind.STANDARD

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
    Union[EmbeddingBlock, TransformerBlock, NormBlock, OutputBlock, EvoformerBlock],
    Field(discriminator="kind"),
]
REPEATED_KINDS = ("transformer", "evoformer")
"""Block kinds that make up the repeated body of a model (the `layers` a pipeline splits)."""


class TrainingSpec(BaseModel):
    """Training settings that go with a model; CLI flags override them."""

    model_config = _FROZEN
    seq_len: PositiveInt = 2048
    """Tokens per sequence (residues for an Evoformer)."""
    global_batch: PositiveInt = 1024
    """Sequences per optimizer step."""
    precision: Precision = Precision.BF16
    optimizer: Optimizer = Optimizer.ADAM


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
    source: Source | None = None

    @model_validator(mode="after")
    def _has_layers(self):
        if not any(b.kind in REPEATED_KINDS for b in self.blocks):
            raise ValueError("the model has no transformer or evoformer blocks")
        return self

    @property
    def num_params(self) -> int:
        return sum(b.params().total for b in self.blocks)

    @property
    def num_active_params(self) -> int:
        return sum((b.active_params() if isinstance(b, TransformerBlock) else b.params()).total
                   for b in self.blocks)

    @property
    def layer_indices(self) -> tuple[int, ...]:
        """Chain positions of the repeated blocks (transformer or evoformer layers)."""
        return tuple(i for i, b in enumerate(self.blocks) if b.kind in REPEATED_KINDS)

    @property
    def num_layers(self) -> int:
        return len(self.layer_indices)

    @property
    def tp_head_counts(self) -> tuple[int, ...]:
        """Every head count tensor parallelism must divide, over all blocks."""
        counts: set[int] = set()
        for b in self.blocks:
            counts.update(getattr(b, "tp_head_counts", ()))
        return tuple(sorted(counts))
