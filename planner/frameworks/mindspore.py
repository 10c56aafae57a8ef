"""MindSpore: semi-auto parallel settings for Ascend (HCCL), as MindFormers configures them.

`mindspore_parallel.py` calls `mindspore.set_auto_parallel_context` (parallel mode, device
count, pipeline stages, the parallel optimizer: ZeRO stage 1) and builds MindFormers'
`TransformerOpParallelConfig` (data, model and pipeline parallel degrees, micro-batches,
sequence parallelism) with its `TransformerRecomputeConfig`. Names were checked against
mindspore/python/mindspore/parallel/_auto_parallel_context.py (MindSpore 2.x) and
mindformers/modules/transformer/transformer.py. MindSpore refuses a keyword it does not know
("Set context keyword %s is not recognized!"); the reader says so, and never runs the file.

A plain MindSpore script is read as MindSpore runs it: SEMI_AUTO_PARALLEL has no data-parallel
setting (dp is what the devices leave after pipeline stages and operator shards), AUTO_PARALLEL's
search picks tp and dp when the graph compiles, and values that live in model code (operator
shard strategies, PipelineCell's micro_size) are read when the file writes them as literals and
otherwise named in the notes. MindFormers' run YAML is planner.frameworks.mindformers.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from cost_models.enums import CpComm, Recompute, ZeroStage
from planner.frameworks.base import (LaunchPlan, ParsedConfig, closest, did_you_mean,
                                     header_lines, parse_python)
from planner.errors import InputError
from planner.inputs import profiles
from planner.schemas.framework import FrameworkProfile
from planner.core.rules import (Rule, TargetRule, context_parallel_rule, everywhere, fp8_rule,
                                is_power_of_two, largest_divisor_at_most, num_micro_batches)
from planner.core.problem import Problem
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

PARALLEL_MODES = ("stand_alone", "data_parallel", "hybrid_parallel", "semi_auto_parallel",
                  "auto_parallel")
"""parallel_mode values MindSpore accepts (ParallelContext::set_parallel_mode,
mindspore/ccsrc/utils/parallel_context.cc)."""
SEARCH_MODES = ("recursive_programming", "sharding_propagation", "dynamic_programming")
"""AUTO_PARALLEL strategy searches (kStrategySearchModeList in parallel_context.cc); the
set_auto_parallel_context docstring (mindspore/python/mindspore/context.py, 2.3+) makes
recursive_programming the default and marks dynamic_programming "Not recommended"."""
PIPELINE_CELLS = ("PipelineCell", "Pipeline")
"""mindspore.nn.PipelineCell(network, micro_size) and mindspore.parallel.nn.Pipeline: they cut
each step's batch into micro_size micro-batches ("micro_size must be greater or equal to
pipeline stages", nn/wrap/cell_wrapper.py)."""


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


def _argument(node: ast.Call, position: int, keyword: str) -> Any:
    """A call's argument by position or keyword (None when absent)."""
    for k in node.keywords:
        if k.arg == keyword:
            return _literal(k.value)
    return _literal(node.args[position]) if len(node.args) > position else None


def _calls(text: str, file: str) -> dict[str, Any]:
    tree = parse_python(text, file)
    found: dict[str, Any] = {"micro_size": [], "shard": []}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name in PIPELINE_CELLS:
            found["micro_size"].append(_argument(node, 1, "micro_size"))
        elif name == "shard" and isinstance(func, ast.Attribute):
            # primitive.shard(in_strategy): one tuple of splits per input, e.g. MatMul's
            # ((dp, 1), (1, mp)) (mindspore/ops/primitive.py).
            found["shard"].append(_argument(node, 0, "in_strategy"))
        section = CALLS.get(name, (None,))[0]
        if section is None:
            continue
        found.setdefault(section, {})
        for keyword in node.keywords:
            if keyword.arg is None:
                continue
            found[section][keyword.arg] = _literal(keyword.value)
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


def read_int(fields: dict, key: str, default: int, file: str) -> int:
    """A positive integer setting (`default` when absent), or an InputError naming it."""
    value = fields.get(key, default)
    if isinstance(value, _RunTime):
        raise InputError(f"{file}: {key}: computed when the file runs ({value.source}); "
                         f"planner validate needs a number there")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{file}: {key}: expected a positive integer (got {value!r})")
    return value


def _mode(value: Any) -> str:
    """parallel_mode as MindSpore reads it: a string, or ParallelMode.SEMI_AUTO_PARALLEL."""
    if isinstance(value, _RunTime) and "ParallelMode." in value.source:
        return value.source.rsplit(".", 1)[1].lower()
    return value if isinstance(value, str) else repr(value)


def check_search_mode(parsed: ParsedConfig, mode: str, search_mode: Any, *, key: str,
                      num_devices: int | None) -> str | None:
    """The AUTO_PARALLEL search MindSpore runs (None outside auto_parallel), with the findings
    MindSpore would stop on and the notes on what it ignores."""
    if search_mode is not None and search_mode not in SEARCH_MODES:
        # _auto_parallel_context.py set_strategy_search_mode: ValueError naming the valid ones.
        close = closest(str(search_mode), SEARCH_MODES) or SEARCH_MODES[0]
        parsed.finding("mindspore_search_mode", f"MindSpore stops: {key} '{search_mode}' is "
                       f"not one of {', '.join(SEARCH_MODES)}", f"use {key} '{close}'")
        return None
    if mode != "auto_parallel":
        if search_mode is not None:
            parsed.notes.append(f"{key} '{search_mode}' only works in auto_parallel; "
                                f"{mode} ignores it")
        return None
    search_mode = search_mode or SEARCH_MODES[0]
    # step_auto_parallel.cc InferParallelStrategy: "The recursive auto parallel strategy
    # searching mode requires the device num be the power of 2."
    if search_mode == "recursive_programming" and num_devices is not None \
            and num_devices & (num_devices - 1):
        parsed.finding("mindspore_search_mode", f"MindSpore stops: search_mode "
                       f"recursive_programming needs the device count to be a power of 2 "
                       f"(got {num_devices})", "use sharding_propagation, or a power-of-2 "
                       "device_num")
    if search_mode == "dynamic_programming":
        parsed.notes.append("search_mode dynamic_programming: MindSpore warns that it \"will "
                            "soon not be used\" (step_auto_parallel.cc)")
    return search_mode


def _shard_tp(strategies: list[Any]) -> int | None:
    """The largest split of a non-batch dimension in literal operator shard strategies (the
    operator-level tensor parallelism), or None when any is computed at run time."""
    splits = []
    for strategy in strategies:
        if not isinstance(strategy, tuple) or not all(
                isinstance(dims, tuple) and all(isinstance(d, int) for d in dims)
                for dims in strategy):
            return None
        splits += [d for dims in strategy for d in dims[1:]]
    return max(splits, default=1)


def _model_code(parsed: ParsedConfig, calls: dict, runner: dict, *, pp: int, world: int,
                searched: str | None, problem: Problem, file: str) -> None:
    """Degrees a plain MindSpore script leaves to model code: operator shard strategies (tp),
    PipelineCell's micro_size, the dataset's batch. Data parallelism is what the devices leave
    after pipeline stages and operator shards (SEMI_AUTO_PARALLEL has no dp setting)."""
    shards, sizes = calls["shard"], calls["micro_size"]
    tp = _shard_tp(shards) if shards else None
    if searched is not None and not (searched == "sharding_propagation" and tp is not None):
        parsed.searched_by = f"MindSpore's {searched} search"
        parsed.notes.append(f"parallel_mode auto_parallel: MindSpore's {searched} search picks "
                            "the operator shards (tp) and data parallelism when it compiles "
                            "the graph; the planner cannot know them")
        tp = None
    elif tp is not None:
        parsed.strategy["tp"] = tp
        how = ("sharding_propagation spreads them to the other operators; "
               if searched else "")
        parsed.notes.append(f"tp {tp}: the largest split of a non-batch dimension in this "
                            f"file's operator shard strategies; {how}dp = devices / (pp x tp)"
                            f" = {world} / ({pp} x {tp}) = {max(1, world // (pp * tp))}")
    else:
        tp = 1
        what = ("computed when the file runs" if shards else "set in model code, not in "
                "this file")
        parsed.notes.append(f"operator shard strategies (tp): {what}; the planner assumes "
                            f"tp 1, and dp is what the devices leave: dp = {world} / (pp {pp} "
                            f"x tp 1) = {max(1, world // pp)}")
    micro = read_int(runner, "batch_size", 1, file) if "batch_size" in runner else None
    if micro is not None:
        parsed.strategy["micro_batch"] = micro
    dp = None if tp is None else max(1, world // (pp * tp))
    if pp == 1:
        if micro is not None and dp is not None:
            m = read_int(runner, "gradient_accumulation_steps", 1, file)
            parsed.strategy["global_batch"] = micro * dp * m
        return
    size = next((s for s in sizes if s is not None), None)
    if size is None or isinstance(size, _RunTime):
        what = "computed when the file runs" if sizes else "set in model code, not in this file"
        parsed.notes.append(f"micro-batches (PipelineCell micro_size): {what}; the planner "
                            f"prices the model's global batch ({problem.training.global_batch}"
                            f" samples) in micro-batches of {micro or 1} per data-parallel rank")
        return
    micro_size = read_int({"micro_size": size}, "micro_size", 1, file)
    if dp is None:                    # the search picks dp: the micro-batch count is the file's
        parsed.notes.append(f"PipelineCell micro_size {micro_size}")
        return
    if micro is None:
        micro = max(1, problem.training.global_batch // (dp * micro_size))
        parsed.notes.append(f"PipelineCell micro_size {micro_size}; the batch is the "
                            f"dataset's (model code, not in this file): the planner splits the "
                            f"model's global batch into {micro_size} micro-batches of {micro} "
                            "per data-parallel rank")
    parsed.strategy.update(micro_batch=micro, global_batch=micro * dp * micro_size)


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
    context, parallel = calls.get("context", {}), calls.get("parallel")
    recompute, runner = calls.get("recompute", {}), calls.get("runner", {})
    mode = _mode(context.get("parallel_mode", "stand_alone"))
    if mode not in PARALLEL_MODES:
        parsed.finding("mindspore_mode", f"MindSpore stops: parallel_mode '{mode}' is not one "
                       f"of {', '.join(PARALLEL_MODES)}",
                       f"use parallel_mode '{closest(mode, PARALLEL_MODES) or PARALLEL_MODES[3]}'")
    elif mode not in ("semi_auto_parallel", "auto_parallel", "hybrid_parallel"):
        parsed.finding("mindspore_mode", f"parallel_mode '{mode}' ignores the model-parallel "
                       "shard strategies: only data parallelism runs",
                       "use parallel_mode 'semi_auto_parallel'")
    if "device_num" in context:
        parsed.world_size = read_int(context, "device_num", 1, file)
    world = num_gpus or parsed.world_size or problem.num_gpus
    key = "search_mode" if "search_mode" in context else "auto_parallel_search_mode"
    search = context.get(key)
    if search is None and context.get("sharding_propagation") is True:
        search = "sharding_propagation"       # the 1.x switch search_mode replaced
    searched = check_search_mode(parsed, mode, search, key=key, num_devices=world)
    stages = read_int(context, "pipeline_stages", 1, file)
    pp = read_int(parallel or {}, "pipeline_stage", stages, file)
    if "pipeline_stages" in context and stages != pp:
        parsed.finding("mindspore_pipeline", f"pipeline_stages ({stages}) differs from "
                       f"pipeline_stage ({pp})", f"use {pp} in both")
    parsed.strategy["pp"] = pp
    if parallel is None:
        _model_code(parsed, calls, runner, pp=pp, world=world, searched=searched,
                    problem=problem, file=file)
    else:
        _parallel_config(parsed, parallel, runner, pp=pp, file=file)
    rc = (Recompute.FULL if recompute.get("recompute") is True else
          Recompute.SELECTIVE if recompute.get("select_recompute") else Recompute.NONE)
    offset = calls.get("model", {}).get("offset")
    if isinstance(offset, list) and pp > 1:
        layers = read_offset(parsed, offset, pp=pp, num_layers=problem.model.num_layers,
                             where="model_config.offset", file=file)
        if layers is not None:
            parsed.strategy["layers_per_stage"] = layers
    parsed.strategy.update(
        recompute=rc, zero_stage=ZeroStage.OPTIMIZER_STATES
        if context.get("enable_parallel_optimizer") else ZeroStage.NONE)
    return parsed


def _parallel_config(parsed: ParsedConfig, parallel: dict, runner: dict, *, pp: int,
                     file: str) -> None:
    """The degrees of MindFormers' TransformerOpParallelConfig (every one given or 1)."""
    dp = read_int(parallel, "data_parallel", 1, file)
    tp = read_int(parallel, "model_parallel", 1, file)
    micro = read_int(runner, "batch_size", 1, file)
    if pp > 1:
        m = read_int(parallel, "micro_batch_num", 1, file)
    else:
        m = read_int(runner, "gradient_accumulation_steps", 1, file)
    ep = read_int(parallel, "expert_parallel", 1, file)
    parsed.strategy.update(ep=ep, etp=1 if ep > 1 else tp)   # experts follow model_parallel
    read_context_parallel(parsed, parallel, file)
    parsed.strategy.update(dp=dp, tp=tp, micro_batch=micro, global_batch=micro * dp * m,
                           sequence_parallel=bool(parallel.get("use_seq_parallel", False)))


def read_context_parallel(parsed: ParsedConfig, parallel: dict, file: str) -> None:
    """context_parallel and its algorithm (MindFormers TransformerOpParallelConfig)."""
    cp = read_int(parallel, "context_parallel", 1, file)
    if cp == 1:
        return
    algo = parallel.get("context_parallel_algo", "colossalai_cp")
    kinds = {"colossalai_cp": CpComm.ALL_GATHER, "ulysses_cp": CpComm.A2A,
             "hybrid_cp": CpComm.A2A_P2P}
    if not isinstance(algo, str) or algo not in kinds:
        raise InputError(f"{file}: context_parallel_algo: '{algo}' is not one of "
                         f"{', '.join(kinds)}")
    parsed.strategy.update(cp=cp, cp_comm=kinds[algo])
    if kinds[algo] is CpComm.A2A_P2P:
        parsed.strategy["cp_a2a"] = read_int(parallel, "ulysses_degree_in_cp", 1, file)


def read_offset(parsed: ParsedConfig, offset: list, *, pp: int, num_layers: int, where: str,
                file: str) -> tuple[int, ...] | None:
    """Layers per stage from MindFormers' offset (stage i runs num_layers // pp + offset[i]),
    None with a finding when MindFormers would refuse it."""
    if len(offset) != pp or not all(isinstance(o, int) and not isinstance(o, bool)
                                    for o in offset):
        raise InputError(f"{file}: {where}: expected {pp} integers, one per pipeline stage "
                         f"(got {offset!r})")
    if min(num_layers // pp + o for o in offset) < 1:
        parsed.finding("mindspore_offset", f"offset {offset} leaves a pipeline stage "
                       f"without layers ({num_layers} layers on {pp} stages)",
                       "give every stage at least one layer")
    elif sum(offset) != num_layers % pp:
        parsed.finding("mindspore_offset", f"MindFormers stops: the sum of offset "
                       f"({sum(offset)}) should equal the remainder of num_layers "
                       f"({num_layers}) by pipeline_stage ({pp}), {num_layers % pp}",
                       "make the offsets add up to that remainder")
    else:
        return tuple(num_layers // pp + o for o in offset)
    return None


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
    # MindFormers TransformerOpParallelConfig: micro_batch_num >= pipeline_stage; MindSpore
    # nn.PipelineCell: "micro_size must be greater or equal to pipeline stages".
    Rule.MINDSPORE_MICRO_BATCHES: TargetRule(
        "MindSpore needs at least as many micro-batches as stages",
        lambda p, c: (c.pp > 1) & (num_micro_batches(c) < c.pp),
        lambda p, s: (f"micro_batch_num ({s.global_batch // (s.dp * s.micro_batch)}) must be at "
                      f"least pipeline_stage ({s.pp}) for MindSpore",
                      f"use micro_batch {max(1, s.global_batch // (s.dp * s.pp))} or fewer "
                      "stages")),
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
