"""Hugging Face `config.json` -> the transformer shorthand, per model_type.

Key names follow huggingface/transformers src/transformers/models/<type>/configuration_<type>.py
(checked against transformers 5.23), including each class's attribute_map aliases (gpt2's
n_embd, bloom's n_layer) and defaults for absent keys (gpt2 n_inner=None means 4*n_embd;
bloom has no ffn key; falcon ffn_hidden_size=None means 4*hidden).

A config.json describes the architecture only: the attention kernel it trains with is a
setting of the run (training.attention, --attention; the framework's fused kernel by default),
as transformers' own attn_implementation is chosen when the model is loaded, not stored.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable

from planner.errors import InputError

DEFAULT_MAX_SEQ_LEN = 4096
"""HF configs give the longest context a model supports (131,072 for Llama 3.1), not the one it
is trained at; without --seq-len we plan for at most this many tokens."""



class _Keys:
    """Reads keys of one config.json, naming the file and key in every error. `prefix` names
    the nested config the keys come from ('text_config.')."""

    def __init__(self, config: dict[str, Any], file: str, prefix: str = "") -> None:
        self.config, self.file, self.prefix = config, file, prefix

    def where(self, name: str) -> str:
        """'file: key' for an error message."""
        return f"{self.file}: {self.prefix}{name}"

    def get(self, *names: str, default: Any = None) -> Any:
        """The first key present; with an int or bool `default`, it must be one too (the
        mappers do arithmetic on it: 4 * "1024" would be a string)."""
        for name in names:
            if self.config.get(name) is not None:
                return self._typed(name, self.config[name], default)
        return default

    def need(self, *names: str) -> int:
        """An integer key that must be present (every required key is a size or a count)."""
        value = self.get(*names)
        if value is None:
            raise InputError(f"{self.where(names[0])}: required key is missing")
        return self._typed(next(n for n in names if self.config.get(n) is not None), value, 0)

    def _typed(self, name: str, value: Any, default: Any) -> Any:
        if isinstance(default, bool) and not isinstance(value, bool):
            raise InputError(f"{self.where(name)}: must be true or false (got {value!r:.40})")
        if isinstance(default, int) and not isinstance(default, bool) and \
                (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError(f"{self.where(name)}: must be an integer (got {value!r:.40})")
        return value


def _llama_like(k: _Keys) -> dict[str, Any]:
    """llama, mistral, mixtral, qwen2: SwiGLU, RMSNorm, rotary, GQA, no biases."""
    out = dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"),
        num_kv_heads=k.get("num_key_value_heads"), head_dim=k.get("head_dim"),
        ffn_hidden=k.need("intermediate_size"), vocab_size=k.need("vocab_size"),
        mlp="swiglu", norm="rmsnorm", position="rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=False)),
        bias=False, qkv_bias=bool(k.get("attention_bias", default=False)), dropout=False)
    if k.get("num_local_experts"):
        out.update(num_experts=k.get("num_local_experts"), top_k=k.get("num_experts_per_tok",
                                                                         default=2))
    return out


def _every_layer_window(k: _Keys) -> int | None:
    """`sliding_window` applied on every layer, or None when it is unset or no shorter than
    max_position_embeddings (it never binds: Phi-3.5-mini's 262144 over 131072 positions)."""
    window = k.get("sliding_window", default=0) or None     # integers, or a clean error
    longest = k.get("max_position_embeddings", default=0)
    return None if window is None or (longest and window >= longest) else window


def _partial_rotary(k: _Keys, *names: str, default: float = 1.0) -> float:
    """The share of each head the rotary embedding turns: the first of `names` the file
    gives (partial_rotary_factor, or a family's older key), else the config class's
    `default`."""
    for name in names:
        value = k.config.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 < value <= 1:
                raise InputError(f"{k.where(name)}: must be a number in (0, 1] (got "
                                 f"{value!r:.40})")
            return float(value)
    return default


def _mistral(k: _Keys) -> dict[str, Any]:
    """Mistral: Llama-like, every layer attends through `sliding_window` when it is set
    (Mistral-7B-v0.1: 4096; v0.3: null). MistralAttention passes config.sliding_window to the
    attention kernel on every layer (modeling_mistral.py)."""
    return {**_llama_like(k), "sliding_window": _every_layer_window(k)}


def _phi3(k: _Keys) -> dict[str, Any]:
    """Phi-3 / Phi-3.5: Llama-like with fused qkv_proj and gate_up_proj weights (the same
    parameters and FLOPs as separate ones), and `sliding_window` on every layer (Phi3Attention,
    modular_phi3.py; Phi-3-mini-4k: 2047). partial_rotary_factor (Phi-4-mini) rotates part of
    each head: it changes neither the parameters nor the matmuls, only a small elementwise
    kernel that we price on the whole head."""
    return {**_llama_like(k), "sliding_window": _every_layer_window(k),
            "partial_rotary": _partial_rotary(k, "partial_rotary_factor")}


def _phi(k: _Keys) -> dict[str, Any]:
    """Phi-1.5 / Phi-2 (modeling_phi.py): attention and a two-matrix GeLU MLP (fc1, fc2) side
    by side on one LayerNorm's output (one norm a layer), biases on every projection and on
    the output layer (lm_head), rotary positions on part of each head (partial_rotary_factor:
    no parameters; the rotary kernel is priced on the whole head), untied embeddings. With
    qk_layernorm a LayerNorm of head_dim on the queries and on the keys."""
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), num_kv_heads=k.get("num_key_value_heads"),
        ffn_hidden=k.need("intermediate_size"), vocab_size=k.need("vocab_size"),
        mlp="gelu", norm="layernorm", norms_per_layer=1, position="rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=False)), bias=True,
        lm_head_bias=True, dropout=bool(k.get("resid_pdrop", "attention_dropout",
                                              default=0.0)),
        qk_norm=bool(k.get("qk_layernorm", default=False)),
        partial_rotary=_partial_rotary(k, "partial_rotary_factor", default=0.5))


def _phimoe(k: _Keys) -> dict[str, Any]:
    """Phi-3.5-MoE and the SlimMoE Phi-mini/tiny-MoE (modeling_phimoe.py): GQA with biases on
    Q, K, V and the output projection (attention_bias; the output's h biases a layer are not
    counted), heads of head_dim where the file gives it (Phi-tiny-MoE: 16 of 128 on a 4096
    residual), two LayerNorms a layer, every layer an MoE of num_local_experts SwiGLU experts
    of intermediate_size without biases, top num_experts_per_tok by a router without bias
    (its sparsemixer routing priced as top-k), a bias on the output layer where
    lm_head_bias, untied embeddings, `sliding_window` on every layer where it binds."""
    return {**_llama_like(k), "norm": "layernorm", "num_experts": k.need("num_local_experts"),
            "top_k": k.need("num_experts_per_tok"), "moe_ffn_hidden": k.need("intermediate_size"),
            "lm_head_bias": bool(k.get("lm_head_bias", default=False)),
            "sliding_window": _every_layer_window(k)}


def _local_global_period(k: _Keys, *, default: int) -> int | None:
    """n where layers repeat as n - 1 sliding-window layers then one full-attention layer (the
    `sliding_window_pattern` of the model file), from `layer_types` (transformers >= 4.53),
    else `sliding_window_pattern`, else `default`; 1 when every layer is local, None when none
    is. transformers builds layer_types as "sliding_attention" if (i + 1) % n else
    "full_attention" (Gemma2Config n = 2, Gemma3TextConfig n = sliding_window_pattern)."""
    types = k.get("layer_types")
    if types is not None and not isinstance(types, list):
        raise InputError(f"{k.where('layer_types')}: must be a list (got {types!r:.40})")
    if not types:
        period = k.get("sliding_window_pattern", default=default)
        return None if period == 1 else period     # (i + 1) % 1 == 0: every layer is global
    if "sliding_attention" not in types:
        return None
    period = list(types).index("full_attention") + 1 if "full_attention" in types else 1
    expected = ["sliding_attention" if period == 1 or (i + 1) % period else "full_attention"
                for i in range(len(types))]
    if list(types) != expected:
        raise InputError(f"{k.where('layer_types')}: only a repeating run of sliding-window "
                         f"layers closed by one full-attention layer is modelled; describe the "
                         f"model with a `layers:` list")
    return period


def _gemma(k: _Keys, *, period: int) -> dict[str, Any]:
    """Gemma 2 and 3 text models (modeling_gemma2.py, modeling_gemma3.py): GQA with a head_dim
    of its own (gemma-2-9b: 16 heads of 256 on a 3584 residual), a GeLU-gated MLP (three
    matrices), an RMSNorm before and after each sub-layer (input_layernorm,
    post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm: four per
    layer), tied embeddings, and sliding-window layers between full-attention ones. Logit
    soft-capping and the embedding scale by sqrt(hidden) cost nothing we price."""
    window = k.get("sliding_window", default=4096)   # Gemma2Config's, Gemma3TextConfig's
    pattern = _local_global_period(k, default=period)
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), num_kv_heads=k.get("num_key_value_heads"),
        head_dim=k.need("head_dim"), ffn_hidden=k.need("intermediate_size"),
        vocab_size=k.need("vocab_size"), mlp="geglu", norm="rmsnorm", norms_per_layer=4,
        position="rotary", tie_embeddings=bool(k.get("tie_word_embeddings", default=True)),
        bias=False, qkv_bias=bool(k.get("attention_bias", default=False)), dropout=False,
        sliding_window=window if pattern else None,
        sliding_window_pattern=pattern or 1)


def _gemma1(k: _Keys) -> dict[str, Any]:
    """Gemma 1 (modeling_gemma.py; Gemma Team 2024, arXiv:2403.08295): heads of head_dim 256
    (gemma-7b: 16 x 256 on a 3072 residual; gemma-2b: 8 query heads, 1 key-value head), a
    GeLU-gated MLP (three matrices, no biases), two RMSNorms a layer before attention and the
    MLP (their (1 + w) scale is one weight each), rotary positions on every layer, no
    biases, tied embeddings (GemmaConfig's default; the released files leave it out). The
    sqrt(hidden) embedding scale costs nothing we price."""
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), num_kv_heads=k.get("num_key_value_heads"),
        head_dim=k.need("head_dim"), ffn_hidden=k.need("intermediate_size"),
        vocab_size=k.need("vocab_size"), mlp="geglu", norm="rmsnorm", position="rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=True)),
        bias=False, qkv_bias=bool(k.get("attention_bias", default=False)), dropout=False)


def _gemma2(k: _Keys) -> dict[str, Any]:
    """Gemma 2: local and global layers alternate, the first one local (Gemma2Config.layer_types;
    Gemma Team 2024, arXiv:2408.00118, Sec. 2: window 4096)."""
    return _gemma(k, period=2)


def _gemma3_text(k: _Keys) -> dict[str, Any]:
    """Gemma 3: five local layers to one global (sliding_window_pattern 6; Gemma Team 2025,
    arXiv:2503.19786, Sec. 2.2), and an RMSNorm on each head's queries and keys."""
    return {**_gemma(k, period=6), "qk_norm": True}


TEXT_CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"vocab_size": 32_000, "hidden_size": 4096, "intermediate_size": 11_008,
              "num_hidden_layers": 32, "num_attention_heads": 32,
              "max_position_embeddings": 2048, "tie_word_embeddings": False},
    "mistral": {"vocab_size": 32_000, "hidden_size": 4096, "intermediate_size": 14_336,
                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                "max_position_embeddings": 131_072, "tie_word_embeddings": False,
                "sliding_window": 4096},
    "qwen2": {"vocab_size": 151_936, "hidden_size": 4096, "intermediate_size": 22_016,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
              "max_position_embeddings": 32_768, "tie_word_embeddings": False},
    "qwen3": {"vocab_size": 151_936, "hidden_size": 4096, "intermediate_size": 22_016,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
              "head_dim": 128, "max_position_embeddings": 32_768,
              "tie_word_embeddings": False},
    "gemma": {"vocab_size": 256_000, "hidden_size": 3072, "intermediate_size": 24_576,
              "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
              "head_dim": 256, "max_position_embeddings": 8192, "tie_word_embeddings": True},
    "gemma2": {"vocab_size": 256_000, "hidden_size": 2304, "intermediate_size": 9216,
               "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
               "head_dim": 256, "max_position_embeddings": 8192, "tie_word_embeddings": True,
               "sliding_window": 4096},
    # Only the keys Google's multimodal files rely on (gemma-3-27b-it's text_config names no
    # vocab_size).
    "gemma3_text": {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256, "max_position_embeddings": 131_072,
                    "tie_word_embeddings": True},
}
"""The defaults of the text config classes a multimodal config's `text_config` names
(transformers configuration_llama.py, _mistral, _qwen2, _qwen3, _gemma, _gemma2, _gemma3; the
same in 4.57.1 and 5.x): a released text_config leaves out what equals them (llava-1.5-7b-hf's
gives only its vocabulary, positions and norm epsilon: LlamaConfig's 4096 x 32 layers is
Vicuna-7B's shape)."""


def _language_model(k: _Keys, mapper: Callable[[_Keys], dict[str, Any]], *, family: str,
                    left_out: str, defaults: dict[str, Any] | None = None,
                    flat: bool = False) -> dict[str, Any]:
    """A multimodal config's language model: its `text_config` (over `defaults`, the text
    config class's own for keys the file leaves out) read by `mapper`, with a note that the
    rest (`left_out`) is not priced. `flat`: a file without a text_config keeps the language
    model's keys at its top level (Qwen2-VL's original uploads)."""
    text = k.get("text_config")
    if text is None and flat:
        note = (f"{k.file}: only the {family} language model is priced; the {left_out} are "
                f"not")
        return {**mapper(k), "notes": (note,)}
    if not isinstance(text, dict):
        raise InputError(f"{k.where('text_config')}: required mapping is missing (the "
                         f"language model of a {family} config)")
    keys = _Keys({**(defaults or {}), **text}, k.file, prefix="text_config.")
    note = (f"{k.file}: only the {family} language model (text_config) is priced; the "
            f"{left_out} are not")
    return {**mapper(keys), **_context(keys), "notes": (note,)}


def _gemma3(k: _Keys) -> dict[str, Any]:
    """Gemma 3 with vision (Gemma3ForConditionalGeneration): the language model of
    `text_config` only; the SigLIP encoder (417M parameters for 4B-27B, Gemma 3 report
    Table 1) and its projector are left out, and a note says so."""
    return _language_model(k, _gemma3_text, family="gemma3",
                           defaults=TEXT_CONFIG_DEFAULTS["gemma3_text"],
                           left_out="vision encoder (vision_config) and its projector")


def _mistral3(k: _Keys) -> dict[str, Any]:
    """Mistral Small 3.1 / 3.2 and Magistral (Mistral3ForConditionalGeneration,
    modeling_mistral3.py): the language model of `text_config`, read by the mapper of its own
    model_type (Mistral3Config's default: mistral), with a note that the Pixtral vision
    encoder and its patch-merging projector are not priced."""
    text = k.get("text_config")
    kind = text.get("model_type", "mistral") if isinstance(text, dict) else "mistral"
    decoders = ["llama", "mistral"]       # what Mistral AI's multimodal releases wrap
    if kind not in decoders:
        close = difflib.get_close_matches(str(kind), decoders, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise InputError(f"{k.where('text_config.model_type')}: {kind!r} is not supported"
                         f"{hint}; a mistral3 config's language model is one of: "
                         f"{', '.join(decoders)}")
    return _language_model(k, MAPPERS[kind], family="mistral3",
                           left_out="Pixtral vision encoder (vision_config) and its projector")


def _qwen2(k: _Keys) -> dict[str, Any]:
    """Qwen2 hard-codes biases on Q, K and V (modeling_qwen2.py)."""
    return {**_llama_like(k), "qkv_bias": True}


def _olmo2(k: _Keys) -> dict[str, Any]:
    """OLMo 2 (modeling_olmo2.py): Llama-like, with RMSNorms after the attention and the MLP
    instead of before them (post_attention_layernorm, post_feedforward_layernorm: still two a
    layer) and an RMSNorm on the queries and keys (q_norm, k_norm) over the whole projection
    (heads x head_dim and kv_heads x head_dim weights, where Qwen3 shares one head_dim vector
    among the heads: the same kernels and kept tensors)."""
    return {**_llama_like(k), "qk_norm": True, "qk_norm_per_head": True}


def _olmo3(k: _Keys) -> dict[str, Any]:
    """OLMo 3 (modeling_olmo3.py): OLMo 2 with sliding-window layers (sliding_window, 4096 by
    default), three of every four by Olmo3Config's default layer_types."""
    pattern = _local_global_period(k, default=4)
    return {**_olmo2(k), "sliding_window": k.get("sliding_window", default=4096)
            if pattern else None, "sliding_window_pattern": pattern or 1}


def _olmoe(k: _Keys) -> dict[str, Any]:
    """OLMoE (modeling_olmoe.py; Muennighoff et al. 2024, arXiv:2409.02060): OLMo 2-style
    query and key norms (over the whole projection), every layer an MoE of num_experts
    experts of intermediate_size, top num_experts_per_tok, no shared expert, an auxiliary
    load-balancing loss."""
    return {**_llama_like(k), "qk_norm": True, "qk_norm_per_head": True,
            "num_experts": k.need("num_experts"),
            "top_k": k.need("num_experts_per_tok"),
            "moe_ffn_hidden": k.need("intermediate_size")}


def _moe_frequency(k: _Keys, *, step_key: str) -> dict[str, Any]:
    """Which layers are MoE: every `step_key`-th, none of `mlp_only_layers` (Qwen2-MoE's
    `(layer_idx + 1) % decoder_sparse_step == 0 and layer_idx not in mlp_only_layers`)."""
    only_dense = k.get("mlp_only_layers", default=[]) or []
    if only_dense:
        raise InputError(f"{k.where('mlp_only_layers')}: {only_dense}: per-layer dense overrides "
                         f"are not modelled; describe the model with a `layers:` list")
    return dict(moe_layer_freq=k.get(step_key, default=1))


def _qwen2_moe(k: _Keys) -> dict[str, Any]:
    """Qwen2-MoE (Qwen1.5-MoE): routed experts of moe_intermediate_size, one shared expert of
    shared_expert_intermediate_size behind a sigmoid gate, Q/K/V biases (modeling_qwen2_moe.py)."""
    return {**_qwen2(k), **_moe_frequency(k, step_key="decoder_sparse_step"),
            "num_experts": k.need("num_experts"), "top_k": k.need("num_experts_per_tok"),
            "moe_ffn_hidden": k.need("moe_intermediate_size"),
            "shared_ffn_hidden": k.get("shared_expert_intermediate_size", default=0),
            "shared_expert_gate": bool(k.get("shared_expert_intermediate_size"))}


def _qwen2_vl(k: _Keys) -> dict[str, Any]:
    """Qwen2-VL / Qwen2.5-VL (Qwen2VLForConditionalGeneration,
    Qwen2_5_VLForConditionalGeneration; modeling_qwen2_vl.py, modeling_qwen2_5_vl.py): the
    language model only, a Qwen2 decoder (biases on Q, K and V) with multimodal rotary
    positions (the same rotary kernel). Its keys are those of `text_config` where the file
    has one (transformers >= 4.50 saves), else the top level's (Qwen's original uploads), as
    the config class reads them; word embeddings tied as the top level says where the text
    config does not. The vision encoder and its patch merger are left out, and a note says
    so."""
    return _language_model(k, _qwen2, family=str(k.config.get("model_type")),
                           left_out="vision encoder (vision_config) and its patch merger",
                           defaults={"tie_word_embeddings": k.get("tie_word_embeddings",
                                                                  default=False)},
                           flat=True)


VLM_TEXT_TYPES = {"llava": "llama", "llava_next": "llama", "llava_onevision": "qwen2",
                  "paligemma": "gemma", "internvl": "qwen2"}
"""The text model a wrapper's config class builds when its text_config names none
(LlavaConfig, LlavaNextConfig: llama; LlavaOnevisionConfig, InternVLConfig: qwen2;
PaliGemmaConfig: gemma)."""


def _vlm(k: _Keys) -> dict[str, Any]:
    """LLaVA 1.5 / 1.6 (NeXT) / OneVision, PaliGemma 1 / 2 and InternVL3 (the Hugging Face
    native wrappers): the language model of `text_config` only, read by its own type's mapper
    over that type's config-class defaults (`TEXT_CONFIG_DEFAULTS`), its word embeddings tied
    as the text config says (the text class's default where it says nothing: released weights
    follow it, not the wrapper's top-level key). The vision tower and its projector are left
    out, and a note says so."""
    wrapper = str(k.config.get("model_type"))
    text = k.get("text_config")
    if not isinstance(text, dict):
        raise InputError(f"{k.where('text_config')}: required mapping is missing (the "
                         f"language model of a {wrapper} config)")
    kind = text.get("model_type", VLM_TEXT_TYPES[wrapper])
    if not isinstance(kind, str) or kind not in TEXT_CONFIG_DEFAULTS:
        raise InputError(f"{k.where('text_config.model_type')}: {kind!r:.40}: {wrapper}'s "
                         f"language model is read as one of {', '.join(TEXT_CONFIG_DEFAULTS)}")
    return _language_model(k, MAPPERS[kind], family=wrapper,
                           left_out="vision tower (vision_config) and its projector",
                           defaults=TEXT_CONFIG_DEFAULTS[kind])


def _qwen3(k: _Keys) -> dict[str, Any]:
    """Qwen3: Llama-like with an RMSNorm on each head's queries and keys (modeling_qwen3.py)."""
    return {**_llama_like(k), "qk_norm": True}


def _qwen3_moe(k: _Keys) -> dict[str, Any]:
    """Qwen3-MoE: Qwen3 attention, routed experts only (modeling_qwen3_moe.py). Newer
    transformers save num_experts as num_local_experts (the config's attribute_map)."""
    return {**_qwen3(k), **_moe_frequency(k, step_key="decoder_sparse_step"),
            "num_experts": k.need("num_experts", "num_local_experts"),
            "top_k": k.need("num_experts_per_tok"),
            "moe_ffn_hidden": k.need("moe_intermediate_size")}


def _qwen3_vl_language(k: _Keys, mapper: Callable[[_Keys], dict[str, Any]], *,
                       family: str) -> dict[str, Any]:
    """Qwen3-VL (Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration;
    modeling_qwen3_vl.py, modeling_qwen3_vl_moe.py): the language model of `text_config` only,
    a Qwen3 (or Qwen3-MoE) decoder with full attention on every layer (Qwen3VLTextAttention
    drops the sliding window) and multimodal rotary positions (the same rotary kernel). Its
    word embeddings are tied as the top-level tie_word_embeddings says where the text config
    does not (Qwen3-VL-30B-A3B: false). The vision encoder, its patch merger and the DeepStack
    additions of visual features to the first decoder layers are left out, and a note says so."""
    return _language_model(k, mapper, family=family,
                           defaults={"tie_word_embeddings": k.get("tie_word_embeddings",
                                                                  default=False)},
                           left_out="vision encoder (vision_config), its patch merger and "
                                    "the DeepStack visual features added to the first layers")


def _qwen3_vl(k: _Keys) -> dict[str, Any]:
    """Qwen3-VL dense (Qwen3-VL-2B to 32B): `_qwen3_vl_language` over a Qwen3 decoder."""
    return _qwen3_vl_language(k, _qwen3, family="qwen3_vl")


def _qwen3_vl_moe(k: _Keys) -> dict[str, Any]:
    """Qwen3-VL MoE (Qwen3-VL-30B-A3B, 235B-A22B): `_qwen3_vl_language` over a Qwen3-MoE
    decoder (Qwen3VLMoeTextConfig: num_experts, num_experts_per_tok, moe_intermediate_size,
    decoder_sparse_step, mlp_only_layers)."""
    return _qwen3_vl_language(k, _qwen3_moe, family="qwen3_vl_moe")


def _deepseek(k: _Keys) -> dict[str, Any]:
    """DeepSeek-V2 / V3: MLA attention, first_k_dense_replace dense layers, routed and shared
    experts (modeling_deepseek_v3.py; arXiv:2405.04434, arXiv:2412.19437). V3's
    e_score_correction_bias is the auxiliary-loss-free balancing (topk_method noaux_tc)."""
    if k.get("moe_layer_freq", default=1) != 1:
        raise InputError(f"{k.where('moe_layer_freq')}: {k.get('moe_layer_freq')}: only every "
                         f"layer after first_k_dense_replace being MoE (1) is modelled")
    aux_free = k.get("topk_method", default="greedy") == "noaux_tc"
    moe_ffn = k.need("moe_intermediate_size")
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), head_dim=k.need("qk_nope_head_dim"),
        q_lora_rank=k.get("q_lora_rank", default=0) or 0, kv_lora_rank=k.need("kv_lora_rank"),
        qk_rope_head_dim=k.need("qk_rope_head_dim"), v_head_dim=k.need("v_head_dim"),
        ffn_hidden=k.need("intermediate_size"), vocab_size=k.need("vocab_size"),
        mlp="swiglu", norm="rmsnorm", position="rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=False)),
        bias=False, qkv_bias=bool(k.get("attention_bias", default=False)), dropout=False,
        num_experts=k.need("n_routed_experts"),
        top_k=k.need("num_experts_per_tok"), moe_ffn_hidden=moe_ffn,
        shared_ffn_hidden=k.get("n_shared_experts", default=0) * moe_ffn,
        first_k_dense=k.get("first_k_dense_replace", default=0),
        router_bias=aux_free, load_balancing="expert_bias" if aux_free else "aux_loss",
        mtp_layers=k.get("num_nextn_predict_layers", default=0),
        **_router_groups(k))


def _kimi_k25(k: _Keys) -> dict[str, Any]:
    """Kimi K2.5 / K2.6 (KimiK25ForConditionalGeneration): the kimi_k2 language model of
    `text_config` only (DeepSeek-V3's architecture); the vision tower (vision_config) and its
    projector are left out, and a note says so."""
    return _language_model(k, _deepseek, family="kimi_k25",
                           left_out="vision tower (vision_config) and its projector")


def _llama4_text(k: _Keys) -> dict[str, Any]:
    """Llama 4 language model (Llama4TextConfig, modeling_llama4.py): GQA without biases,
    three of every four layers attending in chunks of attention_chunk_size positions and the
    fourth globally without rotary embeddings (no_rope_layers, every
    no_rope_layer_interval-th: 4), an MoE layer every interleave_moe_layer_step-th layer
    (Scout: every one; Maverick: every second) of num_local_experts experts of
    intermediate_size beside one shared expert of the same width, top num_experts_per_tok
    (1) by a sigmoid router without bias and an auxiliary loss (router_aux_loss_coef), and
    dense layers of intermediate_size_mlp. Its QK-norm is an L2 norm without weights
    (use_qk_norm, rotary layers only): counted as an RMSNorm's 2 head_dim weights a layer."""
    step = k.get("interleave_moe_layer_step", default=1)
    interval = k.get("no_rope_layer_interval", default=4)
    no_rope = k.get("no_rope_layers")
    if no_rope is not None and list(no_rope) != [int((i + 1) % interval != 0) for i in
                                                 range(k.need("num_hidden_layers"))]:
        raise InputError(f"{k.where('no_rope_layers')}: only every no_rope_layer_interval-th "
                         f"layer attending globally ({interval}) is modelled; describe the "
                         f"model with a `layers:` list")
    chunk = k.get("attention_chunk_size")
    experts = k.need("num_local_experts")
    return dict(
        {**_llama_like(k), "ffn_hidden": k.get("intermediate_size_mlp",
                                                default=k.need("intermediate_size"))},
        qk_norm=bool(k.get("use_qk_norm", default=False)),
        attention_chunk=chunk, sliding_window_pattern=interval if chunk else 1,
        moe_layer_freq=step, num_experts=experts,
        top_k=k.need("num_experts_per_tok") if experts > 1 else 1,
        moe_ffn_hidden=k.need("intermediate_size"),
        shared_ffn_hidden=k.need("intermediate_size") if experts > 1 else 0)


def _llama4(k: _Keys) -> dict[str, Any]:
    """Llama 4 with vision (Llama4ForConditionalGeneration): the language model of
    `text_config` only; the vision encoder and its projector are left out, and a note says
    so."""
    return _language_model(k, _llama4_text, family="llama4",
                           left_out="vision encoder (vision_config) and its projector")


def _glm4_moe(k: _Keys) -> dict[str, Any]:
    """GLM-4.5 / 4.6 / 4.7 (modeling_glm4_moe.py; GLM-4.5 report, arXiv:2508.06471, Table 1):
    GQA with biases on Q, K and V (attention_bias), an RMSNorm on each head's queries and keys
    where use_qk_norm (GLM-4.5: yes, GLM-4.5-Air: no), first_k_dense_replace dense layers, then
    routed experts of moe_intermediate_size beside n_shared_experts shared ones, sigmoid routing
    with a score-correction bias (Glm4MoeTopkRouter.e_score_correction_bias: the
    auxiliary-loss-free balancing), and num_nextn_predict_layers MTP layers. Its
    partial_rotary_factor (0.5) rotates half of each head: no parameters or matmuls, the rotary
    kernel priced on the whole head."""
    moe_ffn = k.need("moe_intermediate_size")
    return dict(
        **_llama_like(k), qk_norm=bool(k.get("use_qk_norm", default=False)),
        num_experts=k.need("n_routed_experts"), top_k=k.need("num_experts_per_tok"),
        moe_ffn_hidden=moe_ffn,
        shared_ffn_hidden=(k.get("n_shared_experts", default=0) or 0) * moe_ffn,
        first_k_dense=k.get("first_k_dense_replace", default=0),
        router_bias=True, load_balancing="expert_bias",
        mtp_layers=k.get("num_nextn_predict_layers", default=0), **_router_groups(k),
        partial_rotary=_partial_rotary(k, "partial_rotary_factor", default=0.5))


def _minimax_m2(k: _Keys) -> dict[str, Any]:
    """MiniMax-M2 / M2.1 / M2.5 (modeling_minimax_m2.py): GQA without biases, an RMSNorm over
    the whole Q and K projections (q_norm over heads x head_dim, as OLMo 2: per-head weights),
    every layer an MoE of num_local_experts SwiGLU experts of intermediate_size, top
    num_experts_per_tok by a sigmoid router whose e_score_correction_bias chooses the experts
    (auxiliary-loss-free), no shared expert. Its rotary_dim (64 of 128) rotates part of each
    head (the rotary kernel priced on the whole head). The MTP modules the file may name
    (num_mtp_modules) are not in the released checkpoints and are not counted; MiniMax's 230B
    total leaves them out too."""
    shared = k.get("shared_intermediate_size", default=0) or 0
    if shared:
        raise InputError(f"{k.where('shared_intermediate_size')}: {shared}: MiniMaxM2's "
                         f"decoder has no shared expert; only 0 is modelled")
    out = {**_llama_like(k), "qk_norm": bool(k.get("use_qk_norm", default=True)),
           "num_experts": k.need("num_local_experts", "num_experts"),
           "top_k": k.need("num_experts_per_tok"),
           "moe_ffn_hidden": k.need("intermediate_size"),
           "router_bias": True, "load_balancing": "expert_bias"}
    out["qk_norm_per_head"] = out["qk_norm"]
    rotary_dim, head_dim = k.get("rotary_dim", default=0), k.get("head_dim", default=0)
    if rotary_dim and head_dim and rotary_dim < head_dim:
        out["partial_rotary"] = rotary_dim / head_dim
    return out


def _dots1(k: _Keys) -> dict[str, Any]:
    """dots.llm1 (modeling_dots1.py; rednote-hilab, arXiv:2506.05767): attention with an
    RMSNorm on each head's queries and keys, first_k_dense_replace dense layers of
    intermediate_size, then n_routed_experts SwiGLU experts of moe_intermediate_size, top
    num_experts_per_tok, beside an ungated shared block n_shared_experts wide, routed by a
    sigmoid with a score-correction bias (DeepSeek-V3's auxiliary-loss-free balancing)."""
    moe_ffn = k.need("moe_intermediate_size")
    return dict(
        **_llama_like(k), qk_norm=True,
        num_experts=k.need("n_routed_experts", "num_local_experts"),
        top_k=k.need("num_experts_per_tok"), moe_ffn_hidden=moe_ffn,
        shared_ffn_hidden=(k.get("n_shared_experts", default=0) or 0) * moe_ffn,
        first_k_dense=k.get("first_k_dense_replace", default=0),
        router_bias=True, load_balancing="expert_bias", **_router_groups(k))


def _per_layer(k: _Keys, name: str) -> int:
    """An integer key Hunyuan may give per layer (a list): one value for all layers."""
    value = k.config.get(name)
    if isinstance(value, list):
        if not value or any(v != value[0] for v in value):
            raise InputError(f"{k.where(name)}: {value!r:.60}: only one value for every layer "
                             f"is modelled; describe the model with a `layers:` list")
        return _Keys({name: value[0]}, k.file, k.prefix).need(name)
    return k.need(name)


def _hunyuan_v1_moe(k: _Keys) -> dict[str, Any]:
    """Hunyuan-A13B (modeling_hunyuan_v1_moe.py): GQA with an RMSNorm on each head's queries
    and keys (after the rotary embedding: the same kernels), every layer an MoE of
    num_experts SwiGLU experts, top moe_topk by a softmax router with an auxiliary loss,
    beside one ungated shared MLP. transformers builds the experts and the shared MLP at
    intermediate_size (HunYuanMoEV1MLP), whatever moe_intermediate_size says; A13B's are the
    same (3072)."""
    width = k.need("intermediate_size")
    return dict(
        {**_llama_like(k), "head_dim": k.get("head_dim", "attention_head_dim")},
        qk_norm=bool(k.get("use_qk_norm", default=True)),
        num_experts=_per_layer(k, "num_experts"), top_k=_per_layer(k, "moe_topk"),
        moe_ffn_hidden=width, shared_ffn_hidden=width)


def _ernie_bias(k: _Keys) -> bool:
    return bool(k.get("use_bias", default=False))


def _ernie4_5(k: _Keys) -> dict[str, Any]:
    """ERNIE 4.5 dense (modeling_ernie4_5.py): Llama-like, head_dim wide heads (0.3B: 16 of 128
    over a hidden of 1024), use_bias on every projection, tied embeddings by default."""
    return {**_llama_like(k), "bias": _ernie_bias(k), "qkv_bias": _ernie_bias(k),
            "tie_embeddings": bool(k.get("tie_word_embeddings", default=True))}


def _ernie4_5_moe(k: _Keys) -> dict[str, Any]:
    """ERNIE 4.5 MoE (modeling_ernie4_5_moe.py; 21B-A3B, 300B-A47B): ERNIE 4.5 attention;
    layers from moe_layer_start_index to moe_layer_end_index (-1: the last) are MoE when
    (index + 1) % moe_layer_interval is 0, the others dense SwiGLUs of intermediate_size; an
    MoE layer routes to moe_k of moe_num_experts experts of moe_intermediate_size by a
    softmax whose e_score_correction_bias picks the experts (moe_use_aux_free; Baidu trained
    with a small auxiliary loss beside it), plus moe_num_shared_experts shared ones. Only
    every layer from the start being MoE is modelled; the MTP layer the checkpoint may carry
    is not counted (transformers ignores it)."""
    layers = k.need("num_hidden_layers")
    start = k.get("moe_layer_start_index", default=1)
    end = k.get("moe_layer_end_index", default=-1)
    interval = k.get("moe_layer_interval", default=1)
    if interval != 1 or end not in (-1, layers - 1):
        name = "moe_layer_interval" if interval != 1 else "moe_layer_end_index"
        raise InputError(f"{k.where(name)}: {k.get(name)}: only every layer from "
                         f"moe_layer_start_index to the last being MoE is modelled; describe "
                         f"the model with a `layers:` list")
    moe_ffn = k.need("moe_intermediate_size")
    aux_free = bool(k.get("moe_use_aux_free", default=False))
    return dict(
        **_ernie4_5(k), num_experts=k.need("moe_num_experts", "num_experts"),
        top_k=k.need("moe_k", "num_experts_per_tok"), moe_ffn_hidden=moe_ffn,
        shared_ffn_hidden=(k.get("moe_num_shared_experts", default=0) or 0) * moe_ffn,
        first_k_dense=start, router_bias=aux_free,
        load_balancing="expert_bias" if aux_free else "aux_loss")


def _glm4(k: _Keys) -> dict[str, Any]:
    """GLM-4-0414 dense (modeling_glm4.py): GQA with biases on Q, K and V (attention_bias; the
    output projection has none), four RMSNorms a layer (before and after the attention and
    the MLP, the after-norms on the branch before its residual add), a fused gate/up SwiGLU,
    and rotary on partial_rotary_factor (0.5) of each head: the kernel priced on the whole
    head."""
    return {**_llama_like(k), "norms_per_layer": 4,
            "partial_rotary": _partial_rotary(k, "partial_rotary_factor", default=0.5)}


def _seed_oss(k: _Keys) -> dict[str, Any]:
    """Seed-OSS (modeling_seed_oss.py): Llama-like with biases on Q, K and V
    (attention_bias), none on the output projection (attention_out_bias) or the MLP
    (mlp_bias), as Seed-OSS-36B ships."""
    for name in ("attention_out_bias", "mlp_bias"):
        if k.get(name, default=False):
            raise InputError(f"{k.where(name)}: true: only biases on Q, K and V "
                             f"(attention_bias) are modelled for seed_oss")
    return _llama_like(k)


def _granite(k: _Keys) -> dict[str, Any]:
    """IBM Granite 3.x dense (modeling_granite.py): Llama-like; its embedding, residual,
    attention and logit multipliers are scalars in the forward pass, no parameters and
    nothing priced."""
    return _llama_like(k)


def _granitemoe(k: _Keys) -> dict[str, Any]:
    """IBM Granite 3.x MoE (modeling_granitemoe.py): Granite attention, every layer an MoE of
    num_local_experts gated experts of intermediate_size (input_linear [E, 2 I, H],
    output_linear [E, H, I]), top num_experts_per_tok by a router without bias, with an
    auxiliary loss (router_aux_loss_coef), no shared expert."""
    return {**_llama_like(k), "num_experts": k.need("num_local_experts"),
            "top_k": k.need("num_experts_per_tok"),
            "moe_ffn_hidden": k.need("intermediate_size")}


def _smollm3(k: _Keys) -> dict[str, Any]:
    """SmolLM3 (modeling_smollm3.py): Llama-like with tied embeddings by default
    (SmolLM3Config tie_word_embeddings True; SmolLM3-3B's file leaves it out); its NoPE
    layers (no_rope_layers, every no_rope_layer_interval-th) skip the rotary embedding, no
    parameters, and the rotary kernel is priced on every layer."""
    return {**_llama_like(k),
            "tie_embeddings": bool(k.get("tie_word_embeddings", default=True)),
            "sliding_window": (k.get("sliding_window") if k.get("use_sliding_window",
                                                                default=False) else None)}


def _starcoder2(k: _Keys) -> dict[str, Any]:
    """StarCoder2 (modeling_starcoder2.py): GQA, LayerNorms with biases, biases on every
    projection (use_bias), a two-matrix GeLU MLP (c_fc, c_proj), a sliding window on every
    layer (sliding_window), tied embeddings unless the file says otherwise (15B: untied)."""
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), num_kv_heads=k.get("num_key_value_heads"),
        ffn_hidden=k.need("intermediate_size"), vocab_size=k.need("vocab_size"),
        mlp="gelu", norm="layernorm", position="rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=True)),
        bias=bool(k.get("use_bias", default=True)), dropout=False,
        sliding_window=_every_layer_window(k))


def _apertus(k: _Keys) -> dict[str, Any]:
    """Apertus (modeling_apertus.py; Swiss AI): GQA without biases, an RMSNorm on each head's
    queries and keys, a two-matrix MLP with the xIELU activation (up, down; priced as GeLU's
    elementwise pass, its two learnable scalars a layer not counted), two RMSNorms a layer,
    untied embeddings."""
    return {**_llama_like(k), "mlp": "gelu", "qk_norm": True}


def _arcee(k: _Keys) -> dict[str, Any]:
    """Arcee AFM (modeling_arcee.py): Llama-like with a two-matrix ReLU^2 MLP (hidden_act
    relu2: up, down)."""
    return {**_llama_like(k), "mlp": "squared_relu"}


def _cohere_layers(k: _Keys) -> dict[str, Any]:
    """Command R's layer (modeling_cohere.py, modular_cohere.py): attention and a SwiGLU MLP
    side by side on one LayerNorm's output (one norm a layer, weight only: counted as an
    RMSNorm's h weights, its mean subtraction not priced), heads of hidden / heads, no biases
    (attention_bias), tied embeddings (CohereConfig's default; the released files leave it
    out). logit_scale costs nothing we price."""
    hidden, heads = k.need("hidden_size"), k.need("num_attention_heads")
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=hidden, num_heads=heads,
        num_kv_heads=k.get("num_key_value_heads"),
        head_dim=hidden // heads if heads > 0 else None,     # CohereConfig: hidden / heads
        ffn_hidden=k.need("intermediate_size"), vocab_size=k.need("vocab_size"),
        mlp="swiglu", norm="rmsnorm", norms_per_layer=1, position="rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=True)), bias=False,
        qkv_bias=bool(k.get("attention_bias", default=False)), dropout=False)


def _cohere(k: _Keys) -> dict[str, Any]:
    """Command R / R+ / Aya 23 (modeling_cohere.py): `_cohere_layers`, full attention on every
    layer; with use_qk_norm (Command R+) a LayerNorm of head_dim per head on the queries and
    the keys (CohereLayerNorm of (heads, head_dim) and (kv_heads, head_dim) weights)."""
    qk_norm = bool(k.get("use_qk_norm", default=False))
    return {**_cohere_layers(k), "qk_norm": qk_norm, "qk_norm_per_head": qk_norm}


def _cohere2(k: _Keys) -> dict[str, Any]:
    """Command R7B / Command A (modeling_cohere2.py): `_cohere_layers`, with three
    sliding-window layers to one global (layer_types or sliding_window_pattern, 4) and rotary
    positions on the sliding layers only (no parameters)."""
    pattern = _local_global_period(k, default=4)
    return {**_cohere_layers(k),
            "sliding_window": k.get("sliding_window", default=4096) if pattern else None,
            "sliding_window_pattern": pattern or 1}


def _nemotron(k: _Keys) -> dict[str, Any]:
    """Nemotron-4 / Minitron / Nemotron-Mini (modeling_nemotron.py; Parmar et al. 2024,
    arXiv:2402.16819): GQA without biases (attention_bias, mlp_bias), a two-matrix
    squared-ReLU MLP (hidden_act relu2: up, down), two LayerNorms a layer with weights and
    biases (their weight + 1 is the same parameter count), rotary positions on part of each
    head (partial_rotary_factor: no parameters; the rotary kernel is priced on the whole
    head), untied embeddings by default. The head size is head_dim, or kv_channels in older
    files (Minitron-8B: 48 heads of 128 on a 4096 residual), else hidden / heads."""
    for name in ("attention_bias", "mlp_bias"):
        if k.get(name, default=False):
            raise InputError(f"{k.where(name)}: true: nemotron checkpoints have no biases; "
                             f"biases on some linears only are not modelled for it")
    act = k.get("hidden_act")
    if act is not None and act != "relu2":
        raise InputError(f"{k.where('hidden_act')}: {act!r:.40}: only relu2 (squared ReLU) is "
                         f"modelled for nemotron")
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), num_kv_heads=k.get("num_key_value_heads"),
        head_dim=k.get("head_dim", "kv_channels"), ffn_hidden=k.need("intermediate_size"),
        vocab_size=k.need("vocab_size"), mlp="squared_relu", norm="layernorm",
        position="rotary", tie_embeddings=bool(k.get("tie_word_embeddings", default=False)),
        bias=False, dropout=False,
        partial_rotary=_partial_rotary(k, "partial_rotary_factor", "rope_percent",
                                       "rope_percentage", default=0.5))


def _exaone4_period(k: _Keys) -> int | None:
    """EXAONE 4's local/global period: from layer_types, else `sliding_window_pattern` as an
    integer n or as a string of n - 1 'L's closed by a 'G' (EXAONE-4.0-32B: "LLLG"); None
    when the file sets no sliding_window (EXAONE-4.0-1.2B: every layer global)."""
    if k.get("layer_types") is None and not k.get("sliding_window", default=0):
        return None
    pattern = k.config.get("sliding_window_pattern")
    if isinstance(pattern, str) and k.get("layer_types") is None:
        n = len(pattern)
        if n == 0 or pattern != "L" * (n - 1) + "G":
            raise InputError(f"{k.where('sliding_window_pattern')}: {pattern!r:.40}: only a "
                             f"run of 'L' (sliding) layers closed by one 'G' (global) is "
                             f"modelled; describe the model with a `layers:` list")
        return n if n > 1 else None
    return _local_global_period(k, default=4)


def _exaone4(k: _Keys) -> dict[str, Any]:
    """EXAONE 4.0 (modeling_exaone4.py; LG AI Research, arXiv:2507.11407): GQA with an RMSNorm
    of head_dim on the queries and on the keys (one weight each, shared by the heads), an
    RMSNorm after the attention and after the SwiGLU MLP instead of before them (OLMo 2's
    placement: two a layer), no biases, untied embeddings by default (EXAONE-4.0-1.2B ties
    them). Three sliding-window layers to one global (32B: window 4096, "LLLG"); the global
    layers skip the rotary embedding (no parameters; the rotary kernel is priced on every
    layer). Without a sliding_window (1.2B) every layer is global."""
    pattern = _exaone4_period(k)
    return {**_llama_like(k), "qk_norm": True,
            "sliding_window": k.get("sliding_window", default=4096) if pattern else None,
            "sliding_window_pattern": pattern or 1}


def _glm4v_moe(k: _Keys) -> dict[str, Any]:
    """GLM-4.5V (Glm4vMoeForConditionalGeneration): the GLM-4.5-Air-shaped language model of
    `text_config` (glm4_moe's mapper; its head_dim from the file, as 4096 / 96 is not whole)
    only; the vision tower (vision_config, 0.86B) and its merger are left out, and a note
    says so."""
    return _language_model(k, _glm4_moe, family="glm4v_moe",
                           left_out="vision tower (vision_config) and its merger")


BAILING_V2_ONLY_KEYS = ("use_qk_norm", "n_group", "score_function",
                        "moe_router_enable_expert_bias", "partial_rotary_factor")
"""Keys only Ling 2.0's BailingMoeV2Config has: they tell the generations apart in a file
without `architectures`."""


def _bailing_moe(k: _Keys) -> dict[str, Any]:
    """inclusionAI Ling (model_type bailing_moe for both generations; the architectures key
    tells them apart, as vLLM's port does). Both: GQA through a fused QKV projection, biases
    where use_qkv_bias / use_bias, two RMSNorms a layer, routed SwiGLU experts of
    moe_intermediate_size beside num_shared_experts shared ones (one MLP of their summed width,
    moe_shared_expert_intermediate_size where given), first_k_dense_replace dense layers,
    untied embeddings.
    Ling 2.0 (BailingMoeV2ForCausalLM, modeling_bailing_moe_v2.py; Ling-mini/flash-2.0,
    Ling-1T): an RMSNorm of head_dim on the queries and keys (use_qk_norm), half of each head
    rotated (no parameters), sigmoid routing within n_group groups (topk_group of them) with
    an expert bias (the auxiliary-loss-free balancing; a saved buffer of E a layer, counted),
    num_nextn_predict_layers MTP layers (0 in the released chat checkpoints). A file without
    `architectures` is read as Ling 2.0 where it has one of `BAILING_V2_ONLY_KEYS`.
    Ling 1 (BailingMoeForCausalLM, modeling_bailing_moe.py; Ling-lite, Ling-plus): softmax
    routing with an auxiliary loss, no QK norm, no expert bias, no MTP."""
    arch = k.get("architectures") or []
    if not isinstance(arch, list):
        raise InputError(f"{k.where('architectures')}: must be a list (got {arch!r:.40})")
    v2 = ("BailingMoeV2ForCausalLM" in arch or k.config.get("model_type") == "bailing_moe_v2"
          or not arch and any(k.config.get(key) is not None for key in BAILING_V2_ONLY_KEYS))
    if not v2 and arch and "BailingMoeForCausalLM" not in arch:
        raise InputError(f"{k.where('architectures')}: {arch!r:.60}: bailing_moe is read as "
                         f"BailingMoeForCausalLM (Ling) or BailingMoeV2ForCausalLM (Ling 2.0)")
    moe_ffn = k.need("moe_intermediate_size")
    shared = k.get("moe_shared_expert_intermediate_size",
                   default=(k.get("num_shared_experts", default=0) or 0) * moe_ffn)
    out = dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), num_kv_heads=k.get("num_key_value_heads"),
        head_dim=k.get("head_dim"), ffn_hidden=k.need("intermediate_size"),
        vocab_size=k.need("vocab_size"), mlp="swiglu", norm="rmsnorm", position="rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=False)),
        bias=bool(k.get("use_bias", default=False)),
        qkv_bias=bool(k.get("use_qkv_bias", default=False)), dropout=False,
        num_experts=k.need("num_experts"), top_k=k.need("num_experts_per_tok"),
        moe_ffn_hidden=moe_ffn, shared_ffn_hidden=shared,
        first_k_dense=k.get("first_k_dense_replace", default=0))
    if not v2:
        return out
    return {**out, "qk_norm": bool(k.get("use_qk_norm", default=True)),
            "router_bias": True, "load_balancing": "expert_bias",
            "mtp_layers": k.get("num_nextn_predict_layers", default=0) or 0,
            "partial_rotary": _partial_rotary(k, "partial_rotary_factor"), **_router_groups(k)}


def _router_groups(k: _Keys) -> dict[str, Any]:
    """DeepSeek's group-limited routing (n_group, topk_group; V3: 8 and 4), where it groups."""
    groups = k.get("n_group", default=1) or 1
    if groups <= 1:
        return {}
    return dict(router_groups=groups, router_group_topk=k.need("topk_group"))


def _gpt_oss(k: _Keys) -> dict[str, Any]:
    """gpt-oss: GQA with biases and a learned sink per head, alternating sliding-window and
    full attention (layer_types), biased SwiGLU experts clamped to swiglu_limit and a biased
    router (modeling_gpt_oss.py)."""
    pattern = _local_global_period(k, default=2)   # sliding, full, sliding, ... (the default)
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), num_kv_heads=k.get("num_key_value_heads"),
        head_dim=k.get("head_dim"), ffn_hidden=k.need("intermediate_size"),
        vocab_size=k.need("vocab_size"), mlp="swiglu", norm="rmsnorm", position="rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=False)),
        bias=True, dropout=False, attention_sinks=True,
        sliding_window=k.get("sliding_window") if pattern else None,
        sliding_window_pattern=pattern or 1, num_experts=k.need("num_local_experts"),
        top_k=k.need("num_experts_per_tok", "experts_per_token"), router_bias=True,
        glu_clamp=k.get("swiglu_limit"))


def _gpt2(k: _Keys) -> dict[str, Any]:
    hidden = k.need("n_embd", "hidden_size")
    return dict(
        num_layers=k.need("n_layer", "num_hidden_layers"), hidden=hidden,
        num_heads=k.need("n_head", "num_attention_heads"),
        ffn_hidden=k.get("n_inner", default=4 * hidden), vocab_size=k.need("vocab_size"),
        max_positions=k.need("n_positions", "max_position_embeddings"), position="learned",
        tie_embeddings=True)


def _gpt_neox(k: _Keys) -> dict[str, Any]:
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), ffn_hidden=k.need("intermediate_size"),
        vocab_size=k.need("vocab_size"), position="rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=False)),
        bias=bool(k.get("attention_bias", default=True)), dropout=False,
        partial_rotary=_partial_rotary(k, "rotary_pct", "partial_rotary_factor",
                                       default=0.25))


def _bloom(k: _Keys) -> dict[str, Any]:
    hidden = k.need("hidden_size", "n_embed")
    return dict(
        num_layers=k.need("n_layer", "num_hidden_layers"), hidden=hidden,
        num_heads=k.need("n_head", "num_attention_heads"), ffn_hidden=4 * hidden,
        vocab_size=k.need("vocab_size"), position="alibi", embedding_norm="layernorm",
        tie_embeddings=True)


def _opt(k: _Keys) -> dict[str, Any]:
    hidden = k.need("hidden_size")
    projection = k.get("word_embed_proj_dim", default=hidden)
    if projection != hidden:
        raise InputError(f"{k.where('word_embed_proj_dim')}: {projection} differs from hidden_size "
                         f"({hidden}); OPT's embedding projections are not modelled")
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=hidden,
        num_heads=k.need("num_attention_heads"), ffn_hidden=k.need("ffn_dim"),
        vocab_size=k.need("vocab_size"), position="learned",
        # OPTLearnedPositionalEmbedding keeps 2 extra rows (offset = 2).
        max_positions=k.need("max_position_embeddings") + 2,
        tie_embeddings=bool(k.get("tie_word_embeddings", default=True)),
        bias=bool(k.get("enable_bias", default=True)),
        final_norm=bool(k.get("do_layer_norm_before", default=True))
        and not k.get("_remove_final_layer_norm", default=False))


def _falcon(k: _Keys) -> dict[str, Any]:
    """Falcon (and its legacy RefinedWeb types): see modeling_falcon.py for the KV heads."""
    hidden = k.need("hidden_size", "n_embed")
    heads = k.need("num_attention_heads", "n_head")
    legacy_new = k.config.get("model_type") == "RefinedWeb"
    new_arch = bool(k.get("new_decoder_architecture", default=legacy_new))
    if new_arch or not k.get("multi_query", default=True):
        kv_heads = k.get("num_kv_heads", "n_head_kv", default=heads)
    else:
        kv_heads = 1
    parallel = bool(k.get("parallel_attn", default=True))
    two_norms = new_arch or not parallel or k.get("num_ln_in_parallel_attn") == 2
    return dict(
        num_layers=k.need("num_hidden_layers", "n_layer"), hidden=hidden, num_heads=heads,
        num_kv_heads=kv_heads, ffn_hidden=k.get("ffn_hidden_size", default=4 * hidden),
        vocab_size=k.need("vocab_size"),
        position="alibi" if k.get("alibi", default=False) else "rotary",
        tie_embeddings=bool(k.get("tie_word_embeddings", default=True)),
        bias=bool(k.get("bias", default=False)), norms_per_layer=2 if two_norms else 1,
        dropout=False)


def _bert(k: _Keys) -> dict[str, Any]:
    return dict(
        num_layers=k.need("num_hidden_layers"), hidden=k.need("hidden_size"),
        num_heads=k.need("num_attention_heads"), ffn_hidden=k.need("intermediate_size"),
        vocab_size=k.need("vocab_size"), position="learned",
        max_positions=k.need("max_position_embeddings"),
        num_token_types=k.get("type_vocab_size", default=2), embedding_norm="layernorm",
        tie_embeddings=True, causal=False, final_norm=False, lm_head_transform="layernorm",
        lm_head_bias=True)


MAPPERS: dict[str, Callable[[_Keys], dict[str, Any]]] = {
    "llama": _llama_like, "mistral": _mistral, "mistral3": _mistral3, "mixtral": _llama_like,
    "qwen2": _qwen2,
    "phi": _phi, "phi3": _phi3, "phimoe": _phimoe,
    "gemma": _gemma1, "gemma2": _gemma2, "gemma3_text": _gemma3_text, "gemma3": _gemma3,
    "olmo2": _olmo2, "olmo3": _olmo3, "olmoe": _olmoe,
    "qwen2_moe": _qwen2_moe, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe,
    "qwen2_vl": _qwen2_vl, "qwen2_5_vl": _qwen2_vl, "llava": _vlm, "llava_next": _vlm,
    "llava_onevision": _vlm, "paligemma": _vlm, "internvl": _vlm,
    "qwen3_vl": _qwen3_vl, "qwen3_vl_moe": _qwen3_vl_moe,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "kimi_k2": _deepseek,
    "kimi_k25": _kimi_k25, "glm4_moe": _glm4_moe, "llama4": _llama4,
    "llama4_text": _llama4_text, "gpt_oss": _gpt_oss, "minimax_m2": _minimax_m2,
    "dots1": _dots1, "hunyuan_v1_moe": _hunyuan_v1_moe, "ernie4_5": _ernie4_5,
    "ernie4_5_moe": _ernie4_5_moe, "glm4": _glm4, "seed_oss": _seed_oss,
    "granite": _granite, "granitemoe": _granitemoe, "smollm3": _smollm3,
    "starcoder2": _starcoder2, "apertus": _apertus, "arcee": _arcee, "cohere": _cohere,
    "cohere2": _cohere2, "nemotron": _nemotron,
    "glm4v_moe": _glm4v_moe, "exaone4": _exaone4, "bailing_moe": _bailing_moe,
    "bailing_moe_v2": _bailing_moe,
    "gpt2": _gpt2, "gpt_neox": _gpt_neox, "bloom": _bloom, "opt": _opt, "falcon": _falcon,
    "RefinedWeb": _falcon, "RefinedWebModel": _falcon, "bert": _bert,
}


_HYBRID = ("its layers mix attention with state-space (Mamba) or linear-attention (Gated "
           "DeltaNet, lightning attention) mixers, which the planner does not model yet")
UNMODELLED: dict[str, str] = {
    **{kind: _HYBRID for kind in (
        "nemotron_h", "qwen3_next", "qwen3_5", "qwen3_5_moe", "falcon_h1", "jamba", "bamba",
        "granitemoehybrid", "kimi_linear", "lfm2", "lfm2_moe", "zamba", "zamba2", "mamba",
        "mamba2", "minimax", "plamo2")},
    **{kind: "DeepSeek Sparse Attention (a lightning indexer choosing 2,048 keys for each "
             "query) is not modelled, and dense attention would overstate its long-context "
             "cost and leave the indexer out" for kind in ("deepseek_v32", "glm_moe_dsa")},
    "gemma3n": "Gemma 3n's per-layer embeddings, AltUp and MatFormer layers are not modelled",
}
"""Model types the planner knows and does not model, with why: their names are close to
supported ones (nemotron_h, qwen3_next, deepseek_v32, gemma3n), and a "did you mean" would
invite pricing another architecture under their shapes."""


def shorthand_from_hf(config: dict[str, Any], *, file: str, name: str) -> dict[str, Any]:
    """The transformer-shorthand fields (plus training defaults) for one HF config.json."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        what = "is missing" if model_type is None else f"must be a string (got {model_type!r:.40})"
        raise InputError(f"{file}: model_type: {what}; supported: {', '.join(sorted(MAPPERS))}")
    if model_type in UNMODELLED:
        raise InputError(f"{file}: model_type: {model_type!r} is not supported: "
                         f"{UNMODELLED[model_type]}; no supported type stands in for it")
    if model_type not in MAPPERS:
        close = difflib.get_close_matches(str(model_type), list(MAPPERS), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise InputError(f"{file}: model_type: {model_type!r} is not supported{hint}; "
                         f"supported: {', '.join(sorted(MAPPERS))}")
    keys = _Keys(config, file)
    # A mapper's own context (a multimodal config's text model) wins over the top level's.
    return {"name": name, "description": f"Hugging Face {model_type} config ({file})",
            **_context(keys), **MAPPERS[model_type](keys)}


def _context(k: _Keys) -> dict[str, Any]:
    """The longest context the config gives, and the training seq_len we plan for without
    --seq-len. No batch: the loader gives about 4M tokens at the seq_len the run ends up with."""
    max_positions = k.get("max_position_embeddings", "n_positions", "max_seq_len",
                          default=0) or None
    seq_len = min(max_positions or DEFAULT_MAX_SEQ_LEN, DEFAULT_MAX_SEQ_LEN)
    context = {"max_context": max_positions} if max_positions else {}
    return {**context, "training": {"seq_len": seq_len}}
