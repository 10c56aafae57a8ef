"""One record per cited source. Docstrings and zoo files refer to these keys."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    key: str
    title: str
    where: str
    """arXiv id, DOI, URL or repository path."""


_ALL = (
    Reference("narayanan2021", "Efficient Large-Scale Language Model Training on GPU Clusters "
              "Using Megatron-LM (SC21)", "arXiv:2104.04473"),
    Reference("korthikanti2022", "Reducing Activation Recomputation in Large Transformer Models",
              "arXiv:2205.05198"),
    Reference("rajbhandari2020", "ZeRO: Memory Optimizations Toward Training Trillion Parameter "
              "Models", "arXiv:1910.02054"),
    Reference("megatron_dist_optimizer", "Megatron-LM distributed optimizer documentation",
              "NVIDIA/Megatron-LM docs/source/api-guide/dist_optimizer.md"),
    Reference("megatron_theoretical_memory", "Megatron-LM theoretical memory usage",
              "NVIDIA/Megatron-LM megatron/training/theoretical_memory_usage.py"),
    Reference("chowdhery2022", "PaLM: Scaling Language Modeling with Pathways",
              "arXiv:2204.02311, Appendix B"),
    Reference("nccl_tests", "NCCL tests performance documentation",
              "NVIDIA/nccl-tests doc/PERFORMANCE.md"),
    Reference("shoeybi2019", "Megatron-LM: Training Multi-Billion Parameter Language Models "
              "Using Model Parallelism", "arXiv:1909.08053"),
    Reference("dao2022", "FlashAttention: Fast and Memory-Efficient Exact Attention",
              "arXiv:2205.14135"),
    Reference("jumper2021", "Highly accurate protein structure prediction with AlphaFold "
              "(Supplementary Information)", "doi:10.1038/s41586-021-03819-2"),
    Reference("cheng2022fastfold", "FastFold: Reducing AlphaFold Training Time from 11 Days to "
              "67 Hours", "arXiv:2203.00854"),
    Reference("williams2009", "Roofline: an insightful visual performance model",
              "doi:10.1145/1498765.1498785"),
    Reference("li2014ps", "Scaling Distributed Machine Learning with the Parameter Server",
              "OSDI 2014"),
    Reference("brown2020gpt3", "Language Models are Few-Shot Learners", "arXiv:2005.14165"),
    Reference("touvron2023llama2", "Llama 2: Open Foundation and Fine-Tuned Chat Models",
              "arXiv:2307.09288"),
    Reference("dubey2024llama3", "The Llama 3 Herd of Models", "arXiv:2407.21783"),
    Reference("jiang2024mixtral", "Mixtral of Experts", "arXiv:2401.04088"),
    Reference("mistral2024mixtral8x22b", "Cheaper, Better, Faster, Stronger (Mixtral 8x22B)",
              "mistral.ai/news/mixtral-8x22b; HF mistralai/Mixtral-8x22B-v0.1"),
    Reference("deepseek2024v3", "DeepSeek-V3 Technical Report", "arXiv:2412.19437"),
    Reference("deepseek2024v2", "DeepSeek-V2: A Strong, Economical, and Efficient "
              "Mixture-of-Experts Language Model", "arXiv:2405.04434"),
    Reference("qwen2025qwen3", "Qwen3 Technical Report", "arXiv:2505.09388; HF Qwen/Qwen3-* "
              "model cards"),
    Reference("openai2025gptoss", "gpt-oss-120b & gpt-oss-20b Model Card",
              "arXiv:2508.10925; HF openai/gpt-oss-120b"),
    Reference("wang2024auxfree", "Auxiliary-Loss-Free Load Balancing Strategy for "
              "Mixture-of-Experts", "arXiv:2408.15664"),
    Reference("liu2025folding", "MoE Parallel Folding: Heterogeneous Parallelism Mappings for "
              "Efficient Large-Scale MoE Model Training with Megatron Core", "arXiv:2504.14960"),
    Reference("bigscience2022bloom", "BLOOM: A 176B-Parameter Open-Access Multilingual Language "
              "Model", "arXiv:2211.05100"),
    Reference("devlin2019bert", "BERT: Pre-training of Deep Bidirectional Transformers",
              "arXiv:1810.04805"),
    Reference("radford2019gpt2", "Language Models are Unsupervised Multitask Learners",
              "OpenAI 2019; HF config openai-community/gpt2-xl"),
    Reference("rashidi2021ace", "Enabling Compute-Communication Overlap in Distributed Deep "
              "Learning Training Platforms (ACE)", "ISCA 2021, doi:10.1109/ISCA52012.2021.00049"),
    Reference("zhao2023fsdp", "PyTorch FSDP: Experiences on Scaling Fully Sharded Data "
              "Parallel", "arXiv:2304.11277"),
    Reference("kingma2015adam", "Adam: A Method for Stochastic Optimization", "arXiv:1412.6980"),
    Reference("shah2024fa3", "FlashAttention-3: Fast and Accurate Attention with Asynchrony and "
              "Low-precision", "arXiv:2407.08608"),
)

REFERENCES: dict[str, Reference] = {r.key: r for r in _ALL}
