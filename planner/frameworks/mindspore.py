"""MindSpore: semi-auto parallel settings for Ascend (HCCL), as MindFormers configures them.

`mindspore_parallel.py` calls `mindspore.set_auto_parallel_context` (parallel mode, device
count, pipeline stages, the parallel optimizer: ZeRO stage 1) and builds MindFormers'
`TransformerOpParallelConfig` (data, model and pipeline parallel degrees, micro-batches,
sequence parallelism) with its `TransformerRecomputeConfig`. Names were checked against
mindspore/python/mindspore/parallel/_auto_parallel_context.py (MindSpore 2.x) and
mindformers/modules/transformer/transformer.py. MindSpore refuses a keyword it does not know
("Set context keyword %s is not recognized!"); the reader says so, and never runs the file.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from cost_models.enums import CpComm, Recompute, ZeroStage
from planner.frameworks.base import (LaunchPlan, ParsedConfig, did_you_mean, header_lines,
                               parse_python)
from planner.errors import InputError
from planner.frameworks import profiles
from planner.schemas.framework import FrameworkProfile
from planner.feasibility.target_rule import (Rule, TargetRule, context_parallel_rule, everywhere,
                                             fp8_rule, is_power_of_two, largest_divisor_at_most,
                                             num_micro_batches)
from planner.inputs.loader import Problem
from planner.schemas.strategy import LaunchTarget

CHECKED_AGAINST = ("mindspore-ai/mindspore mindspore/python/mindspore/parallel/"
                   "_auto_parallel_context.py (2.x); mindspore-lab/mindformers "
                   "mindformers/modules/transformer/transformer.py, configs/llama2 @0e67b43f")

CONTEXT_KEYS = frozenset({
    "device_num", "global_rank", "gradients_mean", "gradient_fp32_sync", "loss_repeated_mean",
    "pipeline_stages", "parallel_mode", "search_mode", "auto_parallel_search_mode",
    "parameter_broadcast", "strategy_ckpt_load_file", "strategy_ckpt_save_file",
    "group_ckpt_save_file", "full_batch", "dataset_strategy", "enable_parallel_optimizer",
    "parallel_optimizer_config", "grad_accumulation_step", "all_reduce_fusion_config",
    "communi_parallel_mode", "optimizer_weight_shard_size",
    "optimizer_weight_shard_aggregated_save", "sharding_propagation", "enable_alltoall",
    "strategy_ckpt_config", "comm_fusion", "pipeline_config", "force_fp32_communication",
    "pipeline_result_broadcast", "auto_pipeline", "dump_local_norm", "dump_local_norm_path",
    "dump_device_local_norm",
})
"""set_auto_parallel_context keywords (_auto_parallel_context.py and the 2.3+ docs)."""
PARALLEL_CONFIG_KEYS = frozenset({
    "data_parallel", "model_parallel", "context_parallel", "expert_parallel", "pipeline_stage",
    "micro_batch_num", "seq_split_num", "recompute", "use_seq_parallel", "optimizer_shard",
    "gradient_aggregation_group", "vocab_emb_dp", "context_parallel_algo",
    "ulysses_degree_in_cp", "mem_coeff", "swap",
})
RECOMPUTE_KEYS = frozenset({
    "recompute", "select_recompute", "parallel_optimizer_comm_recompute",
    "select_comm_recompute", "mp_comm_recompute", "recompute_slice_activation",
    "select_recompute_exclude", "select_comm_recompute_exclude",
})
RUNNER_KEYS = frozenset({"batch_size", "gradient_accumulation_steps", "epochs", "sink_mode",
                         "sink_size"})
CALLS = {"set_auto_parallel_context": ("context", CONTEXT_KEYS),
         "TransformerOpParallelConfig": ("parallel", PARALLEL_CONFIG_KEYS),
         "TransformerRecomputeConfig": ("recompute", RECOMPUTE_KEYS)}


def _call(head: str, fields: dict[str, Any]) -> list[str]:
    return [f"{head}(", *(f"    {k}={v!r}," for k, v in fields.items()), ")"]


CP_ALGORITHMS = {CpComm.ALL_GATHER: "colossalai_cp", CpComm.A2A: "ulysses_cp",
                 CpComm.A2A_P2P: "hybrid_cp", CpComm.P2P: "colossalai_cp"}
"""MindFormers context_parallel_algo per K/V exchange (hybrid_cp and a ring have no mcore
mapping in MindFormers; its rule refuses them)."""


def emit(plan: LaunchPlan) -> dict[str, str]:
    s, p = plan.strategy, plan.problem
    m = plan.num_micro_batches
    context = {"parallel_mode": "semi_auto_parallel", "device_num": p.num_gpus,
               "pipeline_stages": s.pp, "full_batch": True, "gradients_mean": False,
               # The parallel optimizer shards optimizer states over data parallelism.
               "enable_parallel_optimizer": s.zero_stage >= ZeroStage.OPTIMIZER_STATES}
    recompute = {"recompute": s.recompute is Recompute.FULL,
                 "select_recompute": s.recompute is Recompute.SELECTIVE,
                 "parallel_optimizer_comm_recompute": False, "mp_comm_recompute": True,
                 "recompute_slice_activation": False}
    parallel = {"data_parallel": s.dp, "model_parallel": s.tp, "pipeline_stage": s.pp,
                "micro_batch_num": m if s.pp > 1 else 1, "use_seq_parallel": s.sequence_parallel,
                # Megatron-style vocabulary-parallel embedding, as the planner's memory assumes.
                "vocab_emb_dp": False}
    if s.cp > 1:
        # MindFormers TransformerOpParallelConfig: colossalai_cp gathers K/V, ulysses_cp
        # exchanges heads by all-to-all (parallel_core/transformer_config_utils.py).
        parallel["context_parallel"] = s.cp
        parallel["context_parallel_algo"] = CP_ALGORITHMS[s.cp_comm]
    if p.model.is_moe:
        parallel["expert_parallel"] = s.ep     # experts over data-parallel ranks (moe_config)
    runner = {"batch_size": s.micro_batch, "gradient_accumulation_steps": 1 if s.pp > 1 else m}
    lines = [*(f"# {line}" for line in header_lines(plan, "MindSpore", CHECKED_AGAINST)),
             "# Import this module before building the model (MindSpore graph mode, Ascend).",
             "", "import mindspore as ms",
             "from mindformers.modules.transformer import (TransformerOpParallelConfig,",
             "                                             TransformerRecomputeConfig)", "",
             "ms.set_context(mode=ms.GRAPH_MODE, device_target=\"Ascend\")",
             *_call("ms.set_auto_parallel_context", context), "",
             *_call("recompute_config = TransformerRecomputeConfig", recompute), "",
             *_call("parallel_config = TransformerOpParallelConfig", parallel)[:-1],
             "    recompute=recompute_config,", ")", "",
             "# Samples per data-parallel rank per micro-batch; accumulation only without a "
             "pipeline.", f"runner_config = dict(batch_size={s.micro_batch}, "
             f"gradient_accumulation_steps={runner['gradient_accumulation_steps']})", ""]
    if s.layers_per_stage is not None:
        layers = p.model.num_layers
        offset = [n - layers // s.pp for n in s.layers_per_stage]
        lines += ["# Uneven stages (MindFormers LayerSetting): stage i runs num_layers // "
                  "pipeline_stage + offset[i]", "# layers; put offset in your model_config.",
                  f"model_config = dict(offset={offset})", ""]
    return {"mindspore_parallel.py": "\n".join(lines)}


# --------------------------------------------------------------------------- reading

class _RunTime:
    """A value the file computes when it runs (a name, an expression): unknown here."""

    def __init__(self, node: ast.AST) -> None:
        self.source = ast.unparse(node)

    def __repr__(self) -> str:
        return self.source


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _RunTime(node)


def _calls(text: str, file: str) -> dict[str, dict[str, Any]]:
    tree = parse_python(text, file)
    found: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        section = CALLS.get(name, (None,))[0]
        if section is None:
            continue
        for keyword in node.keywords:
            if keyword.arg is None:
                continue
            found.setdefault(section, {})[keyword.arg] = _literal(keyword.value)
    for node in ast.walk(tree):           # runner_config / model_config = dict(...) or {...}
        names = {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}
        if not isinstance(node, ast.Assign) or not names & {"runner_config", "model_config"}:
            continue
        value, key = node.value, "runner" if "runner_config" in names else "model"
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "dict":
            found[key] = {k.arg: _literal(k.value) for k in value.keywords
                          if k.arg is not None}
        elif isinstance(value, ast.Dict):
            found[key] = {_literal(k): _literal(v) for k, v in zip(value.keys, value.values)
                          if k is not None}
    return found


def _int(fields: dict, key: str, default: int, file: str) -> int:
    value = fields.get(key, default)
    if isinstance(value, _RunTime):
        raise InputError(f"{file}: {key}: computed when the file runs ({value.source}); "
                         f"planner validate needs a number there")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{file}: {key}: expected a positive integer (got {value!r})")
    return value


def parse(text: str, *, file: str, problem: Problem, num_gpus: int | None) -> ParsedConfig:
    """A MindSpore/MindFormers parallel setup -> its strategy and what MindSpore refuses."""
    calls = _calls(text, file)
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.MINDSPORE)
    names = {"context": "set_auto_parallel_context", "parallel": "TransformerOpParallelConfig",
             "recompute": "TransformerRecomputeConfig"}
    for section, (keys, call) in {s: (CALLS[n][1], n) for s, n in names.items()}.items():
        for key in calls.get(section, {}):
            if key not in keys:
                parsed.finding("mindspore_unknown_key",
                               f"MindSpore stops: {call} does not know '{key}'"
                               f"{did_you_mean(key, keys)}", f"fix or remove {key}")
    context, parallel = calls.get("context", {}), calls.get("parallel", {})
    recompute, runner = calls.get("recompute", {}), calls.get("runner", {})
    mode = context.get("parallel_mode", "stand_alone")
    if mode not in ("semi_auto_parallel", "auto_parallel", "hybrid_parallel"):
        parsed.finding("mindspore_mode", f"parallel_mode '{mode}' ignores the model-parallel "
                       "shard strategies: only data parallelism runs",
                       "use parallel_mode 'semi_auto_parallel'")
    if "device_num" in context:
        parsed.world_size = _int(context, "device_num", 1, file)
    dp = _int(parallel, "data_parallel", 1, file)
    tp = _int(parallel, "model_parallel", 1, file)
    pp = _int(parallel, "pipeline_stage", _int(context, "pipeline_stages", 1, file), file)
    if "pipeline_stages" in context and _int(context, "pipeline_stages", 1, file) != pp:
        parsed.finding("mindspore_pipeline", f"pipeline_stages ({context['pipeline_stages']}) "
                       f"differs from pipeline_stage ({pp})", f"use {pp} in both")
    micro = _int(runner, "batch_size", 1, file)
    if pp > 1:
        m = _int(parallel, "micro_batch_num", 1, file)
    else:
        m = _int(runner, "gradient_accumulation_steps", 1, file)
    rc = (Recompute.FULL if recompute.get("recompute") is True else
          Recompute.SELECTIVE if recompute.get("select_recompute") else Recompute.NONE)
    offset = calls.get("model", {}).get("offset")
    if isinstance(offset, list) and pp > 1:
        layers = problem.model.num_layers
        if len(offset) != pp or not all(isinstance(o, int) and not isinstance(o, bool)
                                        for o in offset):
            raise InputError(f"{file}: model_config.offset: expected {pp} integers, one per "
                             f"pipeline stage (got {offset!r})")
        if min(layers // pp + o for o in offset) < 1:
            parsed.finding("mindspore_offset", f"offset {offset} leaves a pipeline stage "
                           f"without layers ({layers} layers on {pp} stages)",
                           "give every stage at least one layer")
        elif sum(offset) != layers % pp:
            parsed.finding("mindspore_offset", f"MindFormers stops: the sum of offset "
                           f"({sum(offset)}) should equal the remainder of num_layers "
                           f"({layers}) by pipeline_stage ({pp}), {layers % pp}",
                           "make the offsets add up to that remainder")
        else:
            parsed.strategy["layers_per_stage"] = tuple(layers // pp + o for o in offset)
    ep = _int(parallel, "expert_parallel", 1, file)
    parsed.strategy.update(ep=ep, etp=1 if ep > 1 else tp)   # experts follow model_parallel
    cp = _int(parallel, "context_parallel", 1, file)
    if cp > 1:
        algo = parallel.get("context_parallel_algo", "colossalai_cp")
        kinds = {"colossalai_cp": CpComm.ALL_GATHER, "ulysses_cp": CpComm.A2A,
                 "hybrid_cp": CpComm.A2A_P2P}
        if algo not in kinds:
            raise InputError(f"{file}: context_parallel_algo: '{algo}' is not one of "
                             f"{', '.join(kinds)}")
        parsed.strategy.update(cp=cp, cp_comm=kinds[algo])
        if kinds[algo] is CpComm.A2A_P2P:
            parsed.strategy["cp_a2a"] = _int(parallel, "ulysses_degree_in_cp", 1, file)
    parsed.strategy.update(
        dp=dp, tp=tp, pp=pp, micro_batch=micro, global_batch=micro * dp * m,
        sequence_parallel=bool(parallel.get("use_seq_parallel", False)), recompute=rc,
        zero_stage=ZeroStage.OPTIMIZER_STATES if context.get("enable_parallel_optimizer")
        else ZeroStage.NONE)
    return parsed


# --------------------------------------------------------------------------- profile

def profile() -> FrameworkProfile:
    """Features, overlaps and constants of MindSpore (profiles/mindspore.yaml, with sources)."""
    return profiles.load("mindspore")


# --------------------------------------------------------------------------- rules

RULES: dict[Rule, TargetRule] = {
    # mindformers multi_token_prediction.py: "Not Support FP8 Training."
    Rule.MINDSPORE_FP8: fp8_rule("MindSpore", profile().fp8,
                                 " (MindFormers does not train in FP8)"),
    Rule.MINDSPORE_CONTEXT_PARALLEL: context_parallel_rule("MindSpore",
        profile().context_parallel),
    # MindSpore operator_info.cc: shard strategy values must be powers of two ("Invalid
    # Strategy value it is not the power of 2"; newer releases check only on power-of-two
    # device counts). The planner's own rule for tp and pp, as the user asked.
    Rule.MINDSPORE_POWER_OF_TWO: TargetRule(
        "MindSpore needs tp and pp to be powers of two",
        lambda p, c: ~(is_power_of_two(c.tp) & is_power_of_two(c.pp)),
        lambda p, s: (f"tp ({s.tp}) and pp ({s.pp}) must be powers of two for MindSpore: it "
                      "refuses other shard strategies (\"the value of strategy must be the power "
                      "of 2\")", "use powers of two for tp and pp")),
    # MindSpore device_manager.cc: device_num must be divisible by 8, or equal to 1, 2 or 4.
    Rule.MINDSPORE_DEVICE_NUM: TargetRule(
        "MindSpore's device_num must be 1, 2, 4 or a multiple of 8",
        lambda p, c: everywhere(c, p.num_gpus % 8 != 0 and p.num_gpus not in (1, 2, 4)),
        lambda p, s: (f"device_num ({p.num_gpus}) must be 1, 2, 4 or a multiple of 8 for "
                      f"MindSpore", f"use {max(8, p.num_gpus // 8 * 8)} devices")),
    # MindFormers TransformerOpParallelConfig: micro_batch_num >= pipeline_stage.
    Rule.MINDSPORE_MICRO_BATCHES: TargetRule(
        "MindSpore needs at least as many micro-batches as stages",
        lambda p, c: (c.pp > 1) & (num_micro_batches(c) < c.pp),
        lambda p, s: (f"micro_batch_num ({s.global_batch // (s.dp * s.micro_batch)}) must be at "
                      f"least pipeline_stage ({s.pp}) for MindSpore",
                      f"use micro_batch {max(1, s.global_batch // (s.dp * s.pp))} or fewer "
                      "stages")),
    Rule.MINDSPORE_INTERLEAVED: TargetRule(
        "the emitted MindSpore config has no interleaved pipeline",
        lambda p, c: c.vpp > 1,
        lambda p, s: (f"vpp {s.vpp}: the emitted MindSpore config runs one chunk per stage",
                      "use vpp 1")),
    Rule.MINDSPORE_ZERO: TargetRule(
        "MindSpore's parallel optimizer is ZeRO stage 1",
        lambda p, c: c.zero >= 2,
        lambda p, s: (f"zero_stage {int(s.zero_stage)}: MindSpore's parallel optimizer "
                      "(enable_parallel_optimizer) shards optimizer states, ZeRO stage 1",
                      "use zero_stage 1")),
    Rule.MINDSPORE_HSDP: TargetRule(
        "the emitted MindSpore config shards over all data-parallel ranks",
        lambda p, c: c.shard != c.dp,
        lambda p, s: (f"dp_shard {s.dp_shard}: the emitted MindSpore config shards the "
                      "optimizer over every data-parallel rank", "leave dp_shard out")),
    # MindSpore moe.py (_check_moe_config): "data_parallel must be divisible by
    # expert_parallel"; experts are spread over the data-parallel ranks only.
    Rule.MINDSPORE_EXPERT_PARALLEL: TargetRule(
        "MindSpore's expert_parallel must divide data_parallel",
        lambda p, c: c.dp % c.ep != 0,
        lambda p, s: (f"expert_parallel ({s.ep}) must divide data_parallel ({s.dp}): MindSpore "
                      "spreads experts over data-parallel ranks",
                      f"use ep {largest_divisor_at_most(math.gcd(s.dp, p.model.num_experts), s.ep)}")),
}
