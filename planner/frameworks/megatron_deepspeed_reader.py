"""Megatron-DeepSpeed: launch scripts that run pretrain_gpt.py with --deepspeed (BLOOM's
bigscience-workshop fork, deepspeedai's, formerly Microsoft's), read as the DeepSpeed runs they
are.

What differs from Megatron-LM, and how each is read:
- the flags are the fork's own (`megatron_flags.MEGATRON_DEEPSPEED`, both forks' union):
  --checkpoint-activations (full recompute of each layer, `--checkpoint-num-layers` per
  checkpoint), --pp-partition-method, --zero-stage, --ds-sequence-parallel-size, ALiBi;
- the model runs in DeepSpeed's pipeline engine (pretrain_gpt.py builds GPTModelPipe whenever
  --deepspeed is given, unless deepspeedai's --no-pipeline-parallel), at one stage too: the
  DeepSpeed profile's `pipeline_engine_single_stage`;
- the engine places the layers itself (PipelineModule partition_method, 'type:transformer'
  unless --pp-partition-method says otherwise): any pp is valid, the stages may be uneven;
- the ZeRO stage is the DeepSpeed config's (--deepspeed_config): the file when it is there, or
  the here-document the script writes it with (`ShellScript.written`); else --zero-stage,
  which the script passes to Megatron-DeepSpeed to match it; bf16 at stage 0 in the pipeline
  engine is ZeRO-1 (`deepspeed_reader.engine_zero_stage`).
"""

from __future__ import annotations

from pathlib import Path

from cost_models.enums import (AttentionKind, CpComm, Optimizer, PipelinePartition, Precision,
                               Recompute)
from cost_models.pipeline import partitioned_layer_counts
from planner.core.problem import Problem
from planner.errors import InputError
from planner.frameworks.base import ParsedConfig
from planner.frameworks.deepspeed_reader import (check_keys, engine_zero_stage, load_config,
                                                  zero_stage)
from planner.frameworks.launchers import read_launch
from planner.frameworks.megatron_flags import MEGATRON_DEEPSPEED, check_flags
from planner.frameworks.megatron_values import _value, check_model, int_flag
from planner.frameworks.shell import ShellScript
from planner.inputs import profiles
from planner.inputs.safe_parse import read_text
from planner.schemas.strategy import LaunchTarget


def launched_by_deepspeed(script: ShellScript, entry) -> bool:
    """Whether the deepspeed launcher starts the training program (`deepspeed ... ENTRY`)."""
    return any(Path(c.words[0]).name == "deepspeed" and any(entry.search(w) for w in c.words)
               for c in script.commands)


def parse_script(script: ShellScript, flags: dict, *, file: str, problem: Problem,
                 num_gpus: int | None) -> ParsedConfig:
    """The strategy of a Megatron-DeepSpeed launch (`flags`: those its pretrain_gpt.py gets)
    and what Megatron-DeepSpeed or DeepSpeed would stop on. Without --deepspeed the fork runs
    Megatron's own training loop (no DeepSpeed engine, no ZeRO): priced as Megatron-LM."""
    deepspeed = "--deepspeed" in flags
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.DEEPSPEED if deepspeed
                          else LaunchTarget.MEGATRON)
    read_launch(parsed, script, file=file, problem=problem, num_gpus=num_gpus)
    check_flags(parsed, flags, MEGATRON_DEEPSPEED)
    check_model(parsed, flags, problem, file)

    def number(name: str, default: int | None = None) -> int | None:
        return int_flag(flags, name, file, default)

    s = parsed.strategy
    tp = number("--tensor-model-parallel-size", 1)
    pp = number("--pipeline-model-parallel-size", 1)
    s.update(tp=tp, pp=pp, micro_batch=number("--micro-batch-size", 1),
             sequence_parallel="--sequence-parallel" in flags)
    if "--global-batch-size" in flags:
        s["global_batch"] = number("--global-batch-size")
    if "--seq-length" in flags:
        parsed.training["seq_len"] = number("--seq-length")
    _precision(parsed, flags)
    _attention(parsed, flags)
    if not deepspeed:
        parsed.notes.append(f"{file}: Megatron-DeepSpeed without --deepspeed runs Megatron's "
                            f"own training loop (no DeepSpeed engine or ZeRO); priced with "
                            f"Megatron-LM's profile")
        s["zero_stage"] = 1 if "--use-distributed-optimizer" in flags else 0
        _recompute(parsed, flags, engine=False)
        return parsed
    engine = "--no-pipeline-parallel" not in flags
    if not engine and pp > 1:
        # deepspeedai arguments.py: "pipeline_model_parallel_size must be 1 if pipeline
        # parallel is disabled".
        parsed.finding("megatron_flag", "Megatron-DeepSpeed stops: "
                       "pipeline_model_parallel_size must be 1 if pipeline parallel is disabled",
                       "drop --no-pipeline-parallel, or use --pipeline-model-parallel-size 1")
    # overlap_grad_reduce: the pipeline engine reduces gradients once all micro-batches are
    # done (runtime/pipe/schedule.py TrainSchedule: ReduceGrads after the last backward), and
    # ZeRO's overlap_comm is off below stage 3 unless the config turns it on.
    s["overlap_grad_reduce"] = False
    cp = number("--ds-sequence-parallel-size", 1)
    if cp > 1:     # DeepSpeed-Ulysses: heads exchanged by all-to-all (deepspeed/sequence/layer.py)
        s.update(cp=cp, cp_comm=CpComm.A2A)
    if "--moe-expert-parallel-size" in flags:
        s["ep"] = number("--moe-expert-parallel-size")
    _recompute(parsed, flags, engine)
    if engine:
        parsed.framework["pipeline_engine_single_stage"] = True
        _partition(parsed, flags, problem.model.num_layers, pp)
    s["zero_stage"] = engine_zero_stage(parsed, _zero_stage(parsed, flags, script, file),
                                        pipeline_engine=engine)
    if "--rampup-batch-size" in flags:
        parsed.notes.append("--rampup-batch-size: Megatron-DeepSpeed starts with smaller "
                            "batches; priced at --global-batch-size, the batch it ramps up to")
    return parsed


def _precision(parsed: ParsedConfig, flags: dict) -> None:
    if "--bf16" in flags and "--fp16" in flags:
        parsed.finding("megatron_flag", "Megatron-DeepSpeed stops: --fp16 and --bf16 cannot "
                       "both be set", "keep one of them")
    parsed.training["precision"] = (Precision.BF16 if "--bf16" in flags else
                                    Precision.FP16 if "--fp16" in flags else Precision.FP32)
    optimizer = _value(flags, "--optimizer")
    if optimizer == "sgd":
        parsed.training["optimizer"] = Optimizer.SGD_MOMENTUM
    elif optimizer is not None:
        parsed.training["optimizer"] = Optimizer.ADAM


_FLASH_FLAGS = ("--use-flash-attn-v2", "--use-flash-attn-builder", "--use-flash-attn",
                "--use-flash-attn-v1", "--use-flash-attn-triton")


def _attention(parsed: ParsedConfig, flags: dict) -> None:
    """Megatron-DeepSpeed runs Megatron's fused scale-mask-softmax, which keeps the s x s
    scores, unless a --use-flash-attn* flag asks for a FlashAttention kernel (deepspeedai
    arguments.py and model/transformer.py; BLOOM's fork has none)."""
    asked = [f for f in _FLASH_FLAGS if f in flags]
    parsed.training["attention"] = AttentionKind.FLASH2 if asked else AttentionKind.UNFUSED
    if asked and asked[0] not in ("--use-flash-attn-v2", "--use-flash-attn-builder"):
        parsed.notes.append(f"{asked[0]}: FlashAttention 1 (or its Triton port), priced at "
                            f"FlashAttention-2's rate")


def _recompute(parsed: ParsedConfig, flags: dict, engine: bool) -> None:
    """--checkpoint-activations recomputes every layer (both forks' GPTModelPipe pass
    activation_checkpoint_interval = --checkpoint-num-layers); deepspeedai's
    --recompute-granularity full with --recompute-method uniform does the same, block is not
    run by the pipeline engine (gpt_model.py: "deepspeed's pipeline doesn't support the block
    recompute method"); selective recomputes attention inside each layer."""
    granularity = _value(flags, "--recompute-granularity")
    method = _value(flags, "--recompute-method")
    if "--checkpoint-activations" in flags:
        parsed.strategy["recompute"] = Recompute.FULL
    elif granularity == "full" and engine and method != "uniform":
        parsed.strategy["recompute"] = Recompute.NONE
        parsed.notes.append(f"--recompute-granularity full with --recompute-method "
                            f"{method or '(none)'}: DeepSpeed's pipeline engine recomputes only "
                            f"with uniform (gpt_model.py); priced without recomputation")
    elif granularity in ("full", "selective"):
        parsed.strategy["recompute"] = Recompute(granularity)
    elif "--recompute-activations" in flags:
        parsed.strategy["recompute"] = Recompute.SELECTIVE
    else:
        parsed.strategy["recompute"] = Recompute.NONE
    if "--deepspeed-activation-checkpointing" in flags and \
            parsed.strategy["recompute"] is not Recompute.FULL:
        parsed.notes.append("--deepspeed-activation-checkpointing has no effect without "
                            "--checkpoint-activations: it only picks DeepSpeed's implementation "
                            "of the checkpoints")


def _partition(parsed: ParsedConfig, flags: dict, num_layers: int, pp: int) -> None:
    """Layers per stage as the pipeline engine places them (`partitioned_layer_counts`)."""
    method = _value(flags, "--pp-partition-method") or PipelinePartition.TRANSFORMER.value
    method = method.strip("'\"")
    known = {m.value for m in profiles.load("deepspeed").pipeline_partitions}
    if method not in known:
        parsed.notes.append(f"--pp-partition-method {method}: the planner places layers as "
                            f"{' or '.join(sorted(known))} only; priced with "
                            f"{PipelinePartition.TRANSFORMER.value}")
        method = PipelinePartition.TRANSFORMER.value
    if pp > 1:
        counts = partitioned_layer_counts(num_layers, pp, PipelinePartition(method))
        if min(counts) < 1:
            parsed.finding("deepspeed_pipeline", f"DeepSpeed leaves a pipeline stage without a "
                           f"layer: {num_layers} layers on {pp} stages with {method}",
                           "use fewer pipeline stages")
        elif len(set(counts)) > 1:
            parsed.strategy["layers_per_stage"] = tuple(counts)


def _zero_stage(parsed: ParsedConfig, flags: dict, script: ShellScript, file: str) -> int:
    """The DeepSpeed config's stage where the script writes it (a here-document, as BLOOM's
    `cat <<EOT > $config_json`) or the file is there to read, else --zero-stage; a key
    DeepSpeed ignores in it is a finding."""
    named = next((f for f in ("--deepspeed_config", "--deepscale_config") if f in flags), None)
    config = _value(flags, named) if named else None
    given = int_flag(flags, "--zero-stage", file)
    path = Path(script.directory) / config if config else None
    written = script.written.get(config or (flags[named].unresolved if named else None) or "")
    if written is not None or (path is not None and path.is_file()):
        where = f"{file}'s here-document" if written is not None else str(path)
        data = load_config(written if written is not None else read_text(path), where)
        check_keys(parsed, data)
        stage = zero_stage(data, where)
        shown = config or flags[named].unresolved
        if given is not None and (given == 3) != (stage == 3):
            # pretrain_gpt.py builds the model under deepspeed.zero.Init(enabled=
            # args.zero_stage == 3): partitioned for a stage DeepSpeed does not run, or not.
            parsed.finding("megatron_flag", f"--zero-stage {given} but {shown} sets "
                           f"zero_optimization.stage {stage}: Megatron-DeepSpeed builds the "
                           f"model for one stage and DeepSpeed runs the other",
                           f"use --zero-stage {stage}")
        elif given is not None and given != stage:
            parsed.notes.append(f"--zero-stage {given} differs from {shown}'s stage {stage}, "
                                f"which DeepSpeed runs (Megatron-DeepSpeed reads --zero-stage "
                                f"only to build the model partitioned at stage 3)")
        return stage
    where = ("no --deepspeed_config" if named is None else
             f"{named} {flags[named].value or flags[named].unresolved or ''} is not next to the "
             f"script (written when the job runs)")
    if given is None:
        parsed.notes.append(f"{file}: {where}, and no --zero-stage: priced with ZeRO stage 0")
        return 0
    if given not in (0, 1, 2, 3):
        raise InputError(f"{file}: --zero-stage {given}: must be 0, 1, 2 or 3")
    parsed.notes.append(f"{file}: {where}: ZeRO stage {given} taken from --zero-stage")
    return given
