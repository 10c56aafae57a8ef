"""Megatron-LM flag values as its parser takes them, and the readers of one feature each
(attention, recomputation, the batch schedule, CPU offload, FP8) that `megatron_reader.parse`
calls."""

from __future__ import annotations

from cost_models.enums import (DEFAULT_RECOMPUTE_MODULES, AttentionKind, Fp8Recipe,
                               PositionKind, Precision, Recompute, RecomputeModule)
from planner.frameworks.base import ParsedConfig
from planner.frameworks.megatron_flags import CHOICES
from planner.frameworks.shell_flags import Flag, one_line
from planner.errors import InputError


_COUNTS = frozenset({
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--micro-batch-size",
    "--global-batch-size", "--num-layers", "--seq-length", "--num-distributed-optimizer-instances",
    "--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage",
    "--microbatch-group-size-per-virtual-pipeline-stage"})
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
        raise InputError(f"{file}: {flag.name} {one_line(flag.unresolved)}: {flag.why}; give a "
                         f"number, or set it in the script")
    raise InputError(f"{file}: {flag.name}: expects a value (Megatron-LM stops: expected one "
                     f"argument)")


def _int_value(flag: Flag, file: str) -> int:
    value = _given(flag, file)
    try:
        return int(value)
    except ValueError:
        raise InputError(f"{file}: {flag.name} {one_line(value)}: expected an integer") from None


def int_flag(flags: dict, name: str, file: str, default: int | None = None) -> int | None:
    """An integer flag's value (`default` when absent); sizes and degrees (`_COUNTS`) at least
    1 and at most `_MAX_COUNT`."""
    if name not in flags:
        return default
    value = _int_value(flags[name], file)
    if name in _COUNTS and value < 1:
        raise InputError(f"{file}: {name} {value}: must be at least 1")
    if name in _COUNTS and value > _MAX_COUNT:
        raise InputError(f"{file}: {name} {value}: too large (at most {_MAX_COUNT})")
    return value


_MODEL_FLAGS = ("--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
                "--num-query-groups", "--num-experts", "--moe-router-topk",
                "--moe-ffn-hidden-size", "--kv-lora-rank", "--q-lora-rank", "--mtp-num-layers")


def _model_values(problem) -> dict[str, int]:
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


def check_model(parsed: ParsedConfig, flags: dict, problem, file: str) -> None:
    """A finding for each model size the script gives that is not the planned model's, and
    for a head size (--kv-channels) or rotary share (--rotary-percent) it gives that is not."""
    expected = _model_values(problem)
    for name in _MODEL_FLAGS:
        if name in flags and name in expected and flags[name].value is not None:
            got = _int_value(flags[name], file)
            if got != expected[name]:
                _mismatch(parsed, name, got, expected[name], problem)
    layers = [b for b in problem.model.blocks if b.kind == "transformer"]
    if not layers:
        return
    layer = layers[0]
    if "--kv-channels" in flags and flags["--kv-channels"].value is not None \
            and layer.mla is None:
        got = _int_value(flags["--kv-channels"], file)
        if got != layer.dim_per_head:
            _mismatch(parsed, "--kv-channels", got, layer.dim_per_head, problem)
    if "--rotary-percent" in flags and flags["--rotary-percent"].value is not None \
            and layer.position is PositionKind.ROTARY:
        got = _float_value(flags["--rotary-percent"], file)
        if abs(got - layer.partial_rotary) > 1e-6:
            _mismatch(parsed, "--rotary-percent", f"{got:g}", f"{layer.partial_rotary:g}",
                      problem)


def _mismatch(parsed: ParsedConfig, name: str, got, expected, problem) -> None:
    parsed.finding("megatron_model_mismatch",
                   f"{name} is {got} but {problem.model.name} has {expected}: the script "
                   f"trains another model than the one planned",
                   f"use {name} {expected}, or plan for the script's model")


def _float_value(flag: Flag, file: str) -> float:
    """A finite float (argparse's float() takes inf and nan; no setting means them)."""
    import math

    value = _given(flag, file)
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"{file}: {flag.name} {one_line(value)}: expected a number") from None
    if not math.isfinite(number):
        raise InputError(f"{file}: {flag.name} {value}: expected a finite number")
    return number


def _value(flags: dict, name: str) -> str | None:
    flag = flags.get(name)
    return flag.value if flag is not None else None


def _attention(parsed: ParsedConfig, flags: dict) -> AttentionKind | None:
    """The attention kernel --attention-backend picks (TransformerConfig.attention_backend,
    default auto): auto lets Transformer Engine pick its fastest fused kernel and fused names
    cuDNN's (attention flash); flash names the flash-attn package (attention flash2; the
    older --use-flash-attn too); none of them keeps s x s scores (megatron/core/extensions/
    transformer_engine.py); unfused and local (Megatron's own DotProductAttention) keep them.
    arguments.py: local attention needs --spec local."""
    backend = _value(flags, "--attention-backend")
    if backend is None and "--use-flash-attn" in flags:
        backend = "flash"
    if backend == "local" and "--spec" not in flags:
        parsed.finding("megatron_flag", "Megatron-LM stops: --attention-backend local is only "
                       "supported with --spec local", "use --attention-backend auto")
    softmax = _value(flags, "--softmax-type")
    if backend == "flash" and softmax not in (None, "vanilla"):
        # TE utils.py "Filter: Softmax type" (@252a4742): no FlashAttention for these; flash
        # sets NVTE_FUSED_ATTN=0 and NVTE_UNFUSED_ATTN=0 (language_module.py @d98e8a64).
        parsed.finding("megatron_flag", f"Transformer Engine stops: --softmax-type {softmax} "
                       f"disables FlashAttention, and --attention-backend flash turns the fused "
                       f"and unfused kernels off, so no attention backend is left",
                       "use --attention-backend fused (cuDNN), or auto")
    if backend is None or backend not in CHOICES["--attention-backend"]:
        return None
    if backend == "flash":
        parsed.notes.append("--attention-backend flash: priced as FlashAttention-2 (the "
                            "flash-attn package; on Hopper about 0.6 of cuDNN's rate). Where "
                            "FlashAttention-3 is installed, --attention flash prices it")
        return AttentionKind.FLASH2
    return AttentionKind.FLASH if backend in ("fused", "auto") else AttentionKind.UNFUSED


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


def _fp4(parsed: ParsedConfig, flags: dict, fsdp: bool) -> None:
    """NVFP4 as Megatron-LM runs it (training/arguments.py, core/fp4_utils.py): --fp4-format
    e2m1 turns it on, --fp4-recipe nvfp4 (the default) is TE's NVFP4BlockScaling, and
    --fp4-param-gather keeps NVFP4 parameters; --fp8-format alongside stops Megatron-LM."""
    parsed.training["precision"] = Precision.FP8
    parsed.training["fp8_recipe"] = Fp8Recipe.NVFP4
    named = flags.get("--fp4-recipe")
    if named is not None and named.value == "custom":
        parsed.finding("megatron_fp8", "--fp4-recipe custom: a quantizer factory the planner "
                       "cannot read; priced as nvfp4", "use --fp4-recipe nvfp4")
    if "--fp8-format" in flags:
        parsed.finding("megatron_flag", "Megatron-LM stops: --fp4-format and --fp8-format "
                       "cannot be used simultaneously", "remove --fp8-format")
    gather = "--fp4-param-gather" in flags
    parsed.strategy["fp8_param_gather"] = gather
    if gather and not ("--use-distributed-optimizer" in flags or fsdp):
        parsed.finding("megatron_flag", "Megatron-LM stops: --fp4-param-gather gathers from "
                       "the distributed optimizer's shards (or Megatron-FSDP's)",
                       "add --use-distributed-optimizer")
    if "--bf16" not in flags:
        parsed.finding("megatron_fp8", "--fp4-format without --bf16: the weights and the "
                       "layers outside NVFP4 run in fp32; priced as bf16 with NVFP4 linears",
                       "add --bf16")


def _fp8(parsed: ParsedConfig, flags: dict, fsdp: bool) -> None:
    """FP8 as Megatron-LM runs it: --fp8-format turns it on, --fp8-recipe (default delayed)
    picks the scaling, --fp8-param-gather keeps FP8 parameters (needs the distributed
    optimizer or FSDP, arguments.py). What else runs in FP8, or stays out of it, is
    `_low_precision_extras`'s."""
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
    if "--bf16" not in flags:
        parsed.finding("megatron_fp8", "--fp8-format without --bf16: the weights and the "
                       "layers outside FP8 run in fp32; priced as bf16 with FP8 linears",
                       "add --bf16")


def _low_precision_extras(parsed: ParsedConfig, flags: dict, file: str) -> None:
    """What the script puts in FP8 beyond the linear layers, or keeps out of it
    (training.fp8_output_layer, bf16_first_layers, bf16_last_layers), after `_fp8` / `_fp4`
    set the precision. Flags @d98e8a64, generated from TransformerConfig: --fp8-output-proj
    (fp8_output_proj: "must be used together with fp8 mode", MXFP8 only, a rule says so);
    --first-last-layers-bf16 with --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16
    (each 1 by default; fp8_utils.py and fp4_utils.py keep those layers outside the autocast).
    FP8 attention (TransformerConfig.fp8_dot_product_attention) has no flag: pretrain_gpt.py
    cannot ask for it."""
    low = parsed.training.get("precision") is Precision.FP8
    if low:       # the script states them: a flag left out is Megatron-LM's default
        parsed.training.update(fp8_output_layer=False, bf16_first_layers=0, bf16_last_layers=0)
    if "--fp8-output-proj" in flags:
        if "--fp8-format" in flags:
            parsed.training["fp8_output_layer"] = True
        else:
            parsed.finding("megatron_flag", "Megatron-LM stops: --fp8-output-proj must be used "
                           "together with fp8 mode (--fp8-format)",
                           "add --fp8-format e4m3 --fp8-recipe mxfp8, or drop --fp8-output-proj")
    counts = [name for name in ("--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16")
              if name in flags]
    if "--first-last-layers-bf16" not in flags:
        if counts:
            parsed.notes.append(f"{' and '.join(counts)} without --first-last-layers-bf16: "
                                f"no effect, every layer runs in the run's precision")
        return
    if not low:
        parsed.notes.append("--first-last-layers-bf16 without --fp8-format or --fp4-format: no "
                            "effect, every layer is bf16 already")
        return
    for key, name in (("bf16_first_layers", "--num-layers-at-start-in-bf16"),
                      ("bf16_last_layers", "--num-layers-at-end-in-bf16")):
        parsed.training[key] = _int_value(flags[name], file) if name in flags else 1


# TransformerConfig.__post_init__ @d98e8a64, allowed_modules: the planner prices the first
# seven (`RecomputeModule`); the rest belong to layer kinds it does not model.
UNPRICED_RECOMPUTE_MODULES = ("gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")


def recompute_modules(parsed: ParsedConfig, flags: dict,
                      recompute: Recompute | None) -> tuple[RecomputeModule, ...] | None:
    """--recompute-modules as a strategy's recompute_modules (None: unset, or Megatron-Core's
    default core_attn); Megatron-Core reads it only with --recompute-granularity selective."""
    modules = flags.get("--recompute-modules")
    names = (modules.value, *modules.more) if modules is not None and modules.value else ()
    if recompute is not Recompute.SELECTIVE or not names:
        return None
    known = {m.value for m in RecomputeModule}
    invalid = [n for n in names if n not in known and n not in UNPRICED_RECOMPUTE_MODULES]
    if invalid:
        parsed.finding("megatron_flag", f"Megatron-Core stops: invalid choices for "
                       f"recompute_modules: {', '.join(invalid)}",
                       f"use {', '.join(m.value for m in RecomputeModule)}")
    unpriced = [n for n in names if n in UNPRICED_RECOMPUTE_MODULES]
    if unpriced:
        parsed.finding("megatron_unpriced", f"--recompute-modules {' '.join(unpriced)}: "
                       f"modules of layer kinds the planner does not model; priced without "
                       f"them, so memory is overestimated", "compare without them")
    priced = tuple(RecomputeModule(n) for n in names if n in known)
    if not priced or set(priced) == DEFAULT_RECOMPUTE_MODULES:
        return None
    return priced
