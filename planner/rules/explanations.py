"""What `validate` prints when one strategy breaks a planner rule: a sentence with the
numbers, and a concrete fix. Each framework's own rules carry theirs (`TargetRule.explain`);
`planner.rules.gate.EXPLAIN` gathers both.
"""

from __future__ import annotations

import math
from typing import Callable

from cost_models.enums import (CpComm, Fp8Recipe, MicroBatchGroups, PipelineSchedule,
                               RankOrder, ZeroStage)
from cost_models.pipeline import schedule_group
from planner.core.rules import Rule, largest_divisor_at_most
from planner.core.problem import Problem
from planner.schemas.strategy import Strategy


def _with_cp(s: Strategy, outer: str) -> tuple[str, str, int]:
    """('tp * cp * pp', '8 * 4 * 2', 64) for tp, cp and an `outer` degree; cp left out at 1."""
    names = ("tp", "cp", outer) if s.cp > 1 else ("tp", outer)
    values = [getattr(s, n) for n in names]
    return " * ".join(names), " * ".join(str(v) for v in values), math.prod(values)


def _explain_gpu_count(problem: Problem, s: Strategy) -> tuple[str, str]:
    n = problem.num_gpus
    names, values, model_parallel = _with_cp(s, "pp")
    message = (f"dp * {names} ({s.dp} * {values} = {s.dp * model_parallel}) must equal the "
               f"number of GPUs ({n})")
    if n % model_parallel == 0:
        fix = f"use dp {n // model_parallel}"
    else:
        fix = f"choose {names} that divides {n}, then dp = {n} / ({names})"
    return message, fix


def _explain_tp_divides_heads(problem: Problem, s: Strategy) -> tuple[str, str]:
    counts = problem.model.tp_head_counts
    bad = [c for c in counts if c % s.tp]
    names = _head_count_names(problem)
    which = ", ".join(f"{names.get(c, 'a head count')} ({c})" for c in bad)
    message = f"tp ({s.tp}) must divide {which}: tensor parallelism splits attention by heads"
    tp = largest_divisor_at_most(math.gcd(*counts), s.tp)
    fix = f"use tp {tp}"
    if problem.num_gpus % (tp * s.pp) == 0:
        fix += f" (dp {problem.num_gpus // (tp * s.pp)})"
    return message, fix


def _head_count_names(problem: Problem) -> dict[int, str]:
    names: dict[int, str] = {}
    for b in problem.model.blocks:
        if b.kind == "transformer":
            names.setdefault(b.num_heads, "num_heads")
            names.setdefault(b.kv_heads, "num_kv_heads")
        elif b.kind == "evoformer":
            names.setdefault(b.num_pair_heads, "num_pair_heads")
            names.setdefault(b.num_msa_heads, "num_msa_heads")
    return names


def _explain_tp_within_node(problem: Problem, s: Strategy) -> tuple[str, str]:
    node = problem.cluster.nvlink_gpus
    domain = problem.cluster.nvlink_domain is not None
    message = (f"tp ({s.tp}) exceeds {'nvlink_domain' if domain else 'gpus_per_node'} "
               f"({node}): tensor parallelism must stay inside "
               f"{'its NVLink domain' if domain else 'a node'}")
    heads = math.gcd(s.tp, *problem.model.tp_head_counts)    # a tp the heads allow too
    if s.tp % node == 0 and heads % node == 0:
        fix = f"use tp {node} and pp {s.pp * s.tp // node}"
    else:
        fix = f"use tp {largest_divisor_at_most(heads, node)}"
    return message, fix + " (or allow it with --cross-node-tp)"


def _explain_pp_divides_layers(problem: Problem, s: Strategy) -> tuple[str, str]:
    layers = problem.model.num_layers
    chunks = s.pp * s.vpp
    what = f"pp * vpp ({s.pp} * {s.vpp} = {chunks})" if s.vpp > 1 else f"pp ({s.pp})"
    if chunks > layers:
        message = f"{what} exceeds num_layers ({layers}): every pipeline chunk needs a layer"
    else:
        message = f"num_layers ({layers}) must be divisible by {what} for an even split"

    def nearest(vpp: int) -> int | None:
        # The nearest pp that splits the layers evenly and, with the same tp, divides the GPUs.
        options = [p for p in range(1, layers + 1) if layers % (p * vpp) == 0
                   and problem.num_gpus % (s.tp * p) == 0 and (vpp == 1 or p > 1)]
        return min(options, key=lambda p: (abs(p - s.pp), p)) if options else None

    pp = nearest(s.vpp)
    if pp is not None and pp != s.pp:
        fix = f"use pp {pp} (dp {problem.num_gpus // (s.tp * pp)})"
    else:
        pp = nearest(1) or 1
        fix = "use vpp 1" + (f" and pp {pp} (dp {problem.num_gpus // (s.tp * pp)})"
                             if pp != s.pp else "")
    if chunks <= layers:
        fix += ", or give layers_per_stage"
    return message, fix


def _explain_batch_divisible(problem: Problem, s: Strategy) -> tuple[str, str]:
    per = s.dp * s.micro_batch
    message = (f"global_batch ({s.global_batch}) must be divisible by dp * micro_batch "
               f"({s.dp} * {s.micro_batch} = {per})")
    if s.global_batch % s.dp == 0:
        mb = largest_divisor_at_most(s.global_batch // s.dp, s.micro_batch)
        fix = f"use micro_batch {mb}"
    else:
        lower = s.global_batch // per * per
        fix = f"use global_batch {lower + per}" + (f" or {lower}" if lower else "")
    return message, fix


def _explain_pipeline_schedule(problem: Problem, s: Strategy) -> tuple[str, str]:
    fw = problem.framework
    name = s.pipeline_schedule.value
    if s.pipeline_schedule not in fw.pipeline_schedules:
        offered = ", ".join(x.value for x in fw.pipeline_schedules)
        return (f"pipeline_schedule {name}: {fw.description} runs {offered} only (the "
                f"zero-bubble schedules are torch.distributed.pipelining's, in torchtitan)",
                "use pipeline_schedule 1f1b, or framework torchtitan")
    if s.pipeline_schedule is PipelineSchedule.ZERO_BUBBLE and s.vpp < 2:
        return (f"pipeline_schedule zero_bubble (InterleavedZeroBubble) is a multi-stage "
                f"schedule: torchtitan needs at least 2 stages per rank, and vpp is {s.vpp}",
                "use vpp 2 or more")
    if s.pipeline_schedule is not PipelineSchedule.DUALPIPEV or s.vpp != 2:
        return (f"pipeline_schedule {name} places exactly 2 stages on each rank (a V), and "
                f"vpp is {s.vpp} (torch.distributed.pipelining)", "use vpp 2")
    m = s.global_batch // (s.dp * s.micro_batch)
    return (f"pipeline_schedule dualpipev needs at least as many micro-batches as stages "
            f"(2 * pp = {2 * s.pp}), and a step has {m}",
            f"use a micro_batch or global_batch giving at least {2 * s.pp} micro-batches")


def _explain_interleaved_schedule(problem: Problem, s: Strategy) -> tuple[str, str]:
    if s.pp < 2:
        return (f"the interleaved schedule (vpp {s.vpp}) needs a pipeline, but pp is {s.pp}",
                "use vpp 1")
    m = s.global_batch // (s.dp * s.micro_batch)
    groups = problem.framework.micro_batch_groups
    own = int(schedule_group(pp=s.pp, num_micro_batches=m, groups=groups))
    if groups is MicroBatchGroups.ROUNDS and own == 0 and m >= s.pp:
        rounds = m // s.pp
        return (f"the interleaved schedule runs the micro-batches in {rounds} equal rounds "
                f"(micro-batches // pp), which must divide the {m} micro-batches "
                "(torch.distributed.pipelining)",
                "use vpp 1, or a micro_batch or global_batch that makes global_batch / (dp * "
                f"micro_batch) a multiple of {s.pp} or of its rounds")
    if groups is MicroBatchGroups.PP or own == 0:
        need, fix = (("divisible by", f"a multiple of {s.pp}") if groups is MicroBatchGroups.PP
                     else ("at least", f"at least {s.pp}"))
        return (f"with the interleaved schedule (vpp {s.vpp}) the number of micro-batches ({m}) "
                f"must be {need} pp ({s.pp})",
                "use vpp 1, or a micro_batch or global_batch that makes global_batch / (dp * "
                f"micro_batch) {fix}")
    group = s.microbatch_group or s.pp
    if groups is MicroBatchGroups.ROUNDS:
        return (f"the interleaved schedule runs {m} micro-batches on pp {s.pp} in rounds of "
                f"{own}, not in groups of {group}", "leave microbatch_group unset")
    return (f"the interleaved schedule cannot run {m} micro-batches on pp {s.pp} in groups of "
            f"{group} (a group holds pp to {m} micro-batches, and the last one all of its "
            f"group or at least pp)",
            f"use microbatch_group {own} (Megatron-LM "
            f"--microbatch-group-size-per-virtual-pipeline-stage {own}), or vpp 1")


def _explain_parameter_server_zero(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"dp_comm parameter_server keeps whole gradients on the servers and cannot be "
            f"combined with zero_stage {int(s.zero_stage)}",
            "use zero_stage 0, or dp_comm all_reduce")


def _explain_dp_shard(problem: Problem, s: Strategy) -> tuple[str, str]:
    if s.dp_shard is not None and s.dp % s.dp_shard:
        return (f"dp_shard ({s.dp_shard}) must divide dp ({s.dp}): HSDP replicates dp / dp_shard "
                f"shard groups", f"use dp_shard {largest_divisor_at_most(s.dp, s.dp_shard)}")
    return (f"dp_shard {s.dp_shard} with zero_stage 0: there is nothing to shard",
            "use zero_stage 1 or more, or leave dp_shard out")


EXPLAIN: dict[Rule, Callable[[Problem, Strategy], tuple[str, str]]] = {
    Rule.GPU_COUNT: _explain_gpu_count,
    Rule.TP_DIVIDES_HEADS: _explain_tp_divides_heads,
    Rule.TP_WITHIN_NODE: _explain_tp_within_node,
    Rule.PP_DIVIDES_LAYERS: _explain_pp_divides_layers,
    Rule.BATCH_DIVISIBLE: _explain_batch_divisible,
    Rule.INTERLEAVED_SCHEDULE: _explain_interleaved_schedule,
    Rule.PIPELINE_SCHEDULE: _explain_pipeline_schedule,
    Rule.PARAMETER_SERVER_ZERO: _explain_parameter_server_zero,
    Rule.DP_SHARD: _explain_dp_shard,
}


def _explain_target_parameter_server(problem: Problem, s: Strategy) -> tuple[str, str]:
    return ("dp_comm parameter_server has no launch target: every framework here exchanges "
            "gradients with collectives", "use dp_comm all_reduce")


EXPLAIN[Rule.TARGET_PARAMETER_SERVER] = _explain_target_parameter_server


def _explain_ep_divides_experts(problem: Problem, s: Strategy) -> tuple[str, str]:
    experts = problem.model.num_experts
    if experts == 1:
        return (f"ep {s.ep} on a dense model: expert parallelism splits the routed experts of "
                f"MoE layers, and this model has none", "use ep 1")
    return (f"ep ({s.ep}) must divide the routed experts ({experts}): each expert-parallel rank "
            f"holds experts / ep of them", f"use ep {largest_divisor_at_most(experts, s.ep)}")


def _explain_expert_folding(problem: Problem, s: Strategy) -> tuple[str, str]:
    etp = s.expert_tp
    names, values, folded = _with_cp(s, "dp")
    message = (f"etp * ep ({etp} * {s.ep} = {etp * s.ep}) must divide {names} ({values} "
               f"= {folded}): the expert layers use etp x ep x edp of the same GPUs")
    if folded % etp:
        return message, f"use etp {math.gcd(folded, etp)}"
    room = math.gcd(folded // etp, problem.model.num_experts)
    return message, f"use ep {largest_divisor_at_most(room, s.ep)}"


def _explain_moe_sequence_parallel(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"sequence_parallel false with tp {s.tp} on an MoE model: Megatron-Core's token "
            f"dispatcher routes each TP rank's sequence shard and refuses to train without "
            f"sequence parallelism", "use sequence_parallel true")


def _explain_cp_sequence(problem: Problem, s: Strategy) -> tuple[str, str]:
    seq = problem.training.seq_len
    if seq % (2 * s.cp):
        message = (f"seq_len ({seq}) must be divisible by 2 * cp ({2 * s.cp}): causal context "
                   f"parallelism deals each rank two of 2 * cp equal chunks")
    else:
        message = (f"each CP rank's {seq // s.cp} tokens must split over tp ({s.tp}) with "
                   f"sequence parallelism")
    good = [c for c in range(s.cp, 0, -1)
            if seq % (2 * c) == 0 and (not s.sequence_parallel or (seq // c) % s.tp == 0)]
    fix = f"use cp {good[0]}" if good and good[0] > 1 else "use cp 1"
    step = math.lcm(2 * s.cp, s.cp * s.tp if s.sequence_parallel else 1)
    return message, fix + f", or a seq_len that is a multiple of {step}"


def _explain_attention_kernel(problem: Problem, s: Strategy) -> tuple[str, str]:
    return ("attention flash2 with attention sinks: FlashAttention-2 has no learnable softmax "
            "offset (Transformer Engine turns it off for sinks; PyTorch SDPA has none)",
            "run with --attention flash (cuDNN attention, Transformer Engine's kernel for "
            "sinks) or --attention unfused (training.attention)")


def _explain_cp_fused_attention(problem: Problem, s: Strategy) -> tuple[str, str]:
    if problem.model.has_evoformer:
        return (f"cp {s.cp} on a model with Evoformer blocks: their pair attention has no "
                f"context parallelism", "use cp 1")
    return (f"cp {s.cp} with unfused attention: context parallelism runs inside fused "
            f"attention kernels (Megatron-LM: TEDotProductAttention only)",
            "run with --attention flash (training.attention), or use cp 1")


def _explain_cp_all_to_all(problem: Problem, s: Strategy) -> tuple[str, str]:
    if s.cp_comm is CpComm.A2A_P2P and not (1 < s.context_a2a < s.cp
                                            and s.cp % s.context_a2a == 0):
        return (f"cp_a2a ({s.context_a2a}) must divide cp ({s.cp}) and lie strictly between 1 "
                f"and cp: a2a+p2p runs an all-to-all inside groups of cp_a2a and a ring across "
                f"them", "use cp_comm p2p or a2a" if s.cp < 4 else f"use cp_a2a {s.cp // 2}")
    a2a = s.cp if s.cp_comm is CpComm.A2A else s.context_a2a
    heads = problem.model.context_parallel_heads
    per_rank = [h // s.tp for h in heads]
    bad = [h for h in per_rank if h % a2a]
    message = (f"the all-to-all over {a2a} CP ranks splits each TP rank's attention heads "
               f"({', '.join(str(h) for h in per_rank)} with tp {s.tp}), and {bad[0]} is not "
               f"divisible by {a2a}")
    return message, "use cp_comm p2p (ring attention has no head bound), or a smaller cp"


def _explain_cp_attention_variant(problem: Problem, s: Strategy) -> tuple[str, str]:
    if problem.model.has_attention_sinks and s.cp_comm is not CpComm.A2A:
        return (f"cp_comm {s.cp_comm.value} with attention sinks: Transformer Engine's context "
                f"parallelism supports a softmax with sinks only with a2a", "use cp_comm a2a")
    return (f"cp_comm {s.cp_comm.value} with sliding-window layers: Transformer Engine's ring "
            f"attention has no sliding window", "use cp_comm all_gather or a2a")


def _explain_target_context_parallel(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"cp {s.cp}: a torchrun script (plain PyTorch DDP/FSDP) has no context parallelism",
            "use cp 1, or emit for megatron, torchtitan or deepspeed")


def _explain_target_rank_order(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"rank_order {RankOrder.TP_CP_EP_PP_DP.value}: only Megatron-LM builds its process "
            f"groups with data parallelism outermost (--use-tp-pp-dp-mapping); torchtitan's "
            f"device mesh and DeepSpeed's topology put the pipeline outermost",
            f"use rank_order {RankOrder.TP_CP_EP_DP_PP.value}, or emit for megatron")


def _explain_target_pipeline_schedule(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"pipeline_schedule {s.pipeline_schedule.value}: only torchtitan runs the "
            f"zero-bubble schedules (torch.distributed.pipelining); Megatron-LM, DeepSpeed and "
            f"MindSpore run 1F1B", "use pipeline_schedule 1f1b, or emit for torchtitan")


def _explain_target_recompute_modules(problem: Problem, s: Strategy) -> tuple[str, str]:
    names = ", ".join(m.value for m in s.recompute_modules or ())
    return (f"recompute_modules {names}: only Megatron-LM recomputes chosen submodules "
            f"(--recompute-modules); torchtitan's selective activation checkpointing is per op "
            f"(a save list of matmuls and attention) or every N-th layer, MindSpore's "
            f"select_recompute per operator, DeepSpeed's and plain PyTorch's checkpointing per "
            f"layer",
            "leave recompute_modules out (the framework's own selective recompute), use "
            "recompute full, or emit for megatron")


def _explain_rank_order_experts(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"rank_order {RankOrder.TP_CP_EP_PP_DP.value} with pp {s.pp}: the expert "
            f"data-parallel size ({s.edp}) must equal dp ({s.dp}) (Megatron-LM asserts it "
            f"when the pipeline is not outermost)",
            f"use etp * ep = tp * cp ({s.tp * s.cp}), or rank_order "
            f"{RankOrder.TP_CP_EP_DP_PP.value}")


def _explain_moe_flex_hardware(problem: Problem, s: Strategy) -> tuple[str, str]:
    c = problem.cluster
    return (f"moe_dispatcher {s.moe_dispatcher.value} on {c.gpu.name} ({c.intra_node.kind.value} "
            f"inside a node, {c.inter_node.kind.value} between nodes): DeepEP and HybridEP run "
            f"on NVIDIA Hopper or later GPUs over NVLink, with RDMA (InfiniBand or RoCE) "
            f"between nodes", "use moe_dispatcher alltoall")


def _explain_target_moe_dispatcher(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"moe_dispatcher {s.moe_dispatcher.value}: only Megatron-LM's launch flags select "
            f"the flex dispatcher (--moe-token-dispatcher-type flex)",
            "use moe_dispatcher alltoall, or emit for megatron only")


def _explain_target_bf16_moments(problem: Problem, s: Strategy) -> tuple[str, str]:
    return ("bf16_moments: only Megatron-LM's launch flags keep Adam's moments in bf16 "
            "(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)",
            "set training.bf16_moments false, or emit for megatron only")


def _explain_fp8_hardware(problem: Problem, s: Strategy) -> tuple[str, str]:
    gpu, t = problem.cluster.gpu, problem.training
    runs = tuple(problem.cluster.efficiency.fp8_gemm_efficiency)
    if t.fp8_recipe is Fp8Recipe.NVFP4 and not gpu.runs_recipe(t.fp8_recipe):
        fix = "use precision fp8" if runs else "use precision bf16"
        return (f"precision nvfp4: {gpu.name} has no FP4 tensor cores (NVFP4 training needs "
                f"Blackwell: B200, GB200, B300, GB300)", fix)
    if gpu.peak_tflops.fp8 is None or not runs:
        return (f"precision fp8: {gpu.name} has no FP8 tensor cores", "use precision bf16")
    return (f"fp8_recipe {t.fp8_recipe.value}: {gpu.name} does not run it (it runs "
            f"{', '.join(r.value for r in runs)})", f"use fp8_recipe {runs[0].value}")


def _explain_fp8_param_gather(problem: Problem, s: Strategy) -> tuple[str, str]:
    fp8 = problem.framework.fp8
    recipes = fp8.param_gather_recipes if fp8 is not None else ()
    if s.zero_stage < ZeroStage.OPTIMIZER_STATES:
        return ("fp8_param_gather with zero_stage 0: FP8 parameters are gathered from sharded "
                "states (Megatron-LM: --fp8-param-gather needs --use-distributed-optimizer)",
                "use zero_stage 1 or more, or fp8_param_gather false")
    recipe = problem.training.fp8_recipe
    return (f"fp8_param_gather with fp8_recipe {recipe.value}: {problem.framework.name} gathers "
            f"FP8 parameters only with {', '.join(r.value for r in recipes) or 'no recipe'}",
            "use fp8_param_gather false")


def _explain_target_fp8(problem: Problem, s: Strategy) -> tuple[str, str]:
    return ("precision fp8: a torchrun script (plain PyTorch) has no FP8 setting",
            "use precision bf16, or emit for megatron or torchtitan")


def _explain_target_expert_parallel(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"ep {s.ep}: a torchrun script (plain PyTorch DDP/FSDP) has no expert parallelism",
            "use ep 1, or emit for megatron or torchtitan")


def _explain_target_interleaved(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"vpp {s.vpp}: DeepSpeed's pipeline engine, the emitted MindSpore config and a "
            f"plain torchrun script run one chunk per stage",
            "use vpp 1, or emit for megatron or torchtitan")


def _explain_target_expert_tp(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"etp {s.expert_tp} with tp {s.tp}: DeepSpeed and MindSpore shard experts either "
            f"not at all or like the dense layers", f"use etp 1 or etp {s.tp}")


def _explain_offload_host(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"CPU offload on {problem.cluster.name}: its cluster file has no host block (host "
            f"link and memory), so host copies cannot be priced",
            "add host: {link, link_gb_per_s, link_fraction, memory_gib, memory_gb_per_s, "
            "memory_fraction} to the cluster file (see `planner clusters`), or offload nothing")


def _explain_offload_framework(problem: Problem, s: Strategy) -> tuple[str, str]:
    fw = problem.framework
    o = fw.offload
    if o is None:
        return (f"CPU offload: {fw.description} keeps everything on the GPU",
                "offload nothing, or use a framework that offloads (megatron, deepspeed, "
                "torchtitan)")
    if s.optimizer_offload and not o.optimizer:
        return (f"optimizer_offload: {fw.description} has no optimizer offload",
                "use optimizer_offload 0")
    if s.optimizer_offload and s.zero_stage < o.optimizer_min_zero:
        return (f"optimizer_offload with zero_stage {int(s.zero_stage)}: {fw.description} "
                f"offloads the optimizer from ZeRO stage {o.optimizer_min_zero} up",
                f"use zero_stage {o.optimizer_min_zero} or more")
    if 0 < s.optimizer_offload < 1 and not o.optimizer_fraction:
        return (f"optimizer_offload {s.optimizer_offload:g}: {fw.description} offloads all of "
                f"the optimizer states or none", "use optimizer_offload 1")
    if s.param_offload and not o.params:
        return (f"param_offload: {fw.description} keeps the parameters on the GPU",
                "use param_offload false")
    layers = problem.model.num_layers
    n = s.activation_offload_layers
    if o.activations is None:
        return (f"activation_offload_layers {n}: {fw.description} has no activation offload",
                "use activation_offload_layers 0")
    if o.activations == "partial":
        keep = layers // s.pp - 1
        return (f"activation_offload_layers {n}: {fw.description} keeps at least one of a "
                f"stage's {layers // s.pp} layers on the GPU",
                f"use activation_offload_layers {keep}" if keep > 0 else
                "use activation_offload_layers 0")
    return (f"activation_offload_layers {n}: {fw.description} offloads the checkpoint of "
            f"every layer, with recompute full", f"use recompute full and "
            f"activation_offload_layers {-(-layers // s.pp)}")


def _explain_param_offload_zero3(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"param_offload with zero_stage {int(s.zero_stage)}: only ZeRO-3 / FSDP shards the "
            f"parameters it would keep in host memory", "use zero_stage 3")


EXPLAIN.update({
    Rule.OFFLOAD_HOST: _explain_offload_host,
    Rule.OFFLOAD_FRAMEWORK: _explain_offload_framework,
    Rule.PARAM_OFFLOAD_ZERO3: _explain_param_offload_zero3,
    Rule.EP_DIVIDES_EXPERTS: _explain_ep_divides_experts,
    Rule.EXPERT_FOLDING: _explain_expert_folding,
    Rule.MOE_SEQUENCE_PARALLEL: _explain_moe_sequence_parallel,
    Rule.CP_SEQUENCE: _explain_cp_sequence,
    Rule.ATTENTION_KERNEL: _explain_attention_kernel,
    Rule.CP_FUSED_ATTENTION: _explain_cp_fused_attention,
    Rule.CP_ALL_TO_ALL: _explain_cp_all_to_all,
    Rule.TARGET_CONTEXT_PARALLEL: _explain_target_context_parallel,
    Rule.CP_ATTENTION_VARIANT: _explain_cp_attention_variant,
    Rule.TARGET_EXPERT_PARALLEL: _explain_target_expert_parallel,
    Rule.TARGET_EXPERT_TP: _explain_target_expert_tp,
    Rule.TARGET_INTERLEAVED: _explain_target_interleaved,
    Rule.FP8_HARDWARE: _explain_fp8_hardware,
    Rule.FP8_PARAM_GATHER: _explain_fp8_param_gather,
    Rule.TARGET_FP8: _explain_target_fp8,
    Rule.TARGET_RANK_ORDER: _explain_target_rank_order,
    Rule.TARGET_PIPELINE_SCHEDULE: _explain_target_pipeline_schedule,
    Rule.TARGET_RECOMPUTE_MODULES: _explain_target_recompute_modules,
    Rule.RANK_ORDER_EXPERTS: _explain_rank_order_experts,
    Rule.MOE_FLEX_HARDWARE: _explain_moe_flex_hardware,
    Rule.TARGET_MOE_DISPATCHER: _explain_target_moe_dispatcher,
    Rule.TARGET_BF16_MOMENTS: _explain_target_bf16_moments,
})
