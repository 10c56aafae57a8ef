"""Other frameworks' names for the planner's fields, for "did you mean" in input errors.

A strategy.yaml written from a Megatron-LM or NeMo recipe says `tensor_model_parallel_size: 2`;
spelling alone points at the wrong field (difflib finds `sequence_parallel` closest to
`tensor_parallel`), so a key named here is answered with the field it means. Names come from
Megatron-LM's arguments and `ModelParallelConfig` fields, NeMo configs, torchtitan's
`[parallelism]` and `[training]`, DeepSpeed's ds_config.json, MindSpore's parallel config and
Hugging Face `config.json` keys. Only suggestions: the files are still read by their own
names (frameworks/ reads the frameworks' own files).
"""

from __future__ import annotations

FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    # strategy.yaml
    "tp": ("tensor_model_parallel_size", "tensor_parallel", "tensor_parallel_size",
           "tensor_parallel_degree", "tp_size", "tp_degree", "autotp_size", "model_parallel"),
    "pp": ("pipeline_model_parallel_size", "pipeline_parallel", "pipeline_parallel_size",
           "pipeline_parallel_degree", "pp_size", "pp_degree", "pipeline_stage",
           "pipeline_stages"),
    "dp": ("data_parallel_size", "data_parallel", "data_parallel_degree", "dp_size",
           "dp_degree"),
    "vpp": ("virtual_pipeline_model_parallel_size", "virtual_pipeline_parallel_size",
            "num_virtual_stages_per_pipeline_rank", "vp_size", "virtual_pipeline"),
    "cp": ("context_parallel_size", "context_parallel", "context_parallel_degree", "cp_size",
           "cp_degree", "sequence_parallel_size"),
    "ep": ("expert_model_parallel_size", "expert_parallel", "expert_parallel_size",
           "expert_parallel_degree", "ep_size", "ep_degree"),
    "etp": ("expert_tensor_parallel_size", "expert_tensor_parallel_degree", "etp_size"),
    "micro_batch": ("micro_batch_size", "train_micro_batch_size_per_gpu", "local_batch_size",
                    "micro_batch_size_per_gpu", "mbs"),
    "global_batch": ("global_batch_size", "train_batch_size", "gbs", "batch_size"),
    "zero_stage": ("zero", "zero_optimization", "use_distributed_optimizer", "stage"),
    "recompute": ("recompute_granularity", "recompute_method", "activation_checkpointing",
                  "activation_checkpoint", "gradient_checkpointing"),
    "cp_comm": ("cp_comm_type",),
    "moe_dispatcher": ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend"),
    "cuda_graphs": ("cuda_graph_impl", "enable_cuda_graph", "cuda_graph"),
    # training (a model file's `training:` section)
    "seq_len": ("seq_length", "sequence_length", "encoder_seq_length", "max_seq_len",
                "max_seq_length", "seqlen"),
    "precision": ("bf16", "fp16", "dtype", "torch_dtype", "mixed_precision_param"),
    # model.yaml
    "num_layers": ("num_hidden_layers", "n_layer", "n_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model", "dim", "model_dim"),
    "num_heads": ("num_attention_heads", "n_head", "n_heads"),
    "num_kv_heads": ("num_key_value_heads", "num_query_groups", "n_kv_heads"),
    "ffn_hidden": ("ffn_hidden_size", "intermediate_size", "ffn_dim", "n_inner"),
    "vocab_size": ("padded_vocab_size",),
    "max_positions": ("max_position_embeddings", "n_positions"),
    "num_experts": ("num_moe_experts", "num_local_experts", "n_routed_experts"),
    "top_k": ("moe_router_topk", "num_experts_per_tok"),
    "moe_ffn_hidden": ("moe_ffn_hidden_size", "moe_intermediate_size"),
    "shared_ffn_hidden": ("moe_shared_expert_intermediate_size",
                          "shared_expert_intermediate_size"),
    "first_k_dense": ("first_k_dense_replace",),
    "mtp_layers": ("mtp_num_layers", "num_nextn_predict_layers"),
    "tie_embeddings": ("tie_word_embeddings", "share_embeddings_and_output_weights"),
    # cluster.yaml
    "gpus_per_node": ("num_gpus_per_node", "nproc_per_node", "gpus"),
    "num_nodes": ("nnodes", "nodes"),
}
"""Planner field -> the names other frameworks give it."""

_MEANT = {alias: field for field, aliases in FIELD_ALIASES.items() for alias in aliases}


def meant_field(key: str) -> str | None:
    """The planner field another framework's `key` names ('tensor_model_parallel_size' ->
    'tp'), written with dashes or underscores, with or without a leading '--'; None if none."""
    normal = key.strip().lstrip("-").replace("-", "_").lower()
    return _MEANT.get(normal)
