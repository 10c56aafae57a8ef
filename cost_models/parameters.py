"""Parameter counts per block, split into the part tensor parallelism shards and the part it
replicates.

Megatron-LM (Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3) shards the QKV and first MLP
matrices by columns and the attention-output and second MLP matrices by rows; the word
embedding and output layer are sharded over the vocabulary. Row-parallel biases, LayerNorm
and RMSNorm weights, position and token-type embeddings are replicated on every TP rank.

Symbols: h hidden, a attention heads, g key/value heads (GQA), d head dim, f ffn hidden,
V vocabulary, E experts.
"""

from __future__ import annotations

from typing import NamedTuple

from cost_models.enums import MlpKind, NormKind


class ParamCount(NamedTuple):
    """Parameters of one block: `sharded` is split over TP ranks, `replicated` is not, and
    `expert` (the routed experts of an MoE layer) is split over expert-parallel times
    expert-tensor-parallel ranks (Megatron-Core MoE parallel folding, arXiv:2504.14960)."""

    sharded: int
    replicated: int
    expert: int = 0

    @property
    def total(self) -> int:
        return self.sharded + self.replicated + self.expert

    def __add__(self, other: ParamCount) -> ParamCount:  # type: ignore[override]
        return ParamCount(self.sharded + other.sharded, self.replicated + other.replicated,
                          self.expert + other.expert)

    def per_rank(self, tp, ep=1, etp=1):
        """Parameters one rank holds (works for numpy arrays of the degrees)."""
        return self.sharded / tp + self.replicated + self.expert / (ep * etp)


def norm_params(*, hidden: int, norm: NormKind) -> ParamCount:
    """Parameters of one normalisation layer: 2h for LayerNorm (gain, bias), h for RMSNorm."""
    return ParamCount(0, 2 * hidden if norm is NormKind.LAYERNORM else hidden)


def attention_params(
    *, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, bias: bool, qkv_bias: bool
) -> ParamCount:
    """Parameters of one self-attention sub-layer with grouped-query attention.

    Ref: Narayanan et al. 2021 (arXiv:2104.04473), Sec. 5.1 counts 4h^2 + 4h for multi-head
    attention (QKV 3h^2 + 3h, output h^2 + h); with a = g and a*d = h this function gives
    exactly that. GQA (Ainslie et al. 2023) shrinks K and V to g*d columns each.
    """
    h, q, kv = hidden, num_heads * head_dim, num_kv_heads * head_dim
    weights = h * q + 2 * h * kv + q * h              # Wq, Wk, Wv (column-parallel), Wo (row-parallel)
    qkv_b = (q + 2 * kv) if (bias or qkv_bias) else 0  # column-parallel bias: sharded
    out_b = h if bias else 0                           # row-parallel bias: replicated
    return ParamCount(weights + qkv_b, out_b)


def mlp_params(*, hidden: int, ffn_hidden: int, mlp: MlpKind, bias: bool) -> ParamCount:
    """Parameters of one dense MLP sub-layer.

    Ref: Narayanan et al. 2021, Sec. 5.1: 8h^2 + 5h for f = 4h (two matrices, biases f + h).
    SwiGLU (Shazeer 2020, arXiv:2002.05202) adds a third h x f gate matrix.
    """
    h, f = hidden, ffn_hidden
    num_in = 2 if mlp.gated else 1       # gate and up projections, or one fc1
    weights = num_in * h * f + f * h                   # fc1 (column-parallel), fc2 (row-parallel)
    in_b = num_in * f if bias else 0                   # column-parallel bias: sharded
    out_b = h if bias else 0                           # row-parallel bias: replicated
    return ParamCount(weights + in_b, out_b)


def moe_params(*, hidden: int, expert_ffn_hidden: int, mlp: MlpKind, bias: bool,
               num_experts: int, shared_ffn_hidden: int, router_bias: bool) -> ParamCount:
    """Parameters of one MoE sub-layer: E routed expert MLPs, a shared-expert MLP, a router.

    Ref: Jiang et al. 2024 (Mixtral, arXiv:2401.04088, Sec. 2.1): E expert MLPs and an h x E
    gate without bias. DeepSeek-V3 (arXiv:2412.19437, Sec. 2.1.2): shared experts every token
    passes through (one MLP of n_shared x the expert width in Hugging Face's modeling code)
    and a per-expert bias for auxiliary-loss-free balancing; gpt-oss (model card) has a router
    bias and biased experts. Megatron-Core keeps the router replicated, shards the shared
    experts like a dense MLP over TP, and splits the routed experts over EP x ETP.
    """
    expert = mlp_params(hidden=hidden, ffn_hidden=expert_ffn_hidden, mlp=mlp, bias=bias)
    shared = (mlp_params(hidden=hidden, ffn_hidden=shared_ffn_hidden, mlp=mlp, bias=bias)
              if shared_ffn_hidden else ParamCount(0, 0))
    router = hidden * num_experts + (num_experts if router_bias else 0)
    return ParamCount(shared.sharded, shared.replicated + router, num_experts * expert.total)


def mla_params(*, hidden: int, num_heads: int, q_lora_rank: int | None, kv_lora_rank: int,
               qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int,
               norm: NormKind) -> ParamCount:
    """Parameters of one multi-head latent attention sub-layer (DeepSeek-V2, arXiv:2405.04434,
    Sec. 2.1.2, Eq. 9-19).

    Queries: h -> q_lora (down, with a norm) -> a (d_nope + d_rope) (up), or one h -> a (d_nope
    + d_rope) matrix without a query rank. Keys and values: h -> kv_lora + d_rope (down, the
    decoupled rotary key shared by all heads, a norm on the latent), kv_lora -> a (d_nope + d_v)
    (up). Output: a d_v -> h. Megatron-Core's MLASelfAttention keeps the down projections and
    their norms whole on every TP rank and shards the up and output projections.
    """
    h, a = hidden, num_heads
    qk = qk_nope_head_dim + qk_rope_head_dim
    latent_norm = norm_params(hidden=kv_lora_rank, norm=norm).replicated
    replicated = h * (kv_lora_rank + qk_rope_head_dim) + latent_norm
    if q_lora_rank:
        replicated += h * q_lora_rank + norm_params(hidden=q_lora_rank, norm=norm).replicated
        q_up = q_lora_rank * a * qk
    else:
        q_up = h * a * qk
    sharded = q_up + kv_lora_rank * a * (qk_nope_head_dim + v_head_dim) + a * v_head_dim * h
    return ParamCount(sharded, replicated)


def embedding_params(
    *, vocab_size: int, hidden: int, num_positions: int, num_token_types: int,
    norm: NormKind | None,
) -> ParamCount:
    """Parameters of the input embedding: word (vocab-parallel), position, token type, norm.

    Ref: Narayanan et al. 2021, Sec. 5.1: Vh + sh for GPT (learned positions of length s).
    BERT (Devlin et al. 2019) adds token-type embeddings and a LayerNorm; BLOOM adds a
    LayerNorm after the word embedding (BigScience 2022, arXiv:2211.05100, Sec. 3.2).
    """
    h = hidden
    extra_norm = norm_params(hidden=h, norm=norm).replicated if norm is not None else 0
    return ParamCount(vocab_size * h, num_positions * h + num_token_types * h + extra_norm)


def output_head_params(
    *, vocab_size: int, hidden: int, tied: bool, transform_norm: NormKind | None, bias: bool
) -> ParamCount:
    """Parameters of the output layer (logits), zero for the weight when tied to the embedding.

    A tied output layer reuses the word-embedding matrix (Press & Wolf 2017), so it adds no
    parameters to the model count; `planner` still charges its memory to the last pipeline
    stage, which keeps a copy (Megatron-LM's shared embedding). BERT's masked-LM head adds a
    dense h x h transform with bias and a LayerNorm (`transform_norm`), and a vocabulary bias.
    """
    h = hidden
    weight = 0 if tied else vocab_size * h                        # vocab-parallel
    vocab_b = vocab_size if bias else 0                           # vocab-parallel
    transform = 0
    if transform_norm is not None:
        transform = h * h + h + norm_params(hidden=h, norm=transform_norm).replicated
    return ParamCount(weight + vocab_b, transform)


def megatron_gpt_params(*, num_layers: int, hidden: int, vocab_size: int, seq_len: int) -> float:
    """Parameter count of a Megatron GPT model in the paper's closed form.

    Ref: Narayanan et al. 2021 (arXiv:2104.04473), Sec. 5.1:
    P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)). The per-block functions above reproduce
    it term by term, plus the final LayerNorm (2h) that the closed form leaves out.
    """
    l, h, V, s = num_layers, hidden, vocab_size, seq_len
    return 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
