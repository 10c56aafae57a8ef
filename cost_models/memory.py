"""Per-GPU memory: model states (weights, gradients, optimizer) and activations.

Symbols (Korthikanti et al. 2022, arXiv:2205.05198, Table 1): s sequence length, b micro-batch,
h hidden, a attention heads, t tensor-parallel size, p pipeline size, v interleaved chunks per
GPU, d data-parallel size, V vocabulary, L layers, Psi parameters. Numeric arguments may be
numpy arrays (the search evaluates many plans at once); enum arguments are scalars.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from cost_models.compute import MlaDims
from cost_models.enums import (DEFAULT_RECOMPUTE_MODULES, AttentionKind, MasterWeights, MlpKind,
                               Optimizer, Precision, Recompute, RecomputeModule, ZeroStage)
from cost_models.units import BYTES_16BIT, BYTES_FP32, BYTES_MASK, BYTES_TOKEN_ID


class StateBytes(NamedTuple):
    """Bytes per parameter of each model-state component."""

    weights: float
    gradients: float
    optimizer: float
    master: float = 0.0
    """Of `optimizer`, the fp32 master weights (mixed precision); not added again in `total`."""

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def state_bytes_per_param(precision: Precision, optimizer: Optimizer, *,
                          gradients_16bit: bool = False,
                          moments_16bit: bool = False) -> StateBytes:
    """Bytes per parameter of weights, gradients and optimizer state, without sharding.

    Ref: Megatron-LM docs/source/api-guide/dist_optimizer.md, the bytes-per-parameter table:
    fp16 params + fp16 grads: 20; bf16 params + fp32 grads: 18; fp32 params + fp32 grads: 16.
    Terms: 16-bit weights (2) or fp32 (4); gradients in fp16 (2) or, for bf16, accumulated and
    reduced in fp32 (4, Megatron's accumulate_allreduce_grads_in_fp32); the optimizer keeps
    fp32 master weights (4) for mixed precision, for fp16 also an fp32 copy of the gradients
    (4), and Adam's two fp32 moments (8; Kingma & Ba 2015) or SGD's momentum (4).
    The ZeRO paper's mixed-precision Adam (2 + 2 + K with K = 12) is the same accounting
    without Megatron's fp32 gradient copy; `model_state_bytes` takes any of these.
    `gradients_16bit`: mixed precision accumulates and reduces the gradients in the 16-bit
    parameter dtype (Megatron-LM --grad-reduce-in-bf16 turns accumulate_allreduce_grads_in_fp32
    off, arguments.py @d98e8a64; the grad buffer then takes the param dtype,
    core/distributed/param_and_grad_buffer.py group_params_for_buffers): 2 bytes, not 4.
    `moments_16bit`: the optimizer's moments in a 16-bit dtype (Megatron-LM
    --use-precision-aware-optimizer with --exp-avg-dtype / --exp-avg-sq-dtype bf16,
    core/optimizer/optimizer_config.py exp_avg_dtype; Transformer Engine FusedAdam): 2 bytes
    each, the fp32 master weights kept.
    """
    mixed = precision is not Precision.FP32
    weights = BYTES_16BIT if mixed else BYTES_FP32
    gradients = BYTES_16BIT if precision is Precision.FP16 or (mixed and gradients_16bit) \
        else BYTES_FP32
    master = BYTES_FP32 if mixed else 0                          # fp32 copy of the weights
    main_grads = BYTES_FP32 if precision is Precision.FP16 else 0  # fp32 copy of fp16 grads
    moment = BYTES_16BIT if moments_16bit else BYTES_FP32
    moments = {Optimizer.ADAM: 2 * moment, Optimizer.SGD_MOMENTUM: moment,
               Optimizer.SGD: 0}[optimizer]
    return StateBytes(weights, gradients, master + main_grads + moments, master)


def model_state_bytes(*, num_params, dp, zero_stage, per_param: StateBytes,
                      master_weights: MasterWeights = MasterWeights.OPTIMIZER,
                      unsharded_accumulation=False) -> StateBytes:
    """Bytes of weights, gradients and optimizer state one data-parallel rank holds.

    Ref: Rajbhandari et al. 2020 (arXiv:1910.02054), Sec. 5 and Figure 1, with K the optimizer
    bytes per parameter: baseline (2 + 2 + K) Psi; P_os 4 Psi + K Psi / d; P_os+g
    2 Psi + (2 + K) Psi / d; P_os+g+p (2 + 2 + K) Psi / d. Megatron-LM's distributed optimizer
    is P_os (docs: 18 -> 6 + 12/d for bf16 with fp32 gradients). `zero_stage` may be an array
    of stages (ZeroStage values).

    `master_weights` PARAMETERS (FSDP): the fp32 parameter is the master
    (`per_param.master`), reported as weights and sharded wherever FSDP shards (ZeRO 2 and 3:
    fully_shard shards the parameter itself); the 16-bit weight (`per_param.weights`) is only
    the unsharded compute copy: held whole from forward to backward below ZeRO-3 (FSDP2
    reshard_after_forward=False; DDP under torch.autocast, whose cast cache keeps it for the
    backward), and under ZeRO-3 one gathered unit at a time, which `zero3_gather_buffer_bytes`
    counts, so none here. Below ZeRO-3 the total equals the OPTIMIZER accounting; at ZeRO-3 it
    is (4 + 4 + 8) Psi / d, not 18 Psi / d, for bf16 Adam (torch FSDP2,
    torch/distributed/fsdp/_fully_shard/_fsdp_param.py: the sharded parameter keeps its fp32
    dtype, the all-gather casts to param_dtype; _fsdp_collectives.py foreach_reduce casts the
    reduced gradient back to it, so the gradients are fp32 whatever the reduce dtype). Without
    a master (fp32 training) both accountings agree.

    `unsharded_accumulation` (may be an array; FSDP under torch.distributed.pipelining): the
    pipeline schedule runs every backward but a step's last with FSDP's gradient sync and
    resharding off (torch/distributed/pipelining/stage.py backward_maybe_with_nosync:
    set_requires_gradient_sync(False), set_reshard_after_backward(False)), so the stage's
    gradients accumulate unsharded in the reduce dtype and its 16-bit weights stay gathered
    through the step: gradients as below ZeRO-2, weights as ZeRO-2's whatever the stage.
    """
    zero = np.asarray(zero_stage)
    whole = np.asarray(unsharded_accumulation, dtype=bool) & (zero >= ZeroStage.GRADIENTS)
    w = per_param.weights * num_params
    g = per_param.gradients * num_params
    o = per_param.optimizer * num_params
    master = per_param.master * num_params
    fsdp_master = master_weights is MasterWeights.PARAMETERS and per_param.master > 0
    if fsdp_master:
        # TODO: fp16 keeps Megatron's fp32 gradient copy in `optimizer` here; FSDP's gradients
        # are fp32 already, so it over-counts 4 bytes per parameter (no framework of ours runs
        # FSDP in fp16; torchtitan's mixed_precision_param is bf16 or fp32).
        o = o - master                                            # the moments
        g = master                  # the reduced gradient takes the fp32 parameter's dtype
    o = np.where(zero >= ZeroStage.OPTIMIZER_STATES, o / dp, o)
    g = np.where((zero >= ZeroStage.GRADIENTS) & ~whole, g / dp, g)
    gathered = (zero >= ZeroStage.PARAMETERS) & ~whole          # the 16-bit weights sharded
    if fsdp_master:
        master = np.where(zero >= ZeroStage.GRADIENTS, master / dp, master)
        w = np.where(gathered, 0.0, w) + master                    # 16-bit copy + fp32 shard
    else:
        w = np.where(gathered, w / dp, w)
    return StateBytes(w, g, o)


def transformer_layer_activation_bytes(
    *, seq_len, micro_batch, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int,
    ffn_hidden: int, mlp: MlpKind, attention: AttentionKind, dropout: bool,
    norms_per_layer: int = 2, tp, sequence_parallel: bool, recompute: Recompute,
    bytes_per_value: int = BYTES_16BIT, mla: MlaDims | None = None,
    linear_input_bytes: float | None = None, qk_norm: bool = False,
    attention_input_bytes: float | None = None,
    recompute_modules: frozenset[RecomputeModule] = DEFAULT_RECOMPUTE_MODULES,
    moe_layer: bool = False,
):
    """Bytes of activations one transformer layer keeps for its backward pass, per micro-batch.

    Ref: Korthikanti et al. 2022 (arXiv:2205.05198), Sec. 4.1 and Table 2, derived term by term
    so that it generalises; with g = a, a*d = h, f = 4h, GeLU, dropout, two norms, standard
    attention it reduces exactly to the paper's forms:
      no parallelism          s b h (34 + 5 a s / h)
      tensor parallel         s b h (10 + 24/t + 5 a s / (h t))
      tensor + sequence par.  s b h / t (34 + 5 a s / h)
      + selective recompute   the 5 a s / h term is dropped
      full recompute          2 s b h (the layer input; / t with sequence parallelism, as
                              Megatron-LM stores the sequence-parallel shard)
    Generalisations: GQA stores K and V with g*d columns; SwiGLU stores the gate and up
    outputs and their product (6 s b f instead of GeLU's 4 s b f); models without dropout
    store no masks (and the attention-over-V input is the softmax output itself: 2 a s^2 b
    instead of 5 a s^2 b); flash attention (Dao et al. 2022) stores only the fp32 softmax
    log-sum-exp (4 a s b) instead of any s x s tensor. `ffn_hidden` is the tensor-parallel MLP
    (an MoE layer's shared experts, 0 for none; its routed experts are `moe_activation_bytes`).
    MLA (DeepSeek-V2, Sec. 2.1.2) keeps Q and K with d_nope + d_rope per head, V and the
    attention output with d_v, and on every TP rank the latents: the query latent and the
    key-value latent, each as its norm's input and the up projection's input, and the rotary
    key. `bytes_per_value` is 2 for the paper's 16-bit activations and 4 for fp32 training;
    masks stay one byte. `linear_input_bytes` (default: `bytes_per_value`) is what an input
    of a linear layer (QKV, attention output, the second MLP matrix, MLA's up projections)
    takes: FP8 training with Transformer Engine saves them quantized ("Stores linear layer
    inputs in FP8 instead of BF16", Megatron-LM megatron/core/transformer/moe/README.md),
    `fp8.fp8_value_bytes`.
    `qk_norm` (Qwen3, Gemma 3, OLMo 2): an RMSNorm over head_dim on the queries and on the keys
    before RoPE (HF transformers Qwen3Attention.forward: q_norm(q_proj(x)), k_norm(k_proj(x));
    Megatron-Core megatron/core/transformer/attention.py get_query_key_value_tensors,
    q_layernorm/k_layernorm @d98e8a64) keeps Q and K before their norms, as the norms' inputs,
    beside the normalised, rotated Q and K the attention saves, and the fp32 1/rms of each
    head row (aten._fused_rms_norm saves input and rstd, pytorch derivatives.yaml; TE rmsnorm
    saves rsigma). They lie outside the attention core, so selective recompute keeps them;
    they split with the heads over TP. Standard attention only (no MLA model has QK norms).
    (The layer norms' own per-token 1/rms, 4 / (v h) of their input, is left out.)
    `attention_input_bytes` (default: `bytes_per_value`) is what each saved Q, K and V value
    takes: FP8 attention saves them quantized (`fp8.fp8_attention_value_bytes`); the attention
    output is counted once, as the output projection's input, either way.
    `recompute_modules` (with selective recompute; Megatron-Core --recompute-modules, default
    core_attn, which is the paper's selective recompute) drops what each module's checkpoint
    stops keeping (transformer_layer.py, attention.py, multi_latent_attention.py,
    moe/moe_layer.py @d98e8a64): core_attn the softmax statistics or scores; layernorm the two
    norms' outputs, i.e. the QKV (MLA down-projection) input and the MLP (router) input, each
    as its linear layer would keep it (with FP8, Transformer Engine's set_save_original_input
    makes the linear keep the discarded bf16 output instead of its FP8 copy); mla_up_proj MLA's
    Q, K and V; mlp a dense layer's MLP internals (`moe_layer` False); shared_experts and moe
    an MoE layer's shared-expert internals (`moe_layer` True; its routed experts are
    `moe_activation_bytes`). A checkpoint's own input is kept: it is a tensor counted already
    (the norm output, unless layernorm drops it too).
    """
    s, b, h, a, t = seq_len, micro_batch, hidden, num_heads, tp
    M = RecomputeModule
    modules = recompute_modules if recompute is Recompute.SELECTIVE else frozenset()
    sbh = s * b * h
    v = bytes_per_value
    li = v if linear_input_bytes is None else linear_input_bytes
    qkv = v if attention_input_bytes is None else attention_input_bytes
    if recompute is Recompute.FULL:
        layer_input = v * sbh                                     # checkpointed layer input
        return layer_input / t if sequence_parallel else layer_input
    # Tensors every TP rank holds in full unless sequence parallelism shards them too.
    norm_outputs = 0 if M.LAYERNORM in modules else 2 * li * sbh   # recomputed, not stored
    replicated = (
        norms_per_layer * v * sbh                       # norm inputs: 4sbh
        + norm_outputs                                  # QKV and MLP (or router) inputs: 2sbh each
        + (2 * BYTES_MASK * sbh if dropout else 0)                # attention and MLP dropout masks: 2sbh
    )
    # Tensors split over TP ranks (heads, ffn columns).
    if mla is None:
        q_dim, kv_dim = num_heads * head_dim, num_kv_heads * head_dim
        attention_core = (
            qkv * s * b * q_dim                         # Q: 2sbh
            + 2 * qkv * s * b * kv_dim                  # K and V: 4sbh
            + li * s * b * q_dim                        # attention output (Wo input): 2sbh
        )
        if qk_norm:
            attention_core = attention_core + (
                v * s * b * (q_dim + kv_dim)            # Q and K before their norms
                + BYTES_FP32 * s * b * (num_heads + num_kv_heads))   # 1/rms per head row
    else:
        qk = num_heads * (head_dim + mla.qk_rope_head_dim)
        up_outputs = qkv * s * b * (2 * qk + num_heads * mla.v_head_dim)   # Q, K, V
        if M.MLA_UP_PROJ in modules:
            up_outputs = 0 * s                          # recomputed from the latents
        attention_core = up_outputs + li * s * b * num_heads * mla.v_head_dim   # output: Wo's input
        latents = mla.q_lora_rank + mla.kv_lora_rank
        replicated = replicated + s * b * ((v + li) * latents + v * mla.qk_rope_head_dim)
    num_mlp_inputs = 3 if mlp.gated else 2              # GeLU: its input and output
    # GeLU: 16sbh for f = 4h; the last (the second matrix's input) is a linear input.
    mlp_internal = ((num_mlp_inputs - 1) * v + li) * s * b * ffn_hidden
    mlp_recomputed = ({M.SHARED_EXPERTS, M.MOE} if moe_layer else {M.MLP}) & modules
    if mlp_recomputed:
        mlp_internal = 0 * s                            # the checkpoint keeps only its input
    sharded = attention_core + mlp_internal

    if M.CORE_ATTN in modules:
        scores = 0 * s                                            # recomputed in the backward pass
    elif attention.fused:
        scores = BYTES_FP32 * a * s * b                           # softmax log-sum-exp only
    elif dropout:
        scores = (2 * v + BYTES_MASK) * a * s * s * b   # softmax, its dropout mask and output: 5as^2b
    else:
        scores = v * a * s * s * b                      # softmax output: 2as^2b
    sharded = sharded + scores

    if sequence_parallel:
        return (replicated + sharded) / t
    return replicated + sharded / t


def op_sac_layer_activation_bytes(*, seq_len, micro_batch, hidden: int, num_heads: int,
                                  q_dim: int, kv_dim: int, ffn_hidden: int, gated: bool, tp,
                                  sequence_parallel: bool, bytes_per_value: int = BYTES_16BIT,
                                  scaled_linears: bool = False):
    """Bytes one transformer layer keeps for its backward pass under torchtitan's per-op
    selective checkpointing, per micro-batch.

    Ref: torchtitan/distributed/activation_checkpoint.py (@b5bcd76c6) SelectiveAC: each block is
    checkpointed (its input kept) and the outputs of compute-intensive ops are kept
    (MUST_SAVE: torch._functorch.partitioners get_default_op_list().compute_intensive_ops,
    cuDNN attention, reduce-scatters) except every second mm/linear, counted from the block's
    start; all else is recomputed. A Llama block (torchtitan models/llama3/model.py) runs its
    linears as wq, wk, wv, wo, w1, w3, w2 (w1 before w3: silu(w1(x)) * w3(x)), so it keeps wq,
    wv, w1 and w2's outputs (w1, w2 only without a gate: fc1 is the 5th linear, fc2 the 6th)
    and the attention kernel's output and fp32 log-sum-exp. Column-parallel outputs split
    over tp; a row-parallel output (wo, w2) is a partial sum of the whole hidden on each rank,
    reduce-scattered (kept) along the sequence with sequence parallelism, which also splits the
    block input. `scaled_linears` (FP8 training, torchao Float8Linear): the linears run
    aten._scaled_mm, which is compute-intensive but not an mm the policy counts, so every
    linear's (bf16) output is kept. Counted on PyTorch's own op stream by bench/torch_sac.py.
    """
    s, b, h, t = seq_len, micro_batch, hidden, tp
    v = bytes_per_value
    tokens = s * b
    sp = np.asarray(sequence_parallel, dtype=bool)
    linears = [q_dim / t, kv_dim / t, kv_dim / t, h + 0 * t, ffn_hidden / t]   # wo, w2: sums
    linears += [ffn_hidden / t, h + 0 * t] if gated else [h + 0 * t]
    kept_linears = sum(linears) if scaled_linears else sum(linears[0::2])   # 1st, 3rd, ...
    attention = q_dim / t * v + BYTES_FP32 * num_heads / t     # output and log-sum-exp
    scattered = np.where(sp & (np.asarray(t) > 1), 2 * h / t * v, 0.0)
    block_input = np.where(sp, v * h / t, v * h + 0 * t)
    return tokens * (block_input + v * kept_linears + attention + scattered)


def moe_activation_bytes(*, pairs, tokens_per_rank, hidden: int, expert_ffn_hidden,
                         num_experts: int, mlp: MlpKind, bytes_per_value: int = BYTES_16BIT,
                         linear_input_bytes: float | None = None,
                         recompute_modules: frozenset[RecomputeModule] = frozenset(),
                         eager_glu_clamp: bool = False):
    """Bytes an MoE layer's router and routed experts keep per micro-batch on one rank.

    Ref: Megatron-Core @d98e8a64 (moe/router.py, moe/token_dispatcher.py, moe/experts.py) with
    the MLP accounting of Korthikanti et al. 2022, Sec. 4.1: the router keeps its fp32 scores
    (T x E); every token-expert pair this rank handles (`pairs`) keeps the permuted expert input
    (the first GEMM's input) and the MLP internals on f / etp columns (SwiGLU: gate, up and
    their product; GeLU: its input and output). The expert output is not kept: the routing
    probabilities scale the activation's output (weighted SwiGLU, since Megatron-LM 2659630721,
    April 2025) and the combine unpermutes without them. Counted on Megatron-Core's own MoE
    layer by bench/megatron_moe_memory.py (bench/data/megatron_moe_kept_cpu.json). The expert
    GEMMs' inputs (the permuted input, the second matrix's input) take `linear_input_bytes`
    (FP8 with Transformer Engine; default `bytes_per_value`).
    `recompute_modules` (selective recompute's, Megatron-Core @d98e8a64): moe checkpoints the
    whole MoE layer on its input (moe/moe_layer.py), so none of this is kept; moe_act discards
    the activation's output, the second GEMM's input, and re-runs the activation from the
    first GEMM's output (moe/experts.py CheckpointWithoutOutput; under FP8 the GEMM keeps the
    discarded bf16 original instead of its FP8 copy, set_save_original_input).
    `eager_glu_clamp` (gpt-oss under Megatron-Core, `compute.glu_clamp_bytes`): the eager
    clamps keep the first GEMM's unclamped output for their backward while the fused GLU keeps
    the clamped copy, one more GLU input per pair (PyTorch's saved tensors,
    bench/torch_elementwise.py); moe_act runs them under its checkpoint, which keeps neither.
    """
    if RecomputeModule.MOE in recompute_modules:
        return 0 * pairs                                # only the layer input, counted already
    v = bytes_per_value
    li = v if linear_input_bytes is None else linear_input_bytes
    router = BYTES_FP32 * tokens_per_rank * num_experts
    act_output = 0 if RecomputeModule.MOE_ACT in recompute_modules else li   # fc2 input
    glu_inputs = 2 if eager_glu_clamp and RecomputeModule.MOE_ACT not in recompute_modules else 1
    internals = (glu_inputs * (2 if mlp.gated else 1) * v + act_output) * pairs * expert_ffn_hidden
    return router + li * pairs * hidden + internals


def embedding_activation_bytes(*, seq_len, micro_batch, hidden: int, dropout: bool, tp,
                               sequence_parallel: bool):
    """Bytes the input embedding keeps per micro-batch: token ids and the dropout mask.

    Ref: Megatron-LM megatron/training/theoretical_memory_usage.py (8 s b for the int64 input
    ids, s b h for the embedding dropout mask); Korthikanti et al. 2022, Sec. 4.3 (s b h p / t
    on the first stage with sequence parallelism, p micro-batches in flight).
    """
    s, b, h, t = seq_len, micro_batch, hidden, tp
    mask = BYTES_MASK * s * b * h if dropout else 0 * s
    if sequence_parallel:
        mask = mask / t
    return BYTES_TOKEN_ID * s * b + mask


def output_activation_bytes(*, seq_len, micro_batch, hidden: int, vocab_size: int, tp,
                            sequence_parallel: bool, final_norm: bool,
                            bytes_per_value: int = BYTES_16BIT,
                            input_bytes: float | None = None):
    """Bytes the final norm, output layer and loss keep per micro-batch on the last stage.

    Ref: Korthikanti et al. 2022 (arXiv:2205.05198), Sec. 4.3: the final LayerNorm input
    (2 s b h), the output-layer input (2 s b h) and the fp32 logits of the vocabulary-parallel
    cross entropy (4 s b V / t). Megatron-LM theoretical_memory_usage.py writes the same as
    4 s b h (1 + V / h) / t assuming sequence parallelism. `input_bytes` (default
    `bytes_per_value`): per value of the output layer's input, quantized where the output
    layer runs in FP8 under Transformer Engine (`fp8.fp8_value_bytes`).
    """
    s, b, h, t = seq_len, micro_batch, hidden, tp
    v = bytes_per_value
    x = v if input_bytes is None else input_bytes
    hidden_terms = (v * s * b * h if final_norm else 0) + x * s * b * h
    if sequence_parallel:
        hidden_terms = hidden_terms / t
    logits = BYTES_FP32 * s * b * vocab_size / t
    return hidden_terms + logits


def eager_cross_entropy_working_bytes(*, seq_len, micro_batch, vocab_size: int, tp):
    """Bytes beyond the kept log-probabilities that PyTorch's eager cross entropy on fp32
    logits, F.cross_entropy(logits.float(), labels), holds at its peak: at the start of the
    backward, nll_loss_backward writes an fp32 gradient of the log-probabilities (4 s b V / t)
    and log_softmax_backward an fp32 gradient of the logits (4 s b V / t) while the fp32
    log_softmax output it saved (4 s b V / t, counted as kept by `output_activation_bytes`)
    is still alive: 12 bytes per logit in all. With tensor parallelism (t > 1) each rank holds
    1 / t of the vocabulary and the loss runs under DTensor's loss_parallel
    (torch/distributed/tensor/parallel/loss.py, torchtitan's default until fec0c175d,
    2026-06), whose log-softmax and its backward hold one more fp32 copy: 16 bytes per logit.

    Ref: torchtitan components/loss.py cross_entropy_loss @b5bcd76c6 (and train.py loss_fn
    @9dec370, uncompiled: "compiling loss function causes CUDA errors, turning off for now");
    PyTorch tools/autograd/derivatives.yaml (_log_softmax saves its result; nll_loss_backward,
    _log_softmax_backward_data allocate their outputs). Measured: bench/torch_loss_memory.py
    (12.0 bytes per logit on PyTorch's own op stream; 16.0 under loss_parallel, the process's
    peak resident memory; pinned in tests/golden/test_pytorch_measured.py).
    """
    copies = np.where(np.asarray(tp) > 1, LOSS_PARALLEL_COPIES, EAGER_LOSS_COPIES)
    return copies * BYTES_FP32 * seq_len * micro_batch * vocab_size / tp


def returned_logits_bytes(*, seq_len, micro_batch, vocab_size: int, tp,
                          bytes_per_value: int = BYTES_16BIT):
    """Bytes of the output layer's 16-bit logits that the model returns and the training step
    holds until its backward is done, beside the loss's own fp32 copies: s b V / t values.

    Ref: Hugging Face transformers LlamaForCausalLM.forward (models/llama/modeling_llama.py,
    5.24) returns CausalLMOutputWithPast(loss=..., logits=logits), and the loss
    (loss/loss_utils.py ForCausalLMLoss) runs F.cross_entropy on logits.float(); a training
    step's `outputs.loss.backward()` keeps `outputs` alive. Measured: bench/torch_loss_memory.py
    (6.0 bytes per logit kept after the forward, 14.0 at the peak: these 2 beside the fp32
    log-probabilities' 4 and the eager loss's 8).
    """
    return bytes_per_value * seq_len * micro_batch * vocab_size / tp


EAGER_LOSS_COPIES = 2
"""fp32 copies of the logits eager F.cross_entropy holds beyond the kept log-probabilities
(nll_loss's gradient and log_softmax's)."""
LOSS_PARALLEL_COPIES = 3
"""The same under DTensor's loss_parallel (measured, bench/torch_loss_memory.py)."""


def zero3_gather_buffer_bytes(*, largest_block_params_per_rank, weight_bytes: float,
                              prefetch_blocks: int):
    """Bytes of the full (unsharded over DP) weights ZeRO-3 holds while a block computes.

    Ref: Rajbhandari et al. 2020, Sec. 5.3 (P_p gathers each layer's parameters before use and
    releases them after); DeepSpeed's stage3_prefetch_bucket_size and FSDP's forward prefetch
    keep the next block gathered too, hence `prefetch_blocks` blocks in flight.
    """
    return prefetch_blocks * largest_block_params_per_rank * weight_bytes


def reserve_bytes(*, allocated_bytes, framework_bytes: float, fragmentation_fraction: float):
    """Bytes a GPU loses outside the model: CUDA context, communication buffers, fragmentation.

    Ref: none published in closed form; both inputs are named cluster data with their reasons
    (the CUDA context and NCCL buffers are a fixed size; the PyTorch caching allocator loses a
    share of what it hands out to fragmentation).
    """
    return framework_bytes + fragmentation_fraction * allocated_bytes


def allocator_bytes_of_total(*, total_bytes, framework_bytes: float,
                             fragmentation_fraction: float) -> tuple:
    """(allocated, reserved) bytes of a GPU whose total is `total_bytes`: what PyTorch's caching
    allocator reports as max_memory_allocated and max_memory_reserved at that peak.

    Ref: the inverse of `reserve_bytes`. The total is allocated + framework + fraction x
    allocated, so allocated = (total - framework) / (1 + fraction); the allocator's reserved
    pool is the allocated bytes with their fragmentation, total - framework (the framework
    term, CUDA context and communicator buffers, lies outside the pool). Assumes every
    allocated byte goes through the caching allocator (HCCL and NCCL buffers do not, but they
    are in the framework term).
    """
    reserved = np.maximum(np.asarray(total_bytes, dtype=float) - framework_bytes, 0.0)
    return reserved / (1 + fragmentation_fraction), reserved


def framework_buffer_bytes(*, data_parallel, zero_stage, tp, pp, cp,
                           grad_bucket_elements: float, grad_bucket_copies: int,
                           gather_bucket_elements: float, per_communicator_bytes: float,
                           value_bytes: float):
    """Bytes of a framework's communication buffers on one GPU, outside the model's tensors.

    Ref: DeepSpeed deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig): reduce_bucket_size
    and allgather_bucket_size, 5e8 elements each by default; the reduce bucket is
    double-buffered with overlap_comm (`grad_bucket_copies`), and the all-gather bucket serves
    ZeRO 1-2's gather of the updated parameters. Ascend HCCL reserves HCCL_BUFFSIZE (200 MB,
    two buffers) per communicator: one each for tensor, pipeline, data and context parallelism
    where that axis has more than one rank. Buckets hold values of the training dtype
    (`value_bytes`). `data_parallel`: the gradients are reduced over more than one rank.
    """
    zero = np.asarray(zero_stage)
    grads = np.where(data_parallel, grad_bucket_elements * grad_bucket_copies * value_bytes,
                     0.0)
    gather = np.where(data_parallel & ((zero == ZeroStage.OPTIMIZER_STATES)
                                       | (zero == ZeroStage.GRADIENTS)),
                      gather_bucket_elements * value_bytes, 0.0)
    communicators = ((np.asarray(tp) > 1).astype(float) + (np.asarray(pp) > 1)
                     + np.asarray(data_parallel) + (np.asarray(cp) > 1))
    return grads + gather + communicators * per_communicator_bytes


def bf16_grad_copy_bytes_per_param(*, bf16: bool, zero_stage, pp, copy_bytes_per_param: float):
    """Bytes per parameter of a second gradient copy beside bf16 parameters.

    Ref: DeepSpeed deepspeed/runtime/engine.py (_configure_optimizer): bf16 without ZeRO, and
    bf16 pipelines with ZeRO-1, run BF16_Optimizer (runtime/bf16_optimizer.py), whose
    fp32_groups_gradients_flat accumulates beside each parameter's bf16 .grad
    (`copy_bytes_per_param`, from the framework profile; 0 for frameworks without one).
    """
    zero = np.asarray(zero_stage)
    uses = (zero == ZeroStage.NONE) | ((zero == ZeroStage.OPTIMIZER_STATES) & (np.asarray(pp) > 1))
    return np.where(bf16 & uses, copy_bytes_per_param, 0.0)
