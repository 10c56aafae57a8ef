"""Published, measured training runs (bench/data/*.yaml) as planner problems, and the model's
error on each.

Every file is one source (a paper table, a README, a framework's performance page) with its
provenance; every run states its GPUs, model, batch, precision, strategy and what was measured.
Unknown strategy fields are filled by one rule for all runs, never per row:

- micro_batch: 1; vpp: the fastest that fits (1 where the framework cannot interleave);
- sequence_parallel: on when tp > 1 (Megatron-Core's and NeMo's recipes);
- zero_stage: 1 (the distributed optimizer) for Megatron runs, else 0;
- recompute: the cheapest of none, selective, full whose memory fits (what a user does);
- overlap_grad_reduce "unknown": the framework profile's default;
- ep: 1; etp: 1 with ep > 1 (experts whole, as Megatron-Bridge's MoE recipes run them), else tp.

A run's strategy may also state what its recipe sets, each read as given (the fill rule then
applies only to the fields still null):
- recompute_modules: Megatron --recompute-modules (core_attn, layernorm, mla_up_proj, mlp, moe,
  moe_act, shared_experts); implies recompute selective;
- layers_per_stage: repeated layers on each of the pp * vpp chunks in pipeline order, the
  embedding with the first and the output (and MTP) with the last, e.g. a Megatron
  pipeline_model_parallel_layout or account_for_embedding/loss_in_pipeline_split written out;
- cuda_graphs: none, layer or full_iteration (Megatron --cuda-graph-impl; not priced);
- moe_dispatcher, moe_a2a_overlap, tp_comm_overlap, overlap_grad_reduce, overlap_param_gather,
  activation_offload_layers (Strategy's fields of those names).

Runs the planner cannot express yet (FP8) are counted as skipped.

What is compared: the step time that tokens per second give, wherever a run states tokens per
second per GPU (tokens count the same everywhere); TFLOP/s only where a source gives nothing
else. A source's TFLOP/s follow its own FLOP formula, and the formulas differ on attention:
Megatron-Bridge counts half the causal score matrix (src/megatron/bridge/training/utils/
flop_utils.py @684a68616: "Only half of the attention matrix is non-zero"; its Llama 3 8B rows
at 8K give 51.5 GFLOP per token), the planner's model TFLOP/s count all of it as Megatron-LM
(and NeMo's flops_formulas.py, torchtitan's get_num_flop_per_token) do: 57.9. Compared as
TFLOP/s, the same step was 12.5% "too fast".

Besides the run fields, a file may set in its `source:` block
- framework_overrides: fields of the framework profile (planner/inputs/profiles/*.yaml) as the
  source's framework version had them, merged into the profile for every run of the file, e.g.
  `{pipeline_p2p_overlap_interleaved: false}` for a Megatron-LM older than overlap_p2p_comm;
- training_overrides: fields of the training settings (a model.yaml's `training:`) the source's
  recipes set for every run, e.g. `{bf16_gradients: true}` where they reduce gradients in bf16,
  `{attention: unfused}` where the runs predate fused attention (the framework's default is
  flash);
- strategy_defaults: strategy fields every run of the file has unless it says otherwise, e.g.
  `{moe_a2a_overlap: false}` where the source's recipes leave a framework default off;
and a run may set cluster_overrides: fields of the cluster preset (a GPU part, a slower NIC),
and training_overrides of its own (over the source's), e.g. `{compile: false}` for the eager
row of a torchtitan eager / torch.compile pair, and framework_overrides of its own (over the
source's), e.g. `{eager_expert_bias: false}` where a recipe runs a fused grouped MLP. A run
with `known_regression` (the source's own note that a kernel ran slower than in the releases
around it) is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from cost_models.enums import PipelinePartition, Recompute
from cost_models.pipeline import partitioned_layer_counts
from cost_models.units import GB, GiB
from planner.costing.evaluate import evaluate_strategy
from planner.errors import InputError
from planner.core.problem import Problem
from planner.inputs.loader import make_problem, validate_file
from planner.schemas.cluster import ClusterSpec
from planner.schemas.framework import FrameworkProfile
from planner.schemas.model import TrainingSpec
from planner.schemas.model_file import TransformerShorthand
from planner.schemas.report import PlanReport
from planner.schemas.strategy import Strategy

DATA = Path(__file__).resolve().parent / "data"
BRIDGE_RELEASE_IN_NAME = re.compile(r"-(\d{4,6})(?:-[a-z]+)?$")
"""A Megatron-Bridge row's container release at the end of its name: yymm, or yymmpp for a
patch release (2604, 260401), before an optional tag (-2511-mtp)."""
EXPERT_INDEX = "expert_configs.yaml"
"""Not a source: the index of which runs are expert-tuned (bench/bench_expert.py)."""
PRESET_OF_GPU = {"A100-SXM4-80GB": "dgx-a100-80gb", "A100-SXM4-40GB": "dgx-a100-40gb",
                 "H100-SXM5-80GB": "dgx-h100", "H200": "dgx-h200", "B200": "dgx-b200",
                 "H800-SXM5-80GB": "dgx-h800", "B300": "dgx-b300", "GB300": "gb300-nvl72",
                 "MI300X": "amd-mi300x", "MI325X": "amd-mi325x", "MI355X": "amd-mi355x"}
FRAMEWORKS = {"megatron": "megatron", "nemo": "megatron", "megatron-deepspeed": "deepspeed",
              "deepspeed": "deepspeed", "torchtitan": "torchtitan", "fsdp": "torchtitan",
              "meta-internal": "megatron"}
"""Framework profile of each source's framework label (NeMo runs Megatron-Core; Meta's
Llama 3 stack is closest to Megatron: 4D parallelism, interleaved pipeline, TP in a node)."""


@dataclass(frozen=True)
class Run:
    source: str
    name: str
    framework: str
    problem: Problem
    strategy: Strategy
    measured_tflops: float | None
    """TFLOP/s per GPU as the source counts it; None where only the step time is trusted."""
    measured_step_s: float | None
    counts_recompute: bool
    measured_peak_bytes: float | None = None
    """Peak memory per GPU as the source reports it, in bytes, if it does: `peak_memory_gib`
    times the source's `peak_memory_unit` (GiB unless it says GB: BLOOM's nvidia-smi column)."""


@dataclass(frozen=True)
class Prediction:
    run: Run
    report: PlanReport

    @property
    def predicted_tflops(self) -> float:
        t = self.report.throughput
        return t.hardware_tflops_per_gpu if self.run.counts_recompute else t.model_tflops_per_gpu

    @property
    def error(self) -> float:
        """Signed relative error of the predicted speed: TFLOP/s per GPU where the source
        gives it, else the step time (measured / predicted - 1: positive = predicted faster)."""
        if self.run.measured_tflops is None:
            return self.run.measured_step_s / self.report.time.step_s - 1
        return self.predicted_tflops / self.run.measured_tflops - 1

    @property
    def memory_error(self) -> float | None:
        """Signed relative error of the predicted peak memory, if measured."""
        if self.run.measured_peak_bytes is None:
            return None
        return self.report.memory.peak_bytes / self.run.measured_peak_bytes - 1

    @property
    def measured(self) -> float:
        """What the error compares: TFLOP/s per GPU, else the step time in seconds."""
        return self.run.measured_tflops or self.run.measured_step_s

    @property
    def predicted(self) -> float:
        return self.predicted_tflops if self.run.measured_tflops else self.report.time.step_s


def _model_file(model: dict | str, run_name: str, tmp: Path) -> str:
    """A zoo name, or the run's inline shape written as a model.yaml (family defaults below)."""
    if isinstance(model, str):
        return model
    shape = {k: v for k, v in model.items() if k in TransformerShorthand.model_fields}
    if shape.get("mlp") == "swiglu":       # Llama family: RMSNorm, rotary, no biases or dropout
        for key, value in dict(norm="rmsnorm", position="rotary", bias=False,
                               dropout=False).items():
            shape.setdefault(key, value)       # unless the run says (gpt-oss has biases)
    path = tmp / f"{run_name}.yaml"
    path.write_text(yaml.safe_dump({"name": run_name, **shape}))
    return str(path)


def _skip_reason(run: dict) -> str | None:
    if run["precision"] not in ("bf16", "fp16", "fp8"):
        return f"{run['precision']} training"
    if run.get("known_regression"):
        # The source itself marks the number as a software regression (a kernel running many
        # times slower than in the releases around it): the planner prices kernels as they
        # run when fixed, so such a row measures the bug, not the layout.
        return "a regression its source names"
    return None


def _strategy(run: dict, problem: Problem, framework: str) -> Strategy:
    s = run["strategy"]
    tp, pp = s["tp"], s["pp"]
    zero = s.get("zero_stage")
    if zero is None:
        zero = 1 if framework == "megatron" else 0
    sp = s.get("sequence_parallel")
    ep = s.get("ep") or 1
    etp = s.get("etp") or (1 if ep > 1 else tp)
    # Context parallelism as the run says, else its framework's first way (Megatron-LM's
    # default p2p ring; torchtitan and Llama 3's all-gather).
    cp = s.get("cp") or 1
    cp_comm = s.get("cp_comm") or problem.framework.context_parallel[0].value if cp > 1 else "p2p"
    fields = dict(dp=s.get("dp"), tp=tp, pp=pp, ep=ep, etp=etp, cp=cp, cp_comm=cp_comm,
                  micro_batch=s.get("micro_batch") or 1,
                  global_batch=run["global_batch"],
                  sequence_parallel=tp > 1 if sp is None else sp, zero_stage=zero)
    for key in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                "moe_a2a_overlap"):
        if isinstance(s.get(key), bool):
            fields[key] = s[key]
    if s.get("moe_dispatcher"):   # Megatron-Core's token dispatcher, as the run (or its file) says
        fields["moe_dispatcher"] = s["moe_dispatcher"]
    if s.get("activation_offload_layers"):   # Megatron --cpu-offloading-num-layers, as the run states
        fields["activation_offload_layers"] = s["activation_offload_layers"]
    if isinstance(run.get("fp8_param_gather"), bool):
        fields["fp8_param_gather"] = run["fp8_param_gather"]
    if s.get("cuda_graphs"):   # Megatron --cuda-graph-impl, as the run's recipe sets it
        fields["cuda_graphs"] = s["cuda_graphs"]
    if s.get("layers_per_stage"):   # the recipe's own pipeline layout (repeated layers per chunk)
        fields["layers_per_stage"] = tuple(s["layers_per_stage"])
    if s.get("pp_partition"):   # DeepSpeed PipelineModule partition_method, as the run states
        counts = partitioned_layer_counts(problem.model.num_layers, pp,
                                          PipelinePartition(s["pp_partition"]))
        fields["layers_per_stage"] = tuple(counts) if len(set(counts)) > 1 else None
    recompute = s.get("recompute")
    recomputes = [Recompute(recompute)] if recompute else list(Recompute)
    if s.get("recompute_modules"):   # Megatron --recompute-modules: selective, as the run says
        fields["recompute_modules"] = tuple(s["recompute_modules"])
        recomputes = [Recompute.SELECTIVE]
    layers_per_stage = problem.model.num_layers // pp
    # vpp: the divisors of the layers per stage, as the search tries them (a pp that does not
    # divide the layers gives some chunks one layer more, planner/costing/layout.py).
    vpps = [s["vpp"]] if s.get("vpp") else [v for v in range(1, layers_per_stage + 1)
                                            if layers_per_stage % v == 0]
    if pp == 1 or not problem.framework.interleaved_pipeline:
        vpps = [1]                   # interleaving needs a pipeline and a framework that has it
    for choice in recomputes:   # the cheapest recompute that fits, then the fastest vpp
        fitting = []
        for vpp in vpps:
            strategy = Strategy(**fields, vpp=vpp, recompute=choice)
            report = evaluate_strategy(problem, strategy)
            if report.memory.fits:
                fitting.append((report.time.step_s, vpp, strategy))
        if fitting:
            return min(fitting, key=lambda f: (f[0], f[1]))[2]
    return strategy


PEAK_MEMORY_UNITS = {"GiB": GiB, "GB": GB}
"""Units a source's peak memory may be in: torchtitan logs GiB (components/metrics.py
DeviceMemoryMonitor._to_gib, 1024**3); BLOOM's tables give nvidia-smi GB."""


def _peak_bytes(value: float | None, source: dict) -> float | None:
    """A run's measured peak memory in bytes (`peak_memory_gib` in the source's unit)."""
    if value is None:
        return None
    return value * PEAK_MEMORY_UNITS[source.get("peak_memory_unit", "GiB")]


def load_runs(tmp: Path, cluster: ClusterSpec | None = None,
              only: set[tuple[str, str]] | None = None) -> tuple[list[Run], dict[str, int]]:
    """Every run of bench/data (or those whose (source key, run name) are in `only`), and how
    many were skipped for each reason."""
    runs, skipped = [], {}
    for file in sorted(DATA.glob("*.yaml")):
        if file.name == EXPERT_INDEX:
            continue
        data = yaml.safe_load(file.read_text())
        key = data["source"]["key"]
        for run in data["runs"]:
            if only is not None and (key, run["name"]) not in only:
                continue
            reason = _skip_reason(run)
            if reason:
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            preset = run.get("cluster") or PRESET_OF_GPU[run["gpu"]]
            framework = FRAMEWORKS[run["framework"]]
            try:
                problem = make_problem(_model_file(run["model"], run["name"], tmp), preset,
                                       gpus=run["num_gpus"],   # a preset grows to fit
                                       seq_len=run["seq_len"], global_batch=run["global_batch"],
                                       precision=run["precision"], framework=framework,
                                       fp8_recipe=run.get("fp8_recipe"))
            except InputError as e:   # a model the planner cannot describe (e.g. squared-ReLU MLP)
                reason = str(e).split(': ', 2)[-1]
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            problem = with_overrides(problem, file.name,
                                     framework={**(data["source"].get("framework_overrides")
                                                   or {}),
                                                **(run.get("framework_overrides") or {})},
                                     training={**(data["source"].get("training_overrides") or {}),
                                               **(run.get("training_overrides") or {})},
                                     cluster=run.get("cluster_overrides"))
            if cluster is not None and cluster.gpu.name == problem.cluster.gpu.name:
                problem = replace(problem, cluster=cluster)
            measured = run["measured"]
            tflops, step_s = measured.get("tflops_per_gpu"), measured.get("step_s")
            if measured.get("tokens_per_s_per_gpu"):
                # The source's FLOP counting is not the planner's: compare the step time its
                # tokens per second give (tokens count the same everywhere).
                tokens = run["global_batch"] * run["seq_len"]
                tflops = None
                step_s = tokens / (measured["tokens_per_s_per_gpu"] * run["num_gpus"])
            defaults = data["source"].get("strategy_defaults") or {}
            run = {**run, "strategy": {**defaults, **{k: v for k, v in run["strategy"].items()
                                                      if v is not None}}}
            runs.append(Run(key, run["name"], framework, problem,
                            _strategy(run, problem, framework), tflops, step_s,
                            bool(run.get("counts_recompute")),
                            _peak_bytes(measured.get("peak_memory_gib"), data["source"])))
    return runs, skipped


def with_overrides(problem: Problem, where: str, *, framework: dict | None = None,
                   training: dict | None = None, cluster: dict | None = None) -> Problem:
    """`problem` with fields of its framework profile, training settings and cluster replaced
    (nested dicts merged), each validated again: a misspelt key fails naming `where`."""
    for name, kind, update in (("framework", FrameworkProfile, framework),
                               ("training", TrainingSpec, training),
                               ("cluster", ClusterSpec, cluster)):
        if update:
            merged = _merge(getattr(problem, name).model_dump(), update)
            problem = replace(problem, **{name: validate_file(kind, merged, where)})
    return problem


def _merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for k, v in update.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def predict(runs: list[Run]) -> list[Prediction]:
    return [Prediction(r, evaluate_strategy(r.problem, r.strategy)) for r in runs]


def speed(p, *, measured: bool) -> float:
    """Higher is faster: TFLOP/s, or 1 / step time."""
    if p.run.measured_tflops:
        return p.measured if measured else p.predicted
    return 1 / (p.measured if measured else p.predicted)


def spearman(xs, ys) -> float:
    """Spearman's rank correlation, ties at their average rank (nan for fewer than 3 runs)."""
    if len(xs) < 3:
        return float("nan")

    def ranks(values):
        return [sum(v < x for v in values) + (sum(v == x for v in values) - 1) / 2
                for x in values]
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    norm = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / norm if norm else float("nan")
