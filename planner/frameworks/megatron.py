"""Megatron-LM: a launch script for pretrain_gpt.py (pretrain_bert.py for an encoder) under
torchrun, and a reader for users' own Megatron-LM scripts and argument files.

Flag names and choices, and what Megatron-LM's parser stops on, are in megatron_flags (from
data/megatron_args.txt); a test checks every emitted flag against it.
"""

from __future__ import annotations

from cost_models.enums import AttentionKind, CpComm, Fp8Recipe, LoadBalancing, MlpKind, NormKind, \
    Optimizer, PositionKind, Precision, Recompute, ZeroStage
from planner.frameworks import torchrun
from planner.frameworks.base import LaunchPlan, ParsedConfig, header_lines, transformer_shape
from planner.frameworks.megatron_flags import (CHECKED_AGAINST, CHOICES, KNOWN_FLAGS,  # noqa: F401
                                               MEGATRON_COMMIT, TORCHRUN_FLAGS, check_flags)
from planner.frameworks.shell import Flag, ShellScript
from planner.errors import InputError
from planner.frameworks import profiles
from planner.schemas.framework import FrameworkProfile
from planner.feasibility.target_rule import Rule, TargetRule, fp8_rule
from planner.inputs.loader import Problem
from planner.schemas.strategy import LaunchTarget


POSITIONS = {PositionKind.LEARNED: "learned_absolute", PositionKind.ROTARY: "rope",
             PositionKind.NONE: "none"}
NORMS = {NormKind.LAYERNORM: "LayerNorm", NormKind.RMSNORM: "RMSNorm"}

FSDP_STRATEGIES = {ZeroStage.NONE: "no_shard", ZeroStage.OPTIMIZER_STATES: "optim",
                   ZeroStage.GRADIENTS: "optim_grads", ZeroStage.PARAMETERS: "optim_grads_params"}
"""Megatron-FSDP's --data-parallel-sharding-strategy per ZeRO stage (arguments.py @000c4ac2)."""


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
    if layer.mlp is MlpKind.GEGLU or layer.norms_per_layer == 4:
        # Megatron-Bridge builds Gemma 2/3 from its own layer spec (gemma2_layer_spec: fast_gelu
        # gated MLP, post-attention and post-MLP norms, Megatron-Bridge@067f987df); no
        # pretrain_gpt.py flag asks for either.
        raise InputError(f"--emit megatron: {plan.problem.model.name} has a GeGLU MLP or "
                         f"post-sub-layer norms (Gemma 2/3); Megatron-LM's flags describe "
                         f"neither (Megatron-Bridge builds it from its own layer spec)")
    if layer.mlp is MlpKind.SWIGLU:
        args.append("--swiglu")
    if layer.position not in POSITIONS:
        raise InputError(f"--emit megatron: {layer.position.value} positions have no Megatron-LM "
                         f"--position-embedding-type")
    args += [f"--position-embedding-type {POSITIONS[layer.position]}",
             f"--normalization {NORMS[layer.norm]}"]
    if not layer.bias:
        args.append("--disable-bias-linear")
    if layer.qkv_bias:
        args.append("--add-qkv-bias")
    if not shape.output.tied:
        args.append("--untie-embeddings-and-output-weights")
    if not layer.dropout:
        args += ["--attention-dropout 0.0", "--hidden-dropout 0.0"]
    flash = layer.attention is AttentionKind.FLASH
    # The planner's memory assumes flash attention keeps no s x s scores and the unfused
    # kernel keeps them all; say which one to run.
    args.append(f"--attention-backend {'flash' if flash else 'unfused'}")
    if layer.sliding_window is not None:
        args += _window_args(shape)
    if layer.attention_sinks:
        args.append("--softmax-type learnable")
    if layer.is_moe:
        args += _moe_args(shape)
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


def _moe_args(shape) -> list[str]:
    """Megatron-Core MoE flags (megatron/core/transformer/moe/README.md): grouped GEMM and the
    all-to-all dispatcher, which the cost model prices."""
    layer = shape.layer
    args = [f"--num-experts {layer.num_experts}", f"--moe-router-topk {layer.top_k}",
            f"--moe-ffn-hidden-size {layer.expert_ffn}", "--moe-grouped-gemm",
            "--moe-token-dispatcher-type alltoall"]
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


def parse_layout_string(text: str, file: str) -> tuple[int, ...]:
    """Decoder layers per virtual stage of a layout string (the grammar of
    PipelineParallelLayerLayout.parse_str_to_list: commas dropped, (..)*n then x*n unrolled)."""
    import re

    flat = text.replace(",", "")
    flat = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    flat = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    bad = set(flat) - set("EtmL|")
    if bad:
        raise InputError(f"{file}: --pipeline-model-parallel-layout {text}: invalid layer "
                         f"character {sorted(bad)[0]!r}; known: E, t, m, L")
    return tuple(stage.count("t") for stage in flat.split("|"))


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


def _parallel_args(plan: LaunchPlan) -> list[str]:
    s = plan.strategy
    args = [f"--tensor-model-parallel-size {s.tp}", f"--pipeline-model-parallel-size {s.pp}",
            *_layout_args(s)]
    if s.cp > 1:
        args.append(f"--context-parallel-size {s.cp}")
        if s.cp_comm is not CpComm.P2P:       # the default; Transformer Engine's spelling
            args.append(f"--cp-comm-type {s.cp_comm.value}")
        if s.cp_comm is CpComm.A2A_P2P:
            args.append(f"--hierarchical-context-parallel-sizes {s.context_a2a} "
                        f"{s.cp // s.context_a2a}")
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
    if s.optimizer_offload:      # HybridDeviceOptimizer (docs/.../optimizer_cpu_offload.md)
        args += ["--optimizer-cpu-offload", f"--optimizer-offload-fraction {s.optimizer_offload:g}",
                 "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d"]
    if s.activation_offload_layers:
        args.append(f"--cpu-offloading-num-layers {s.activation_offload_layers}")
    args += [f"--micro-batch-size {s.micro_batch}", f"--global-batch-size {s.global_batch}"]
    if s.recompute is Recompute.SELECTIVE:
        args.append("--recompute-granularity selective")
    elif s.recompute is Recompute.FULL:
        args += ["--recompute-granularity full", "--recompute-method uniform",
                 "--recompute-num-layers 1"]
    return args


def _training_args(plan: LaunchPlan) -> list[str]:
    training, s = plan.problem.training, plan.strategy
    if training.precision is Precision.BF16:
        args = ["--bf16"]
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
    elif training.precision is Precision.FP16:     # dynamic loss scaling (Megatron defaults)
        args = ["--fp16", "--initial-loss-scale 4294967296", "--min-loss-scale 1.0",
                "--loss-scale-window 1000", "--hysteresis 2"]
    else:
        args = []
    if training.bf16_gradients and training.precision in (Precision.BF16, Precision.FP8):
        args.append("--grad-reduce-in-bf16")
    if training.optimizer is Optimizer.ADAM:
        args += ["--optimizer adam", "--adam-beta1 0.9", "--adam-beta2 0.95"]
    else:
        momentum = "0.9" if training.optimizer is Optimizer.SGD_MOMENTUM else "0.0"
        args += ["--optimizer sgd", f"--sgd-momentum {momentum}"]
    iters = plan.train_iters
    args += [f'--train-iters "${{TRAIN_ITERS:-{iters if iters else 500000}}}"',
             '--lr "${LR:-3.0e-4}"', '--min-lr "${MIN_LR:-3.0e-5}"', "--lr-decay-style cosine",
             "--lr-warmup-fraction 0.01", "--weight-decay 0.1", "--clip-grad 1.0"]
    return args


def emit(plan: LaunchPlan) -> dict[str, str]:
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
        "# Run on every node: MASTER_ADDR=<first node> "
        + ("[DATA_PATH=<prefix>]" if shape.layer.causal
           else "DATA_PATH=<prefix> VOCAB_FILE=<vocab.txt>") + f" bash {name}",
        "set -euo pipefail", "",
        "MEGATRON_PATH=${MEGATRON_PATH:-/workspace/Megatron-LM}",
        *([] if shape.layer.causal else [
            "DATA_PATH=${DATA_PATH:?set DATA_PATH to a Megatron .bin/.idx prefix}",
            "VOCAB_FILE=${VOCAB_FILE:?set VOCAB_FILE to the BERT WordPiece vocabulary}"]),
        f"CHECKPOINT_PATH=${{CHECKPOINT_PATH:-checkpoints/{p.model.name}}}",
        *torchrun.launcher(plan), "",
        *torchrun.environment(p.cluster, tp=plan.strategy.tp,
                              ordered_kernels=plan.strategy.zero_stage < ZeroStage.GRADIENTS),
        "",
        *_array("MODEL_ARGS", _model_args(plan)),
        *_array("PARALLEL_ARGS", _parallel_args(plan)),
        *_array("TRAINING_ARGS", _training_args(plan)),
        *tokenizer,
        *_array("LOGGING_ARGS", ["--log-interval 10", "--log-throughput",
                                 "--eval-interval 1000", "--eval-iters 10",
                                 '--save "$CHECKPOINT_PATH"', '--load "$CHECKPOINT_PATH"',
                                 "--save-interval 1000"]),
        "",
        f'{torchrun.TORCHRUN} \\\n  "$MEGATRON_PATH/{script}" \\\n'
        '  "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${TRAINING_ARGS[@]}" '
        '"${TOKENIZER_ARGS[@]}" \\\n  "${DATA_ARGS[@]}" "${LOGGING_ARGS[@]}"', ""]
    return {name: "\n".join(lines)}


# --------------------------------------------------------------------------- reading

_COUNTS = frozenset({
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--micro-batch-size",
    "--global-batch-size", "--num-layers", "--seq-length", "--num-distributed-optimizer-instances",
    "--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage"})
"""Flags the reader takes as sizes or degrees: argparse takes any int, the planner needs >= 1."""
_MAX_COUNT = 2**31 - 1
"""A bound far above any real run and below where products of sizes overflow the cost model's
int64 arithmetic (argparse itself takes any Python int)."""


def _given(flag: Flag, file: str) -> str:
    """The value of a flag the planner reads, or an InputError naming the flag: argparse stops
    on a missing value, and a value from a variable the script never sets cannot be read."""
    if flag.value is not None:
        return flag.value
    if flag.unresolved is not None:
        raise InputError(f"{file}: {flag.name} {flag.unresolved}: the script never sets "
                         f"{flag.unresolved.split('$')[1].split()[0].strip('{}')}; give a "
                         f"number, or set the variable in the script")
    raise InputError(f"{file}: {flag.name}: expects a value (Megatron-LM stops: expected one "
                     f"argument)")


def _int_value(flag: Flag, file: str) -> int:
    value = _given(flag, file)
    try:
        return int(value)
    except ValueError:
        raise InputError(f"{file}: {flag.name} {value}: expected an integer") from None


def _float_value(flag: Flag, file: str) -> float:
    """A finite float (argparse's float() takes inf and nan; no setting means them)."""
    import math

    value = _given(flag, file)
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"{file}: {flag.name} {value}: expected a number") from None
    if not math.isfinite(number):
        raise InputError(f"{file}: {flag.name} {value}: expected a finite number")
    return number


_MODEL_FLAGS = ("--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
                "--num-query-groups", "--num-experts", "--moe-router-topk",
                "--moe-ffn-hidden-size", "--kv-lora-rank", "--q-lora-rank", "--mtp-num-layers")


def _model_values(problem: Problem) -> dict[str, int]:
    layers = [b for b in problem.model.blocks if b.kind == "transformer"]
    if not layers:
        return {}
    layer = next((b for b in layers if b.is_moe), layers[0])
    dense = next((b.ffn for b in layers if not b.is_moe), layer.ffn)
    values = {"--num-layers": len(layers), "--hidden-size": layer.hidden,
              "--num-attention-heads": layer.num_heads, "--ffn-hidden-size": dense}
    if layer.mla is None:
        values["--num-query-groups"] = layer.kv_heads
    else:
        values["--kv-lora-rank"] = layer.mla.kv_lora_rank
        if layer.mla.q_lora_rank:
            values["--q-lora-rank"] = layer.mla.q_lora_rank
    if layer.is_moe:
        values.update({"--num-experts": layer.num_experts, "--moe-router-topk": layer.top_k,
                       "--moe-ffn-hidden-size": layer.expert_ffn})
    values["--mtp-num-layers"] = sum(b.kind == "mtp" for b in problem.model.blocks)
    return values


def _check_model(parsed: ParsedConfig, flags: dict[str, Flag], problem: Problem,
                 file: str) -> None:
    expected = _model_values(problem)
    for name in _MODEL_FLAGS:
        if name in flags and name in expected and flags[name].value is not None:
            got = _int_value(flags[name], file)
            if got != expected[name]:
                parsed.finding("megatron_model_mismatch",
                               f"{name} is {got} but {problem.model.name} has {expected[name]}: "
                               f"the script trains another model than the one planned",
                               f"use {name} {expected[name]}, or plan for the script's model")


def _read_layout(parsed: ParsedConfig, text: str, file: str,
                 num_layers: int) -> tuple[int, ...] | None:
    """Decoder layers per virtual stage of a --pipeline-model-parallel-layout, with the
    checks of PipelineParallelLayerLayout.validate_layer_layout."""
    flat = text.replace(",", "").replace(" ", "")
    if not flat.startswith("E") and not flat.startswith("(E"):
        parsed.finding("megatron_flag", "Megatron-LM stops: the first layer of "
                       "--pipeline-model-parallel-layout must be embedding (E)",
                       "start the layout with E")
    if not flat.endswith("L"):
        parsed.finding("megatron_flag", "Megatron-LM stops: the last layer of "
                       "--pipeline-model-parallel-layout must be loss (L)",
                       "end the layout with L")
    counts = parse_layout_string(text, file)
    if sum(counts) != num_layers:
        parsed.finding("megatron_flag", f"Megatron-LM stops: number of decoder layers "
                       f"({sum(counts)}) must match num_layers ({num_layers})",
                       f"give the layout {num_layers} t's")
        return None
    if min(counts) < 1:
        empty = counts.index(0)
        raise InputError(f"{file}: --pipeline-model-parallel-layout {text}: virtual stage "
                         f"{empty} holds no decoder layer; Megatron-LM allows it, the planner "
                         f"needs a layer in every stage")
    return counts


def _uneven_problem(num_layers: int, pp: int, vpp: int, first: int | None,
                    last: int | None) -> str | None:
    """What TransformerConfig.__post_init__ refuses in uneven first/last stages, or None."""
    for name, count in (("first", first), ("last", last)):
        if count is not None and count <= 0:
            return f"num_layers_in_{name}_pipeline_stage must be larger than 0"
        if count is not None and vpp > 1 and count % vpp:
            return (f"number of layers at {name} stage: {count} must be divisible by virtual "
                    f"pipeline parallel degree {vpp}")
    ends = int(first is not None) + int(last is not None)
    middle, mid_pp = num_layers - (first or 0) - (last or 0), pp - ends
    if bool(middle) != bool(mid_pp) or middle < 0:
        return f"Mismatch: {middle} middle layers remaining but {mid_pp} middle PP stages available"
    if mid_pp and middle % mid_pp:
        return (f"number of layers at middle stage: {middle} must be divisible by the middle "
                f"pipeline model parallel size {mid_pp}")
    if mid_pp and vpp > 1 and (middle // mid_pp) % vpp:
        return (f"number of layers at middle stage: {middle // mid_pp} per stage must be "
                f"divisible by virtual pipeline parallel degree {vpp}")
    return None


def _layers_per_chunk(num_layers: int, pp: int, vpp: int, first: int | None,
                      last: int | None) -> list[int]:
    """Per-chunk layer counts (pipeline order) of Megatron-LM's uneven first/last stages.

    Ref: transformer_config.py __post_init__: the middle layers split evenly over the middle
    stages, and with virtual stages each stage's layers split evenly over its chunks.
    """
    ends = int(first is not None) + int(last is not None)
    middle = num_layers - (first or 0) - (last or 0)
    per_middle = middle // (pp - ends) if pp > ends else 0
    stages = [per_middle] * pp
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    return [stages[k % pp] // vpp for k in range(pp * vpp)]


def _context_parallel(parsed: ParsedConfig, flags, cp: int, file: str) -> dict:
    """cp_comm and cp_a2a from --cp-comm-type and --hierarchical-context-parallel-sizes.

    Ref: megatron/core/extensions/transformer_engine.py passes --cp-comm-type to Transformer
    Engine verbatim, which takes p2p, all_gather, a2a or a2a+p2p (its help text's "allgather"
    is refused); arguments.py: a2a+p2p needs --hierarchical-context-parallel-sizes, whose
    product must be cp (the first size is the all-to-all group)."""
    out: dict = {}
    kind = flags.get("--cp-comm-type")
    if kind is not None and kind.value is not None:
        value = kind.value
        if value == "allgather":
            parsed.finding("megatron_flag", "Transformer Engine stops: cp_comm_type 'allgather' "
                           "is not one it knows (p2p, all_gather, a2a, a2a+p2p)",
                           "use --cp-comm-type all_gather")
            value = "all_gather"
        if value not in [k.value for k in CpComm]:
            raise InputError(f"{file}: --cp-comm-type: '{value}' is not one of "
                             f"{', '.join(k.value for k in CpComm)}")
        out["cp_comm"] = CpComm(value)
    sizes = flags.get("--hierarchical-context-parallel-sizes")
    if out.get("cp_comm") is CpComm.A2A_P2P:
        if sizes is None or sizes.value is None:
            parsed.finding("megatron_flag", "Megatron-LM stops: "
                           "--hierarchical-context-parallel-sizes must be set when a2a+p2p is "
                           "used in cp comm", f"add --hierarchical-context-parallel-sizes "
                           f"{max(2, cp // 2)} {cp // max(2, cp // 2)}")
        else:
            inner = _int_value(sizes, file)
            if inner < 1 or cp % inner:
                parsed.finding("megatron_flag", f"Megatron-LM stops: context_parallel_size "
                               f"({cp}) must equal the product of "
                               f"--hierarchical-context-parallel-sizes",
                               f"give sizes A B with A * B = {cp}")
            else:
                out["cp_a2a"] = inner
    return out


def parse(text: str, *, file: str, problem: Problem, num_gpus: int | None) -> ParsedConfig:
    """A Megatron-LM launch script or argument file -> its strategy and what Megatron-LM
    itself would refuse or silently change."""
    script = ShellScript(text, file=file)
    flags = {f.name: f for f in script.flags()}
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.MEGATRON,
                          world_size=torchrun.world_size(script, file=file))
    check_flags(parsed, flags)
    _check_model(parsed, flags, problem, file)

    def number(name: str, default: int | None = None) -> int | None:
        if name not in flags:
            return default
        value = _int_value(flags[name], file)
        if name in _COUNTS and value < 1:
            raise InputError(f"{file}: {name} {value}: must be at least 1")
        if name in _COUNTS and value > _MAX_COUNT:
            raise InputError(f"{file}: {name} {value}: too large (at most {_MAX_COUNT})")
        return value

    tp, pp = number("--tensor-model-parallel-size", 1), number("--pipeline-model-parallel-size", 1)
    num_layers = number("--num-layers") or problem.model.num_layers
    vpp = number("--num-virtual-stages-per-pipeline-rank")
    per_chunk = number("--num-layers-per-virtual-pipeline-stage")
    layout = flags.get("--pipeline-model-parallel-layout")
    # arguments.py: at most one way to ask for virtual stages.
    ways = [f for f in ("--num-layers-per-virtual-pipeline-stage",
                        "--num-virtual-stages-per-pipeline-rank",
                        "--pipeline-model-parallel-layout") if f in flags]
    if len(ways) > 1:
        parsed.finding("megatron_flag", "Megatron-LM stops: no more than one of "
                       f"{', '.join(ways)} can be set at the same time", f"keep only {ways[-1]}")
    if per_chunk:
        if (num_layers // pp) % per_chunk:
            parsed.finding("megatron_flag", f"Megatron-LM stops: number of layers per pipeline "
                           f"stage ({num_layers // pp}) must be divisible by number of layers "
                           f"per virtual pipeline stage ({per_chunk})",
                           "use --num-virtual-stages-per-pipeline-rank")
        vpp = max(1, num_layers // pp // per_chunk)
    vpp = vpp or 1
    s = parsed.strategy
    zero = ZeroStage.OPTIMIZER_STATES if "--use-distributed-optimizer" in flags \
        else ZeroStage.NONE
    fsdp = "--use-megatron-fsdp" in flags
    if fsdp:
        sharding = flags.get("--data-parallel-sharding-strategy")
        by_name = {v: k for k, v in FSDP_STRATEGIES.items()}
        zero = by_name.get(sharding.value if sharding else "no_shard", zero)
    s.update(ep=number("--expert-model-parallel-size", 1),
             etp=number("--expert-tensor-parallel-size", tp))      # None -> tp (arguments.py)
    cp = number("--context-parallel-size", 1)
    s.update(cp=cp, **_context_parallel(parsed, flags, cp, file))
    s.update(tp=tp, pp=pp, vpp=vpp, micro_batch=number("--micro-batch-size", 1),
             sequence_parallel="--sequence-parallel" in flags, zero_stage=zero,
             overlap_grad_reduce="--overlap-grad-reduce" in flags,
             overlap_param_gather="--overlap-param-gather" in flags,
             tp_comm_overlap="--tp-comm-overlap" in flags)
    instances = number("--num-distributed-optimizer-instances", 1)
    if instances > 1:
        # HSDP: each instance shards over dp / instances ranks (Megatron-LM
        # megatron/core/parallel_state.py, intra/inter distributed-optimizer groups).
        dp = (num_gpus or parsed.world_size or problem.num_gpus) // max(1, tp * cp * pp)
        if dp % instances:
            parsed.finding("megatron_flag", f"Megatron-LM stops: the data-parallel size ({dp}) "
                           f"must be divisible by --num-distributed-optimizer-instances "
                           f"({instances})", "use a divisor of the data-parallel size")
        else:
            s["dp_shard"] = dp // instances
    if "--global-batch-size" in flags:
        s["global_batch"] = number("--global-batch-size")
    granularity = flags.get("--recompute-granularity")
    if granularity is not None and granularity.value in ("full", "selective"):
        s["recompute"] = Recompute(granularity.value)
        if granularity.value == "full" and "--recompute-method" not in flags:
            parsed.finding("megatron_flag", "Megatron-LM stops: --recompute-granularity full "
                           "needs --recompute-method (uniform or block)",
                           "add --recompute-method uniform --recompute-num-layers 1")
    elif "--recompute-activations" in flags:
        s["recompute"] = Recompute.SELECTIVE
    _recompute_details(parsed, flags, s.get("recompute"), num_layers // pp, file)
    first = number("--decoder-first-pipeline-num-layers")
    last = number("--decoder-last-pipeline-num-layers")
    if layout is not None and layout.value is not None:
        if first is not None or last is not None:
            parsed.finding("megatron_flag", "Megatron-LM stops: pipeline_model_parallel_layout "
                           "cannot be set with other pipeline layout arguments",
                           "drop --decoder-first/last-pipeline-num-layers")
        counts = _read_layout(parsed, layout.value, file, num_layers)
        if counts is not None and len(counts) % pp:
            parsed.finding("megatron_flag", f"Megatron-LM stops: pipeline_model_parallel_layout "
                           f"({len(counts)} stages) must be divisible by "
                           f"pipeline_model_parallel_size ({pp})",
                           f"give {pp} x vpp stages in --pipeline-model-parallel-layout")
        elif counts is not None:
            s["vpp"] = len(counts) // pp
            s["layers_per_stage"] = counts
    elif first is not None or last is not None:
        if per_chunk:
            parsed.finding("megatron_flag", "Megatron-LM stops: please use "
                           "--num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
                           "parallel degree when enable uneven pipeline parallelism",
                           "use --num-virtual-stages-per-pipeline-rank")
        problem_text = _uneven_problem(num_layers, pp, vpp, first, last)
        if problem_text:
            parsed.finding("megatron_flag", f"Megatron-LM stops: {problem_text}",
                           "choose first/last layer counts that leave the middle stages an "
                           "equal share")
        else:
            s["layers_per_stage"] = tuple(_layers_per_chunk(num_layers, pp, vpp, first, last))
    # --sequence-parallel at tp 1 is a warning (Megatron-LM turns it off and runs): kept as
    # written, for ineffective_settings to note (exit 0).
    if "--tp-comm-overlap" in flags and not (s["sequence_parallel"] and tp > 1):
        # megatron/training/arguments.py turns sequence parallelism off at tp 1, then asserts
        # "Tensor parallel communication/GEMM overlap can happen only when sequence
        # parallelism is enabled". Priced without it: the finding says it, no note besides.
        parsed.finding("megatron_flag", "Megatron-LM stops: --tp-comm-overlap needs "
                       "--sequence-parallel" + (", which it turns off at tp 1" if tp == 1
                                                else ""),
                       "drop --tp-comm-overlap" if tp == 1 else "add --sequence-parallel")
        s["tp_comm_overlap"] = False
    if "--overlap-param-gather" in flags and not ("--use-distributed-optimizer" in flags or fsdp):
        parsed.finding("megatron_flag", "Megatron-LM stops: --overlap-param-gather needs "
                       "--use-distributed-optimizer", "add --use-distributed-optimizer")
    connections = script.variables.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if fsdp and connections == "1":
        parsed.finding("megatron_environment", "Megatron-LM stops: Megatron-FSDP needs "
                       "CUDA_DEVICE_MAX_CONNECTIONS other than 1",
                       "remove export CUDA_DEVICE_MAX_CONNECTIONS=1")
    if tp > 1 and not fsdp and script.mentions("torchrun") and connections != "1":
        parsed.finding("megatron_environment", "Megatron-LM stops on pre-Blackwell GPUs: tensor "
                       "parallelism needs CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment",
                       "add export CUDA_DEVICE_MAX_CONNECTIONS=1")
    _offload(parsed, flags, file)
    if "--fp8-param-gather" in flags and "--fp8-format" not in flags:
        parsed.strategy["fp8_param_gather"] = True     # without FP8: a note says it does nothing
    if "--fp8-format" in flags:
        _fp8(parsed, flags, fsdp)
    elif "--bf16" in flags:
        parsed.training["precision"] = Precision.BF16
    elif "--fp16" in flags:
        parsed.training["precision"] = Precision.FP16
    else:
        parsed.training["precision"] = Precision.FP32
    if "--optimizer" in flags and flags["--optimizer"].value == "sgd":
        momentum = flags.get("--sgd-momentum")
        plain = momentum is not None and _float_value(momentum, file) == 0
        parsed.training["optimizer"] = Optimizer.SGD if plain else Optimizer.SGD_MOMENTUM
    elif "--optimizer" in flags:
        parsed.training["optimizer"] = Optimizer.ADAM
    if "--bf16" in flags and ("--grad-reduce-in-bf16" in flags or _value(
            flags, "--main-grads-dtype") == "bf16"):
        # arguments.py: with --bf16, --grad-reduce-in-bf16 turns accumulate_allreduce_grads_in_fp32
        # off, and so does --main-grads-dtype bf16; the grad buffer is then bf16.
        parsed.training["bf16_gradients"] = True
    optimizer = _value(flags, "--optimizer")
    if optimizer not in (None, "adam", "sgd"):
        parsed.finding("megatron_unpriced", f"--optimizer {optimizer}: the planner prices Adam "
                       f"or SGD states; priced as adam", "compare with --optimizer adam")
    attention = _attention(parsed, flags)
    if attention is not None:
        parsed.model["attention"] = attention
    if "--seq-length" in flags:
        parsed.training["seq_len"] = number("--seq-length")
    _training_schedule(parsed, flags, s, file)
    return parsed


def _value(flags: dict, name: str) -> str | None:
    flag = flags.get(name)
    return flag.value if flag is not None else None


def _attention(parsed: ParsedConfig, flags: dict) -> AttentionKind | None:
    """The attention kernel --attention-backend picks (TransformerConfig.attention_backend,
    default auto): flash and fused (cuDNN) attention keep no s x s scores, and auto lets
    Transformer Engine pick one of them (megatron/core/extensions/transformer_engine.py);
    unfused and local (Megatron's own DotProductAttention) keep them. arguments.py: local
    attention needs --spec local."""
    backend = _value(flags, "--attention-backend")
    if backend is None and "--use-flash-attn" in flags:
        backend = "flash"
    if backend == "local" and "--spec" not in flags:
        parsed.finding("megatron_flag", "Megatron-LM stops: --attention-backend local is only "
                       "supported with --spec local", "use --attention-backend auto")
    if backend is None or backend not in CHOICES["--attention-backend"]:
        return None
    if backend == "auto":
        parsed.notes.append("--attention-backend auto: priced as flash attention (Transformer "
                            "Engine picks flash or cuDNN fused attention, neither keeps the "
                            "s x s scores)")
    return AttentionKind.FLASH if backend in ("flash", "fused", "auto") \
        else AttentionKind.STANDARD


def _recompute_details(parsed: ParsedConfig, flags: dict, recompute: Recompute | None,
                       layers_per_stage: int, file: str) -> None:
    """What --recompute-method, --recompute-num-layers and --recompute-modules do beyond the
    planner's three levels (none, selective = core attention, full = every layer), as
    findings; and the argument checks of arguments.py on them."""
    method = _value(flags, "--recompute-method")
    if recompute is Recompute.SELECTIVE and method is not None:
        parsed.finding("megatron_flag", "Megatron-LM stops: recompute method is not yet "
                       "supported for selective recomputing granularity",
                       "drop --recompute-method")
    if "--distribute-saved-activations" in flags:
        tp_flag = flags.get("--tensor-model-parallel-size")
        if tp_flag is None or _int_value(tp_flag, file) == 1 or recompute is not Recompute.FULL:
            parsed.finding("megatron_flag", "Megatron-LM stops: --distribute-saved-activations "
                           "needs tensor parallelism and --recompute-granularity full",
                           "drop --distribute-saved-activations")
    if recompute is Recompute.FULL and method is not None:
        count_flag = flags.get("--recompute-num-layers")
        count = _int_value(count_flag, file) if count_flag is not None else 1
        if method == "block" and count < layers_per_stage:
            parsed.finding("megatron_unpriced", f"--recompute-method block "
                           f"--recompute-num-layers {count}: only {count} of the "
                           f"{layers_per_stage} layers per stage are recomputed; priced as full "
                           f"recompute of every layer, so memory is underestimated",
                           "compare with --recompute-num-layers equal to the layers per stage")
        elif method == "uniform" and count > 1:
            parsed.finding("megatron_unpriced", f"--recompute-method uniform "
                           f"--recompute-num-layers {count}: checkpoints every {count} layers; "
                           f"priced as one checkpoint per layer",
                           "compare with --recompute-num-layers 1")
    modules = flags.get("--recompute-modules")
    names = (modules.value, *modules.more) if modules is not None and modules.value else ()
    if recompute is Recompute.SELECTIVE and names and names != ("core_attn",):
        parsed.finding("megatron_unpriced", f"--recompute-modules {' '.join(names)}: the "
                       f"planner's selective recompute is core attention only (the "
                       f"default); priced so, so memory is overestimated",
                       "compare with --recompute-modules core_attn")


def _training_schedule(parsed: ParsedConfig, flags: dict, s: dict, file: str) -> None:
    """The iteration/sample and batch-size schedule checks of arguments.py validate_args
    @d98e8a64 (the planner does not price the schedule, but Megatron-LM stops on these)."""
    iters = "--train-iters" in flags
    samples = "--train-samples" in flags
    # arguments.py: "expected iteration-based training" and its sample-based twin.
    for given, others, kind in ((iters, ("--train-samples", "--lr-decay-samples",
                                         "--lr-warmup-samples"), "iteration"),
                                (samples, ("--train-iters", "--lr-decay-iters",
                                           "--lr-warmup-iters"), "sample")):
        if not given:
            continue
        for other in others:
            if other in flags:
                parsed.finding("megatron_flag", f"Megatron-LM stops: expected {kind}-based "
                               f"training, but {other} is set", f"drop {other}")
    warmups = [f for f in ("--lr-warmup-iters", "--lr-warmup-samples") if f in flags]
    if "--lr-warmup-fraction" in flags and warmups:
        parsed.finding("megatron_flag", f"Megatron-LM stops: can only specify one of "
                       f"--lr-warmup-fraction and {warmups[0]}", f"drop {warmups[0]}")
    if "--fp16" in flags and "--bf16" in flags:
        parsed.finding("megatron_flag", "Megatron-LM stops: --fp16 and --bf16 cannot both be "
                       "set", "keep one of them")
    schedule = flags.get("--step-batch-size-schedule")
    if schedule is not None and "--global-batch-size" in flags:
        # arguments.py: raise ValueError('Cannot specify both ...').
        parsed.finding("megatron_flag", "Megatron-LM stops: cannot specify both "
                       "--step-batch-size-schedule and --global-batch-size",
                       "drop --global-batch-size")
    if "--rampup-batch-size" in flags:
        # core/num_microbatches_calculator.py @d98e8a64 warns and drops it (#4411, 2026-04);
        # arguments.py before that stopped iteration-based runs with it ("expected no
        # batch-size rampup for iteration-based training", @000c4ac2).
        old = " (releases before 2026-04 stop: expected no batch-size rampup for " \
              "iteration-based training)" if iters else ""
        parsed.notes.append(f"Megatron-LM ignores --rampup-batch-size (deprecated, a warning): "
                            f"the batch stays at --global-batch-size{old}; use "
                            f"--step-batch-size-schedule with --train-samples")
    if schedule is not None and schedule.value is not None and "global_batch" not in s:
        try:
            last = int(schedule.value.split()[-1].split(":")[1])
        except (IndexError, ValueError):
            raise InputError(f"{file}: --step-batch-size-schedule {schedule.value}: expected "
                             f"'START:BATCH ...' pairs") from None
        s["global_batch"] = last
        parsed.notes.append(f"--step-batch-size-schedule: priced at its last global batch "
                            f"({last}); the earlier, smaller batches are not priced")


# --------------------------------------------------------------------------- profile

def _offload(parsed: ParsedConfig, flags: dict, file: str) -> None:
    """CPU offload as Megatron-LM reads it: --optimizer-cpu-offload with
    --optimizer-offload-fraction (default 1.0) needs --use-precision-aware-optimizer
    (arguments.py); --cpu-offloading-num-layers N > 0 turns activation offload on."""
    if "--optimizer-cpu-offload" in flags:
        fraction = flags.get("--optimizer-offload-fraction")
        share = _float_value(fraction, file) if fraction is not None else 1.0
        if not 0 <= share <= 1:
            raise InputError(f"{file}: --optimizer-offload-fraction {share:g}: must be between "
                             f"0 and 1")
        parsed.strategy["optimizer_offload"] = share
        if "--use-precision-aware-optimizer" not in flags:
            parsed.finding("megatron_flag", "Megatron-LM stops: the optimizer cpu offload must "
                           "be used in conjunction with --use-precision-aware-optimizer",
                           "add --use-precision-aware-optimizer")
        if "--overlap-cpu-optimizer-d2h-h2d" not in flags:
            parsed.finding("megatron_offload", "without --overlap-cpu-optimizer-d2h-h2d the "
                           "gradient copies, the CPU step and the weight copies run one after "
                           "another; priced overlapped", "add --overlap-cpu-optimizer-d2h-h2d")
    if "--cpu-offloading-num-layers" in flags:
        layers = _int_value(flags["--cpu-offloading-num-layers"], file) or 0
        if layers < 0:
            raise InputError(f"{file}: --cpu-offloading-num-layers {layers}: must be 0 or more")
        parsed.strategy["activation_offload_layers"] = layers
    if "--fine-grained-activation-offloading" in flags:
        parsed.finding("megatron_offload", "--fine-grained-activation-offloading offloads the "
                       "inputs of chosen modules; not priced (the planner prices whole layers, "
                       "--cpu-offloading-num-layers)", "price it with --cpu-offloading-num-layers")


def _fp8(parsed: ParsedConfig, flags: dict, fsdp: bool) -> None:
    """FP8 as Megatron-LM runs it: --fp8-format turns it on, --fp8-recipe (default delayed)
    picks the scaling, --fp8-param-gather keeps FP8 parameters (needs the distributed
    optimizer or FSDP, arguments.py); first/last bf16 layers refuse delayed scaling
    (transformer_config.py)."""
    parsed.training["precision"] = Precision.FP8
    named = flags.get("--fp8-recipe")
    recipe = named.value if named is not None and named.value else "delayed"
    if recipe == "custom":
        parsed.finding("megatron_fp8", "--fp8-recipe custom: a quantizer factory the planner "
                       "cannot read; priced as tensorwise", "use a named --fp8-recipe")
        recipe = "tensorwise"
    if recipe in {r.value for r in Fp8Recipe}:
        parsed.training["fp8_recipe"] = Fp8Recipe(recipe)
    gather = "--fp8-param-gather" in flags
    parsed.strategy["fp8_param_gather"] = gather
    if gather and not ("--use-distributed-optimizer" in flags or fsdp):
        parsed.finding("megatron_flag", "Megatron-LM stops: --fp8-param-gather needs "
                       "--use-distributed-optimizer (or Megatron-FSDP)",
                       "add --use-distributed-optimizer")
    if "--first-last-layers-bf16" in flags and recipe == "delayed":
        parsed.finding("megatron_flag", "Megatron-LM stops: --first-last-layers-bf16 is not "
                       "supported with delayed scaling", "use --fp8-recipe tensorwise")
    if "--bf16" not in flags:
        parsed.finding("megatron_fp8", "--fp8-format without --bf16: the weights and the "
                       "layers outside FP8 run in fp32; priced as bf16 with FP8 linears",
                       "add --bf16")


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


RULES: dict[Rule, TargetRule] = {
    Rule.MEGATRON_FP8: fp8_rule("Megatron-LM", profile().fp8),
    Rule.MEGATRON_OFFLOAD: TargetRule(
        "Megatron-LM offloads activations only with pp 1 and no recompute, and the optimizer "
        "with FP8 parameters only under delayed scaling", _offload_breaks, _explain_offload),
    # transformer_config.py __post_init__: "Bias in Moe is only supported when ETP==1".
    Rule.MEGATRON_MOE_BIAS_ETP: TargetRule(
        "Megatron-Core supports biased experts only with etp 1",
        lambda p, c: _moe_with_bias(p) & (c.etp > 1),
        lambda p, s: (f"etp {s.expert_tp} on a model with biased experts: Megatron-Core "
                      "supports bias in MoE only when expert_tensor_parallel_size is 1",
                      "use etp 1")),
}
