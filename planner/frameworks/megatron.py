"""Megatron-LM: a launch script for pretrain_gpt.py (pretrain_bert.py for an encoder) under
torchrun, the framework's profile and its rules. The reader of users' own scripts is
megatron_reader (`parse`, re-exported here for the framework registry), with the flag values
and per-feature readers in megatron_values.

Flag names and choices, and what Megatron-LM's parser stops on, are in megatron_flags (from
data/megatron_args.txt); a test checks every emitted flag against it.
"""

from __future__ import annotations

import textwrap

import numpy as np

from cost_models.enums import (AttentionKind, CpComm, CudaGraphs, Fp8Recipe, LoadBalancing,
                               MlpKind, MoeDispatcher, NormKind, Optimizer, PositionKind,
                               Precision, RankOrder, Recompute, RecomputeModule, ZeroStage)
from planner.frameworks import torchrun
from planner.frameworks.base import LaunchPlan, Trial, header_lines, transformer_shape
from planner.frameworks.megatron_reader import FSDP_STRATEGIES, parse  # noqa: F401
from planner.frameworks.megatron_flags import (CHECKED_AGAINST, CHOICES, KNOWN_FLAGS,  # noqa: F401
                                               MEGATRON_COMMIT, TORCHRUN_FLAGS, check_flags)
from planner.errors import InputError
from planner.inputs import profiles
from planner.schemas.framework import FrameworkProfile
from planner.core.candidates import (CUDA_GRAPHS_ORDER, RECOMPUTE_ORDER, Candidates,
                                     modules_mask)
from planner.core.rules import Rule, TargetRule, fp8_rule
from planner.core.problem import Problem


POSITIONS = {PositionKind.LEARNED: "learned_absolute", PositionKind.ROTARY: "rope",
             PositionKind.NONE: "none"}
NORMS = {NormKind.LAYERNORM: "LayerNorm", NormKind.RMSNORM: "RMSNorm"}



FP8_FORMAT = {Fp8Recipe.DELAYED: "hybrid", Fp8Recipe.TENSORWISE: "hybrid",
              Fp8Recipe.BLOCKWISE: "e4m3", Fp8Recipe.MXFP8: "e4m3"}
"""--fp8-format per recipe: E4M3 forward, E5M2 gradients with per-tensor scales (NVIDIA's
examples/llama/train_llama3_8b_h100_fp8.sh); E4M3 throughout for the block-scaled recipes
(megatron/core/transformer/moe/README.md: --fp8-format e4m3 --fp8-recipe blockwise; MXFP8)."""


def _array(name: str, args: list[str]) -> list[str]:
    return [f"{name}=(", *(f"  {a}" for a in args), ")"]


def _model_args(plan: LaunchPlan) -> list[str]:
    shape = transformer_shape(plan.problem.model, "megatron")
    layer, training = shape.layer, plan.problem.training
    args = [f"--num-layers {shape.num_layers}", f"--hidden-size {layer.hidden}",
            f"--num-attention-heads {layer.num_heads}",
            f"--ffn-hidden-size {shape.dense_ffn or layer.ffn}",
            f"--seq-length {training.seq_len}",
            f"--max-position-embeddings {max(training.seq_len, shape.max_positions)}"]
    mla = layer.mla
    if mla is not None:      # pass every MLA size: the CLI defaults (kv rank 32) are not V2/V3's
        args += ["--multi-latent-attention", f"--kv-lora-rank {mla.kv_lora_rank}",
                 f"--qk-head-dim {layer.dim_per_head}", f"--qk-pos-emb-head-dim "
                 f"{mla.qk_rope_head_dim}", f"--v-head-dim {mla.v_head_dim}"]
        if mla.q_lora_rank:
            args.append(f"--q-lora-rank {mla.q_lora_rank}")
    elif layer.head_dim is not None and layer.head_dim * layer.num_heads != layer.hidden:
        args.append(f"--kv-channels {layer.head_dim}")
    if mla is None and layer.kv_heads != layer.num_heads:
        args += ["--group-query-attention", f"--num-query-groups {layer.kv_heads}"]
    if layer.qk_norm:
        args.append("--qk-layernorm")
    if any(b.attention_chunk for b in plan.problem.model.attention_layers()):
        # Megatron-LM @d98e8a64 has no chunked attention mask: --no-rope-freq is Llama 4's
        # other trait, the chunks have no flag (transformer_config.py, arguments.py).
        raise InputError(f"--emit megatron: {plan.problem.model.name} attends in chunks "
                         f"(Llama 4's attention_chunk_size); Megatron-LM has no chunked "
                         f"attention, and its flags would build a model attending to the whole "
                         f"context")
    if layer.mlp is MlpKind.GEGLU or layer.norms_per_layer == 4:
        # Megatron-Bridge builds Gemma 2/3 from its own layer spec (gemma2_layer_spec: fast_gelu
        # gated MLP, post-attention and post-MLP norms, Megatron-Bridge@067f987df); no
        # pretrain_gpt.py flag asks for either.
        what = ("a GeGLU MLP" if layer.mlp is MlpKind.GEGLU else "") + (
            " and " if layer.mlp is MlpKind.GEGLU and layer.norms_per_layer == 4 else "") + (
            "norms after its attention and MLP (four a layer)" if layer.norms_per_layer == 4
            else "")
        raise InputError(f"--emit megatron: {plan.problem.model.name} has {what} (as Gemma 2/3 "
                         f"and GLM-4 do); pretrain_gpt.py has no flag for it (Megatron-Bridge "
                         f"builds such models from its own layer spec)")
    if layer.norms_per_layer == 1:
        # Megatron-Core's TransformerLayer runs attention, then the MLP on its output: no
        # pretrain_gpt.py flag puts them side by side (NeMo built Falcon from its own spec).
        raise InputError(f"--emit megatron: {plan.problem.model.name} runs attention and its MLP "
                         f"side by side on one norm (as Falcon, Command R and Phi-2 do); "
                         f"pretrain_gpt.py has no flag for it, and its flags would build a "
                         f"sequential layer")
    if layer.mlp is MlpKind.SWIGLU:
        args.append("--swiglu")
    elif layer.mlp is MlpKind.SQUARED_RELU:
        args.append("--squared-relu")
    if layer.position not in POSITIONS:
        raise InputError(f"--emit megatron: {layer.position.value} positions have no Megatron-LM "
                         f"--position-embedding-type")
    args += [f"--position-embedding-type {POSITIONS[layer.position]}",
             f"--normalization {NORMS[layer.norm]}"]
    if layer.partial_rotary < 1:
        args.append(f"--rotary-percent {layer.partial_rotary:g}")
    if not layer.bias:
        args.append("--disable-bias-linear")
    if layer.qkv_bias:
        args.append("--add-qkv-bias")
    if not shape.output.tied:
        args.append("--untie-embeddings-and-output-weights")
    if not layer.dropout:
        args += ["--attention-dropout 0.0", "--hidden-dropout 0.0"]
    # The run's kernel (training.attention, else the profile's default), which sets the
    # attention's memory (unfused keeps the s x s scores) and rate (megatron_values._attention
    # reads it back).
    args.append(f"--attention-backend {ATTENTION_BACKEND[plan.problem.attention]}")
    if layer.sliding_window is not None:
        args += _window_args(shape)
    if layer.attention_sinks:
        args.append("--softmax-type learnable")
    if layer.is_moe:
        args += _moe_args(shape, plan.overlap("moe_dispatcher"))
    if shape.mtp_layers:
        args.append(f"--mtp-num-layers {shape.mtp_layers}")
    return args


def pattern_expression(pattern: tuple[bool, ...]) -> str:
    """A per-layer 0/1 pattern as the Python list expression Megatron-LM evaluates for
    --moe-layer-freq and --window-attn-skip-freq: '([0]*3+[1]*58)'."""
    runs: list[list[int]] = []
    for value in pattern:
        if runs and runs[-1][0] == int(value):
            runs[-1][1] += 1
        else:
            runs.append([int(value), 1])
    return "(" + "+".join(f"[{v}]*{n}" for v, n in runs) + ")"


ATTENTION_BACKEND = {AttentionKind.FLASH: "auto", AttentionKind.FLASH2: "flash",
                     AttentionKind.UNFUSED: "unfused"}
"""--attention-backend per kernel. auto: Transformer Engine's pick among eligible fused kernels,
cuDNN first on Hopper and Blackwell, flash-attn on Ampere (its attention docs' selection order;
with attention sinks, cuDNN alone: utils.py @252a4742 "Filter: Softmax type"). flash: the
flash-attn package, FlashAttention-2 where FlashAttention-3 is not installed."""


def _window_args(shape) -> list[str]:
    """Sliding-window attention (TransformerConfig.window_size, window_attn_skip_freq): an int
    N means one full-attention layer after N - 1 window layers; else a 1 (window) / 0 list."""
    pattern = shape.window_pattern
    period = pattern.index(False) + 1 if False in pattern else None
    if period is not None and pattern == tuple((i + 1) % period != 0
                                               for i in range(len(pattern))):
        freq = str(period)
    else:
        freq = f'"{pattern_expression(pattern)}"'
    return [f'--window-size "{shape.layer.sliding_window},0"', f"--window-attn-skip-freq {freq}"]


def _moe_args(shape, dispatcher: MoeDispatcher) -> list[str]:
    """Megatron-Core MoE flags (megatron/core/transformer/moe/README.md): grouped GEMM and the
    token dispatcher the cost model priced (alltoall, or flex with the DeepEP / HybridEP
    backend, transformer_config.py moe_flex_dispatcher_backend)."""
    layer = shape.layer
    args = [f"--num-experts {layer.num_experts}", f"--moe-router-topk {layer.top_k}",
            f"--moe-ffn-hidden-size {layer.expert_ffn}", "--moe-grouped-gemm"]
    if dispatcher.flex_backend is None:
        args.append("--moe-token-dispatcher-type alltoall")
    else:
        args += ["--moe-token-dispatcher-type flex",
                 f"--moe-flex-dispatcher-backend {dispatcher.flex_backend}"]
    if not all(shape.moe_pattern):
        args.append(f'--moe-layer-freq "{pattern_expression(shape.moe_pattern)}"')
    if layer.shared_ffn_hidden:
        args.append(f"--moe-shared-expert-intermediate-size {layer.shared_ffn_hidden}")
        if layer.shared_expert_gate:
            args.append("--moe-shared-expert-gate")
    if layer.load_balancing is LoadBalancing.FORCED:
        args.append("--moe-router-force-load-balancing")       # a benchmark: even routing
    elif layer.load_balancing is LoadBalancing.EXPERT_BIAS:
        # Auxiliary-loss-free balancing needs sigmoid scores (transformer_config.py).
        args += ["--moe-router-load-balancing-type seq_aux_loss",
                 "--moe-router-enable-expert-bias", "--moe-router-score-function sigmoid"]
    else:
        args.append("--moe-router-load-balancing-type aux_loss")
    if layer.router_groups is not None:
        args += [f"--moe-router-num-groups {layer.router_groups}",
                 f"--moe-router-group-topk {layer.router_group_topk}"]
    if layer.capacity_factor is not None:
        args.append(f"--moe-expert-capacity-factor {layer.capacity_factor:g}")
    return args


def first_last_stages(counts: tuple[int, ...], pp: int, vpp: int) -> tuple[int, int] | None:
    """(first, last) stage layer counts when Megatron-LM's --decoder-first/last-pipeline-
    num-layers express `counts` (per chunk, pipeline order): equal chunks within each stage,
    equal middle stages (transformer_config.py splits the rest evenly over them)."""
    stages = [[counts[c * pp + r] for c in range(vpp)] for r in range(pp)]
    if any(len(set(chunks)) != 1 for chunks in stages):
        return None
    totals = [sum(chunks) for chunks in stages]
    if len(set(totals[1:-1])) > 1:
        return None
    return totals[0], totals[-1]


def layout_string(counts: tuple[int, ...]) -> str:
    """Megatron-LM's --pipeline-model-parallel-layout for per-chunk layer counts: virtual stages
    in pipeline order separated by '|', E the embedding, t*N N decoder layers, L the loss
    (megatron/core/transformer/pipeline_parallel_layer_layout.py)."""
    stages = [f"t*{c}" if c > 1 else "t" for c in counts]
    stages[0], stages[-1] = "E" + stages[0], stages[-1] + "L"
    return "|".join(stages)


def _layout_args(s) -> list[str]:
    counts = s.layers_per_stage
    if counts is None:
        return [f"--num-virtual-stages-per-pipeline-rank {s.vpp}"] if s.vpp > 1 else []
    ends = first_last_stages(counts, s.pp, s.vpp)
    if ends is None:
        return [f'--pipeline-model-parallel-layout "{layout_string(counts)}"']
    args = [f"--num-virtual-stages-per-pipeline-rank {s.vpp}"] if s.vpp > 1 else []
    middle = sum(counts[1:s.pp - 1]) // max(1, s.pp - 2) * s.vpp if s.pp > 2 else None
    first, last = ends
    if first != middle:
        args.append(f"--decoder-first-pipeline-num-layers {first}")
    if last != middle:
        args.append(f"--decoder-last-pipeline-num-layers {last}")
    return args


def _group_args(plan: LaunchPlan) -> list[str]:
    """The interleaved schedule's micro-batch group where it is not pp (Megatron-LM's default,
    model_parallel_config.py): the group the plan was priced with (`report.strategy`)."""
    group = plan.report.strategy.microbatch_group
    return [f"--microbatch-group-size-per-virtual-pipeline-stage {group}"] if group else []


def _parallel_args(plan: LaunchPlan) -> list[str]:
    s = plan.strategy
    args = [f"--tensor-model-parallel-size {s.tp}", f"--pipeline-model-parallel-size {s.pp}",
            *_layout_args(s), *_group_args(plan)]
    if s.cp > 1:
        args.append(f"--context-parallel-size {s.cp}")
        if s.cp_comm is not CpComm.P2P:       # the default; Transformer Engine's spelling
            args.append(f"--cp-comm-type {s.cp_comm.value}")
        if s.cp_comm is CpComm.A2A_P2P:
            args.append(f"--hierarchical-context-parallel-sizes {s.context_a2a} "
                        f"{s.cp // s.context_a2a}")
    if plan.overlap("rank_order") is RankOrder.TP_CP_EP_PP_DP:
        args.append("--use-tp-pp-dp-mapping")     # initialize.py: order 'tp-cp-ep-pp-dp'
    if plan.problem.model.is_moe:
        args += [f"--expert-model-parallel-size {s.ep}",
                 f"--expert-tensor-parallel-size {s.expert_tp}"]
    if s.sequence_parallel and s.tp > 1:      # at tp 1 Megatron-LM turns it off, warning
        args.append("--sequence-parallel")
    if s.zero_stage >= ZeroStage.OPTIMIZER_STATES:
        args.append("--use-distributed-optimizer")
    if s.zero_stage >= ZeroStage.OPTIMIZER_STATES and s.dp_shard not in (None, s.dp):
        # HSDP: distributed-optimizer / Megatron-FSDP instances, each sharding over dp_shard.
        args.append(f"--num-distributed-optimizer-instances {s.dp // s.dp_shard}")
    if s.zero_stage >= ZeroStage.GRADIENTS:      # Megatron-FSDP shards gradients (and weights)
        args += ["--use-megatron-fsdp",
                 f"--data-parallel-sharding-strategy {FSDP_STRATEGIES[s.zero_stage]}",
                 "--ckpt-format fsdp_dtensor"]
    if s.overlap_grad_reduce:
        args.append("--overlap-grad-reduce")
        if s.zero_stage >= ZeroStage.OPTIMIZER_STATES and plan.overlap("overlap_param_gather"):
            args.append("--overlap-param-gather")
    if plan.overlap("tp_comm_overlap") and s.sequence_parallel:     # Transformer Engine userbuffers need SP
        args.append("--tp-comm-overlap")
    if plan.overlap("moe_a2a_overlap") and moe_overlap_allowed(s):
        # Megatron-Bridge's moe_a2a_overlap (scripts/performance/utils/overrides.py
        # _set_moe_a2a_overlap_overrides) sets both; delayed wgrad needs the overlap.
        args += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    if s.optimizer_offload:      # HybridDeviceOptimizer (docs/.../optimizer_cpu_offload.md)
        args += ["--optimizer-cpu-offload", f"--optimizer-offload-fraction {s.optimizer_offload:g}",
                 "--overlap-cpu-optimizer-d2h-h2d"]
        if not plan.problem.training.bf16_moments:      # else with the moments' dtypes
            args.append("--use-precision-aware-optimizer")
    if s.activation_offload_layers:
        args.append(f"--cpu-offloading-num-layers {s.activation_offload_layers}")
    args += [f"--micro-batch-size {s.micro_batch}", f"--global-batch-size {s.global_batch}"]
    if s.recompute is Recompute.SELECTIVE:
        args.append("--recompute-granularity selective")
        if s.recompute_modules is not None:      # None: Megatron-Core's default, core_attn
            args.append("--recompute-modules " + " ".join(m.value for m in s.recompute_modules))
    elif s.recompute is Recompute.FULL:
        args += ["--recompute-granularity full", "--recompute-method uniform",
                 "--recompute-num-layers 1"]
    return args


def _low_precision_extra_args(plan: LaunchPlan) -> list[str]:
    """What the run puts in FP8 beyond the linear layers, or keeps out of it, as Megatron-LM's
    flags @d98e8a64 (generated from TransformerConfig): --fp8-output-proj (the LM head under
    MXFP8) and --first-last-layers-bf16 with its two counts (each 1 by default, so both are
    written). FP8 attention has none: TransformerConfig.fp8_dot_product_attention is left out
    of pretrain_gpt.py's arguments ("no CLI argument exists for these", arguments.py)."""
    training = plan.problem.training
    if training.fp8_attention:
        raise InputError("--emit megatron: fp8_attention has no Megatron-LM flag (pretrain_gpt.py "
                         "leaves TransformerConfig.fp8_dot_product_attention out of its "
                         "arguments); Megatron-Bridge sets it as "
                         "mixed_precision.fp8_dot_product_attention, or plan without "
                         "--fp8-attention")
    args = ["--fp8-output-proj"] if training.fp8_output_layer else []
    if training.bf16_first_layers or training.bf16_last_layers:
        args += ["--first-last-layers-bf16",
                 f"--num-layers-at-start-in-bf16 {training.bf16_first_layers}",
                 f"--num-layers-at-end-in-bf16 {training.bf16_last_layers}"]
    return args


def moe_overlap_allowed(s) -> bool:
    """Megatron-Core accepts --overlap-moe-expert-parallel-comm here (TransformerConfig
    __post_init__: ep > 1, no full recomputation, vpp with pp > 1)."""
    return (s.ep > 1 and s.recompute is not Recompute.FULL
            and (s.pp == 1 or s.vpp > 1))


CUDA_GRAPH_ARGS = {
    CudaGraphs.LAYER: ["--cuda-graph-impl local"],
    CudaGraphs.FULL_ITERATION: ["--cuda-graph-impl full_iteration",
                                "--no-check-for-nan-in-loss-and-grad"],
}
"""Megatron-LM @d98e8a64 (docs/user-guide/features/cuda_graph.md): per-layer graphs with
MCore's CudaGraphManager, or one graph per iteration, which needs the NaN check (a host sync)
off. CudaGraphs.NONE writes nothing (the default, none)."""


def _training_args(plan: LaunchPlan, trial: Trial | None = None) -> list[str]:
    training, s = plan.problem.training, plan.strategy
    if training.precision is Precision.BF16:
        args = ["--bf16"]
    elif training.fp8_recipe is Fp8Recipe.NVFP4:    # bf16 params, linear layers in NVFP4 (TE)
        # training/arguments.py: --fp4-format and --fp8-format are exclusive; --fp4-param-gather
        # all-gathers the NVFP4 weights (Megatron-Bridge bf16_with_nvfp4_mixed sets it).
        args = ["--bf16", "--fp4-format e2m1", "--fp4-recipe nvfp4"]
        if s.fp8_param_gather and s.zero_stage >= ZeroStage.OPTIMIZER_STATES:
            args.append("--fp4-param-gather")
        args += _low_precision_extra_args(plan)
    elif training.precision is Precision.FP8:       # bf16 params, linear layers in FP8 (TE)
        recipe = training.fp8_recipe or Fp8Recipe.DELAYED
        args = ["--bf16", f"--fp8-format {FP8_FORMAT.get(recipe, 'hybrid')}",
                f"--fp8-recipe {recipe.value}"]
        if recipe is Fp8Recipe.DELAYED:       # NVIDIA's H100 FP8 example: TE's own history
            args += ["--fp8-amax-history-len 1024", "--fp8-amax-compute-algo max"]
        if s.fp8_param_gather and s.zero_stage >= ZeroStage.OPTIMIZER_STATES:
            args.append("--fp8-param-gather")
            if recipe is Fp8Recipe.MXFP8:     # MXFP8 params gather through the grad buffer
                args.append("--reuse-grad-buf-for-mxfp8-param-ag")
        args += _low_precision_extra_args(plan)
    elif training.precision is Precision.FP16:     # dynamic loss scaling (Megatron defaults)
        args = ["--fp16", "--initial-loss-scale 4294967296", "--min-loss-scale 1.0",
                "--loss-scale-window 1000", "--hysteresis 2"]
    else:
        args = []
    if training.bf16_gradients and training.precision in (Precision.BF16, Precision.FP8):
        args.append("--grad-reduce-in-bf16")
    if training.bf16_moments:
        args += ["--use-precision-aware-optimizer", "--exp-avg-dtype bf16",
                 "--exp-avg-sq-dtype bf16"]
    graphs_rule = RULES[Rule.MEGATRON_CUDA_GRAPHS]      # the rule's own test, not a copy
    if graphs_rule.check(plan.problem, Candidates.from_strategy(s, plan.problem.framework
                                                                .defaults))[0]:
        message, fix = graphs_rule.explain(plan.problem, s)
        raise InputError(f"--emit megatron: {message}; {fix}")
    args += CUDA_GRAPH_ARGS.get(s.cuda_graphs, [])
    if training.optimizer is Optimizer.ADAM:
        args += ["--optimizer adam", "--adam-beta1 0.9", "--adam-beta2 0.95"]
    else:
        momentum = "0.9" if training.optimizer is Optimizer.SGD_MOMENTUM else "0.0"
        args += ["--optimizer sgd", f"--sgd-momentum {momentum}"]
    iters = trial.train_iters if trial else plan.train_iters
    args += [f'--train-iters "${{TRAIN_ITERS:-{iters if iters else 500000}}}"',
             '--lr "${LR:-3.0e-4}"', '--min-lr "${MIN_LR:-3.0e-5}"', "--lr-decay-style cosine",
             "--lr-warmup-fraction 0.01", "--weight-decay 0.1", "--clip-grad 1.0"]
    return args


EVAL_INTERVAL_NEVER = 1_000_000
"""--eval-interval past any trial's iterations (with --eval-iters 0: no evaluation)."""


def emit(plan: LaunchPlan) -> dict[str, str]:
    name, text = _script(plan, None)
    return {name: text}


def emit_trial(plan: LaunchPlan, trial: Trial) -> tuple[str, str]:
    """(script name, text): the launch script `emit` writes, cut to a short benchmark run
    whose output goes to `trial.log_file` beside the script as well as to the terminal."""
    return _script(plan, trial)


def _logging_args(trial: Trial | None) -> list[str]:
    if trial is None:
        return ["--log-interval 10", "--log-throughput", "--eval-interval 1000",
                "--eval-iters 10", '--save "$CHECKPOINT_PATH"', '--load "$CHECKPOINT_PATH"',
                "--save-interval 1000"]
    # No --save: Megatron-LM writes no checkpoint; --eval-iters 0 skips validation.
    # --log-memory-interval (a multiple of --log-interval, arguments.py) reports each model-
    # parallel rank's memory at the last iteration too, its peak over the whole run
    # (training.py training_log -> report_memory; the first report comes after one interval).
    return [f"--log-interval {trial.log_interval}", "--log-throughput",
            f"--log-memory-interval {trial.train_iters}",
            f"--eval-interval {EVAL_INTERVAL_NEVER}", "--eval-iters 0"]


def _script(plan: LaunchPlan, trial: Trial | None) -> tuple[str, str]:
    p = plan.problem
    shape = transformer_shape(p.model, "megatron")
    script = "pretrain_gpt.py" if shape.layer.causal else "pretrain_bert.py"
    name = script.replace(".py", ".sh")
    if shape.layer.causal:
        tokenizer = ["# NullTokenizer keeps the model's vocabulary; point TOKENIZER_ARGS at "
                     "your tokenizer.",
                     *_array("TOKENIZER_ARGS", ["--tokenizer-type NullTokenizer",
                                                f"--vocab-size {shape.embedding.vocab_size}"]),
                     'if [ -n "${DATA_PATH:-}" ]; then',
                     '  DATA_ARGS=(--data-path "$DATA_PATH" --split 949,50,1)', "else",
                     "  DATA_ARGS=(--mock-data)             # synthetic tokens: a throughput "
                     "test", "fi"]
    else:   # BERT's masked-LM data needs its WordPiece vocabulary (mask, CLS, SEP tokens)
        tokenizer = [*_array("TOKENIZER_ARGS", ["--tokenizer-type BertWordPieceLowerCase",
                                                '--vocab-file "$VOCAB_FILE"']),
                     *_array("DATA_ARGS", ['--data-path "$DATA_PATH"', "--split 949,50,1"])]
    lines = [
        "#!/usr/bin/env bash",
        *(f"# {line}" for line in header_lines(plan, "Megatron-LM", CHECKED_AGAINST)),
        *([] if trial is None else [
            f"# A trial run: {trial.train_iters} iterations, logged every {trial.log_interval}, "
            f"no evaluation, no checkpoint; the output is appended to {trial.log_file}"]),
        *(f"# {line}" for line in _unexpressed(shape.layer)),
        "# Run on every node: MASTER_ADDR=<first node> "
        + ("[DATA_PATH=<prefix>]" if shape.layer.causal
           else "DATA_PATH=<prefix> VOCAB_FILE=<vocab.txt>") + f" bash {name}",
        "set -euo pipefail", "",
        "MEGATRON_PATH=${MEGATRON_PATH:-/workspace/Megatron-LM}",
        *([] if shape.layer.causal else [
            "DATA_PATH=${DATA_PATH:?set DATA_PATH to a Megatron .bin/.idx prefix}",
            "VOCAB_FILE=${VOCAB_FILE:?set VOCAB_FILE to the BERT WordPiece vocabulary}"]),
        *([f"CHECKPOINT_PATH=${{CHECKPOINT_PATH:-checkpoints/{p.model.name}}}"] if trial is None
          else [f'LOG_FILE=${{LOG_FILE:-"$(dirname "$0")/{trial.log_file}"}}']),
        *torchrun.launcher(plan), "",
        *torchrun.environment(p.cluster, tp=plan.strategy.tp, cp=plan.strategy.cp,
                              ordered_kernels=plan.strategy.zero_stage < ZeroStage.GRADIENTS,
                              nvls=plan.strategy.nvls),
        "",
        *_array("MODEL_ARGS", _model_args(plan)),
        *_array("PARALLEL_ARGS", _parallel_args(plan)),
        *_array("TRAINING_ARGS", _training_args(plan, trial)),
        *tokenizer,
        *_array("LOGGING_ARGS", _logging_args(trial)),
        "",
        f'{torchrun.TORCHRUN} \\\n  "$MEGATRON_PATH/{script}" \\\n'
        '  "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${TRAINING_ARGS[@]}" '
        '"${TOKENIZER_ARGS[@]}" \\\n  "${DATA_ARGS[@]}" "${LOGGING_ARGS[@]}"'
        + ("" if trial is None else ' \\\n  2>&1 | tee -a "$LOG_FILE"'), ""]
    return name, "\n".join(lines)


def _unexpressed(layer) -> list[str]:
    """Comment lines on what the model has and pretrain_gpt.py's flags cannot ask for."""
    if layer.glu_clamp is None:
        return []
    return textwrap.wrap(
        f"The experts' GLU clamp (limit {layer.glu_clamp:g}, HF swiglu_limit) has no "
        "pretrain_gpt.py flag: Megatron-Bridge's GPT-OSS provider sets "
        "TransformerConfig.activation_func_clamp_value; this script trains without it.",
        width=94, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)


def profile() -> FrameworkProfile:
    """Features, overlaps and constants of Megatron-LM (profiles/megatron.yaml, with sources)."""
    return profiles.load("megatron")


# --------------------------------------------------------------------------- rules

def _moe_with_bias(problem: Problem) -> bool:
    return any(getattr(b, "is_moe", False) and b.bias for b in problem.model.blocks)


def _offload_breaks(p, c):
    # core/transformer/transformer_config.py @d98e8a64: "Currently there is no support for
    # Pipeline parallelism with CPU offloading", "CPU offloading does not work when activation
    # recomputation is enabled"; training/arguments.py: with --fp8-param-gather, optimizer CPU
    # offload "must be used in conjunction with `--fp8-recipe delayed`".
    act = (c.act_offload > 0) & ((c.pp > 1) | (c.recompute != 0))
    t = p.training
    fp8_gather = (t.precision is Precision.FP8) & c.fp8_gather & (c.zero > 0)
    return act | ((c.opt_offload > 0) & fp8_gather & (t.fp8_recipe is not Fp8Recipe.DELAYED))


def _explain_offload(p, s):
    if s.activation_offload_layers and s.pp > 1:
        return (f"activation_offload_layers with pp {s.pp}: Megatron-LM has \"no support for "
                "Pipeline parallelism with CPU offloading\"", "use pp 1, or offload no activations")
    if s.activation_offload_layers:
        return (f"activation_offload_layers with recompute {s.recompute.value}: Megatron-LM's "
                "\"CPU offloading does not work when activation recomputation is enabled\"",
                "use recompute none, or offload no activations")
    return (f"optimizer_offload with --fp8-param-gather and fp8_recipe "
            f"{p.training.fp8_recipe.value}: Megatron-LM allows it only with --fp8-recipe delayed",
            "use fp8_param_gather false, or fp8_recipe delayed")


def _recompute_modules_breaks(p, c):
    # core/transformer/transformer_config.py __post_init__ @d98e8a64: "mla_up_proj in
    # recompute_modules is only supported with multi_latent_attention"; with FP8, "Delayed
    # scaling does not support moe_act and layernorm recompute for fp8".
    mla = any(layer.mla is not None for layer in p.model.attention_layers())
    up = modules_mask({RecomputeModule.MLA_UP_PROJ})
    bad = (c.rc_modules & up).astype(bool) & (not mla)
    if p.training.precision is Precision.FP8 and p.training.fp8_recipe is Fp8Recipe.DELAYED:
        bad |= (c.rc_modules & modules_mask({RecomputeModule.MOE_ACT,
                                             RecomputeModule.LAYERNORM})).astype(bool)
    return bad


def _explain_recompute_modules(p, s):
    modules = set(s.recompute_modules or ())
    if RecomputeModule.MLA_UP_PROJ in modules and not any(
            layer.mla is not None for layer in p.model.attention_layers()):
        return ("recompute_modules mla_up_proj on a model without multi-latent attention: "
                "Megatron-Core stops (\"mla_up_proj in recompute_modules is only supported with "
                "multi_latent_attention\")", "drop mla_up_proj from recompute_modules")
    return ("recompute_modules moe_act or layernorm with fp8_recipe delayed: Megatron-Core stops "
            "(\"Delayed scaling does not support moe_act and layernorm recompute for fp8\")",
            "use another fp8_recipe, or drop moe_act and layernorm from recompute_modules")


def _layer_graphs_break(p: Problem, c) -> np.ndarray:
    layer = c.cuda_graphs == CUDA_GRAPHS_ORDER.index(CudaGraphs.LAYER)
    return layer & ((c.recompute == RECOMPUTE_ORDER.index(Recompute.FULL)) | (c.act_offload > 0))


def _explain_layer_graphs(p: Problem, s) -> tuple[str, str]:
    if s.recompute is Recompute.FULL:
        return ("cuda_graphs layer with full recompute: Megatron-Core stops (\"full recompute "
                "is only supported with full iteration CUDA graph.\")",
                "use cuda_graphs full_iteration, or recompute selective or none")
    return ("cuda_graphs layer with activation offload: Megatron-Core stops (\"CUDA graphs not "
            "supported with CPU offloading.\")",
            "use cuda_graphs full_iteration, or offload no activations")


RULES: dict[Rule, TargetRule] = {
    Rule.MEGATRON_FP8: fp8_rule("Megatron-LM", profile().fp8, bf16_layers_per_stage=True),
    Rule.MEGATRON_RECOMPUTE_MODULES: TargetRule(
        "Megatron-Core recomputes mla_up_proj only with MLA, and moe_act and layernorm under FP8 "
        "only without delayed scaling", _recompute_modules_breaks, _explain_recompute_modules),
    Rule.MEGATRON_OFFLOAD: TargetRule(
        "Megatron-LM offloads activations only with pp 1 and no recompute, and the optimizer "
        "with FP8 parameters only under delayed scaling", _offload_breaks, _explain_offload),
    # transformer_config.py __post_init__ @d98e8a64, for a cuda_graph_impl other than
    # full_iteration (found by running it: bench/framework_parsers.py).
    Rule.MEGATRON_CUDA_GRAPHS: TargetRule(
        "Megatron-Core captures per-layer CUDA graphs only without full recompute and without "
        "activation offload", _layer_graphs_break, _explain_layer_graphs),
    # core/optimizer/__init__.py: "--use-precision-aware-optimizer only supported with
    # distributed optimizer".
    Rule.MEGATRON_BF16_MOMENTS: TargetRule(
        "Megatron-LM keeps bf16 optimizer moments only with the distributed optimizer",
        lambda p, c: np.full(len(c), p.training.bf16_moments) & (c.zero == 0),
        lambda p, s: ("bf16_moments with zero_stage 0: Megatron-LM's precision-aware optimizer "
                      "runs only with the distributed optimizer", "use zero_stage 1")),
    # transformer_config.py __post_init__: "Bias in Moe is only supported when ETP==1".
    Rule.MEGATRON_MOE_BIAS_ETP: TargetRule(
        "Megatron-Core supports biased experts only with etp 1",
        lambda p, c: _moe_with_bias(p) & (c.etp > 1),
        lambda p, s: (f"etp {s.expert_tp} on a model with biased experts: Megatron-Core "
                      "supports bias in MoE only when expert_tensor_parallel_size is 1",
                      "use etp 1")),
}
