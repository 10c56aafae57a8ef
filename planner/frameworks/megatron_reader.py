"""Megatron-LM: the reader of users' own launch scripts and argument files (pretrain_gpt.py
under torchrun or srun), into a strategy, training settings and findings."""

from __future__ import annotations

import re

from cost_models.enums import (CpComm, CudaGraphs, MoeDispatcher, Optimizer, Precision, RankOrder, Recompute,
                               ZeroStage)
from planner.frameworks.base import ParsedConfig
from planner.errors import InputError
from planner.frameworks.megatron_flags import check_flags
from planner.frameworks.megatron_values import (_attention, check_model, int_flag, _float_value,
                                                _fp4, _fp8, _int_value, _low_precision_extras,
                                                _offload, _recompute_details,
                                                recompute_modules,
                                                _training_schedule, _value)
from planner.frameworks import megatron_deepspeed_reader
from planner.frameworks.launchers import read_launch
from planner.frameworks.shell import ShellScript
from planner.schemas.strategy import LaunchTarget
from planner.core.problem import Problem

FSDP_STRATEGIES = {ZeroStage.NONE: "no_shard", ZeroStage.OPTIMIZER_STATES: "optim",
                   ZeroStage.GRADIENTS: "optim_grads", ZeroStage.PARAMETERS: "optim_grads_params"}
"""Megatron-FSDP's --data-parallel-sharding-strategy per ZeRO stage (arguments.py @000c4ac2)."""


def parse_layout_string(text: str, file: str) -> tuple[int, ...]:
    """Decoder layers per virtual stage of a layout string (the grammar of
    PipelineParallelLayerLayout.parse_str_to_list: commas dropped, (..)*n then x*n unrolled)."""

    flat = text.replace(",", "")
    flat = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    flat = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    bad = set(flat) - set("EtmL|")
    if bad:
        raise InputError(f"{file}: --pipeline-model-parallel-layout {text}: invalid layer "
                         f"character {sorted(bad)[0]!r}; known: E, t, m, L")
    return tuple(stage.count("t") for stage in flat.split("|"))


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


CUDA_GRAPH_IMPLS = {"none": CudaGraphs.NONE, "local": CudaGraphs.LAYER,
                    "transformer_engine": CudaGraphs.LAYER,
                    "full_iteration": CudaGraphs.FULL_ITERATION}


def _cuda_graphs(flags, file: str) -> CudaGraphs | None:
    """What the script captures in CUDA graphs: --cuda-graph-impl, or the deprecated
    --enable-cuda-graph (local) and --external-cuda-graph (transformer_engine), and
    --cuda-graph-scope / --cuda-graph-modules full_iteration, which arguments.py migrates to
    --cuda-graph-impl full_iteration (docs/user-guide/features/cuda_graph.md @d98e8a64)."""
    impl = flags.get("--cuda-graph-impl")
    value = None if impl is None else impl.value
    if value is not None and value not in CUDA_GRAPH_IMPLS:
        raise InputError(f"{file}: --cuda-graph-impl: '{value}' is not one of "
                         f"{', '.join(CUDA_GRAPH_IMPLS)}")
    graphs = CUDA_GRAPH_IMPLS.get(value)
    if graphs is None and ("--enable-cuda-graph" in flags or "--external-cuda-graph" in flags):
        graphs = CudaGraphs.LAYER
    for name in ("--cuda-graph-scope", "--cuda-graph-modules"):
        scope = flags.get(name)
        if scope is not None and scope.value == "full_iteration":
            graphs = CudaGraphs.FULL_ITERATION
    return graphs


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


ENTRY = re.compile(r"(?:^|/)(?:pretrain|train|finetune)\w*\.py$")
"""The training program a launch script runs (pretrain_gpt.py, pretrain_mamba.py,
train_rl.py, examples/multimodal/train.py): the flags after it are the ones it parses."""


def parse(text: str, *, file: str, problem: Problem, num_gpus: int | None) -> ParsedConfig:
    """A Megatron-LM launch script or argument file -> its strategy and what Megatron-LM
    itself would refuse or silently change. Only the flags the training program gets are
    read (not its launcher's, nor a helper command's such as a data-preparation script); a
    script that passes --deepspeed, or starts its program with the deepspeed launcher, runs
    Megatron-DeepSpeed (`megatron_deepspeed_reader`)."""
    script = ShellScript(text, file=file)
    entry = script.entry_flags(ENTRY)
    flags = {f.name: f for f in (script.flags() if entry is None else entry)}
    if "--deepspeed" in flags or megatron_deepspeed_reader.launched_by_deepspeed(script, ENTRY):
        return megatron_deepspeed_reader.parse_script(script, flags, file=file, problem=problem,
                                                      num_gpus=num_gpus)
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.MEGATRON)
    read_launch(parsed, script, file=file, problem=problem, num_gpus=num_gpus)
    check_flags(parsed, flags)
    check_model(parsed, flags, problem, file)

    def number(name: str, default: int | None = None) -> int | None:
        return int_flag(flags, name, file, default)

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
             tp_comm_overlap="--tp-comm-overlap" in flags,
             moe_a2a_overlap="--overlap-moe-expert-parallel-comm" in flags,
             moe_dispatcher=_moe_dispatcher(flags))
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
    modules = recompute_modules(parsed, flags, s.get("recompute"))
    if modules is not None:
        s["recompute_modules"] = modules
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
    group = number("--microbatch-group-size-per-virtual-pipeline-stage")
    if group is not None or s.get("vpp", 1) > 1:
        # model_parallel_config.py: microbatch_group_size_per_vp_stage None -> pp. Kept at
        # vpp 1 too, where it does nothing (a note says so).
        s["microbatch_group"] = group or pp
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
    if "--use-tp-pp-dp-mapping" in flags:   # initialize.py: order 'tp-cp-ep-pp-dp'
        s["rank_order"] = RankOrder.TP_CP_EP_PP_DP
    graphs = _cuda_graphs(flags, file)
    if graphs is not None:
        s["cuda_graphs"] = graphs
    nvls = script.variables.get("NCCL_NVLS_ENABLE")
    if nvls in ("0", "1"):          # NCCL docs, env.html: NCCL_NVLS_ENABLE 0 or 1 (default 1)
        s["nvls"] = nvls == "1"
    connections = script.variables.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if fsdp and connections == "1":
        parsed.finding("megatron_environment", "Megatron-LM stops: Megatron-FSDP needs "
                       "CUDA_DEVICE_MAX_CONNECTIONS other than 1",
                       "remove export CUDA_DEVICE_MAX_CONNECTIONS=1")
    if (tp > 1 or cp > 1) and not fsdp and script.mentions("torchrun") and connections != "1":
        what = "tensor" if tp > 1 else "context"
        parsed.finding("megatron_environment", f"Megatron-LM stops on pre-Blackwell GPUs: {what} "
                       f"parallelism needs CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment",
                       "add export CUDA_DEVICE_MAX_CONNECTIONS=1")
    _offload(parsed, flags, file)
    if "--fp8-param-gather" in flags and "--fp8-format" not in flags:
        parsed.strategy["fp8_param_gather"] = True     # without FP8: a note says it does nothing
    if "--fp4-format" in flags:
        _fp4(parsed, flags, fsdp)
    elif "--fp8-format" in flags:
        _fp8(parsed, flags, fsdp)
    elif "--bf16" in flags:
        parsed.training["precision"] = Precision.BF16
    elif "--fp16" in flags:
        parsed.training["precision"] = Precision.FP16
    else:
        parsed.training["precision"] = Precision.FP32
    _low_precision_extras(parsed, flags, file)
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
    if "--use-precision-aware-optimizer" in flags and all(
            _value(flags, flag) in ("bf16", "fp16") for flag in ("--exp-avg-dtype",
                                                                 "--exp-avg-sq-dtype")):
        # arguments.py: the moments' dtypes take effect with the precision-aware optimizer.
        parsed.training["bf16_moments"] = True
    optimizer = _value(flags, "--optimizer")
    if optimizer not in (None, "adam", "sgd"):
        parsed.finding("megatron_unpriced", f"--optimizer {optimizer}: the planner prices Adam "
                       f"or SGD states; priced as adam", "compare with --optimizer adam")
    attention = _attention(parsed, flags)
    if attention is not None:
        parsed.training["attention"] = attention
    if "--seq-length" in flags:
        parsed.training["seq_len"] = number("--seq-length")
    _training_schedule(parsed, flags, s, file)
    return parsed




def _moe_dispatcher(flags) -> MoeDispatcher:
    """--moe-token-dispatcher-type flex with --moe-flex-dispatcher-backend (deepep, its
    default, or hybridep; the deprecated --moe-enable-deepep means deepep), else the
    all-to-all the planner prices (allgather read as alltoall; transformer_config.py)."""
    kind = flags.get("--moe-token-dispatcher-type")
    if kind is None or kind.value != "flex":
        return MoeDispatcher.ALLTOALL
    backend = flags.get("--moe-flex-dispatcher-backend")
    if backend is not None and backend.value == "hybridep":
        return MoeDispatcher.FLEX_HYBRIDEP
    return MoeDispatcher.FLEX_DEEPEP
