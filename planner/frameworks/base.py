"""What every emitter shares: the plan it writes, what its parser returns, and the file header.

Each target module (megatron, deepspeed, torchrun, torchtitan, mindspore) has `emit(plan)`,
which returns {file name: text}, and `parse(text, file=..., problem=...)`, which reads the same
kind of file back (the emitted one, or the user's own) into a `ParsedConfig`, so that
emit -> validate round-trips.
"""

from __future__ import annotations

import difflib
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

from planner import __version__
from planner.core.problem import Problem
from planner.schemas.model import EmbeddingBlock, ModelSpec, OutputBlock, TransformerBlock
from planner.schemas.report import PlanReport, Violation
from planner.schemas.strategy import LaunchTarget, Strategy, offload_labels


@dataclass(frozen=True)
class LaunchPlan:
    """A resolved strategy for a problem, with its predicted costs (for the file header)."""

    problem: Problem
    strategy: Strategy
    report: PlanReport
    num_tokens: float | None = None
    """Training tokens, when the user gave them: sets the iteration count."""

    @property
    def num_micro_batches(self) -> int:
        s = self.strategy
        return s.global_batch // (s.dp * s.micro_batch)

    def overlap(self, name: str) -> bool:
        """An overlap feature of the strategy (overlap_param_gather, tp_comm_overlap), the
        framework's default where the strategy leaves it unsaid."""
        value = getattr(self.strategy, name)
        return getattr(self.problem.framework.defaults, name) if value is None else value

    @property
    def train_iters(self) -> int | None:
        if self.num_tokens is None:
            return None
        tokens_per_step = self.strategy.global_batch * self.problem.training.seq_len
        return max(1, round(self.num_tokens / tokens_per_step))


@dataclass(frozen=True)
class Trial:
    """A short benchmark run of a plan (`planner plan --emit-trials`): enough steps for
    several logged intervals after the first, which holds the warm-up (the log reader of
    `planner calibrate` takes the median of the others); no evaluation, no checkpoints."""

    train_iters: int = 30
    """Optimizer steps; a multiple of log_interval (Megatron-LM asserts it of
    --log-memory-interval)."""
    log_interval: int = 5
    """Steps between logged lines (Megatron-LM --log-interval, torchtitan metrics.log_freq)."""
    log_file: str = "train.log"
    """Next to the script; each node appends (Megatron-LM prints its arguments on rank 0 and
    the iteration lines on the last rank, which may be another node; torchtitan prints on
    every rank)."""


@dataclass
class ParsedConfig:
    """A strategy read from a launch config, and what the framework would get wrong with it."""

    strategy: dict[str, Any]
    """Strategy fields the file sets (dp may be absent: it then follows the GPU count)."""
    target: LaunchTarget | None
    findings: list[Violation] = field(default_factory=list)
    """Problems the framework itself would hit or silently get wrong (a misspelled key)."""
    training: dict[str, Any] = field(default_factory=dict)
    """Training settings the file fixes (precision, seq_len, the attention kernel): they
    override the model's."""
    world_size: int | None = None
    """GPUs the file launches on, when it says (torchrun's nnodes x nproc_per_node)."""
    world_size_source: str | None = None
    """Where the file says it ('torchrun --nnodes 8 --nproc-per-node 8'), for notes."""
    notes: list[str] = field(default_factory=list)
    """Settings that live elsewhere (model code), with what the planner assumed for them."""
    framework: dict[str, Any] = field(default_factory=dict)
    """Fields of the framework's profile the file sets for its own run (Megatron-DeepSpeed
    runs a one-stage model in DeepSpeed's pipeline engine: pipeline_engine_single_stage)."""
    searched_by: str | None = None
    """Who picks the degrees the file leaves open when the job compiles (MindSpore
    AUTO_PARALLEL's strategy search): validate then prices the planner's own best plan under
    what the file does fix, and says so."""

    def finding(self, rule: str, message: str, fix: str) -> None:
        self.findings.append(Violation(rule=rule, message=message, fix=fix))


@dataclass(frozen=True)
class Emitter:
    target: LaunchTarget
    emit: Callable[[LaunchPlan], dict[str, str]]
    parse: Callable[..., ParsedConfig]
    checked_against: str
    """The framework source or documentation (and its version) the key names were checked
    against."""


def closest(name: str, known) -> str | None:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return close[0] if close else None


def did_you_mean(name: str, known) -> str:
    close = closest(name, known)
    return f" (did you mean '{close}'?)" if close else ""


def parse_python(text: str, file: str):
    """The syntax tree of a Python config file (never run), or an InputError naming the line."""
    import ast

    try:
        return ast.parse(text, filename=file)
    except SyntaxError as e:
        from planner.errors import InputError

        raise InputError(f"{file}: line {e.lineno}: Python syntax error: {e.msg}") from None


def header_lines(plan: LaunchPlan, target: str, checked_against: str) -> list[str]:
    """Comment lines (without the comment marker) that open every emitted file."""
    p, s, r = plan.problem, plan.strategy, plan.report
    modules = ("" if s.recompute_modules is None else
               f" ({' '.join(m.value for m in s.recompute_modules)})")
    options = (f"sequence_parallel {str(s.sequence_parallel).lower()}, recompute "
               f"{s.recompute.value}{modules}, zero_stage {int(s.zero_stage)}, "
               f"{p.training.precision_label}")
    options += "".join(f", {label}" for label in offload_labels(s))
    paragraphs = [
        f"{target} launch config written by planner {__version__}.",
        f"Model {p.model.name} on {p.num_gpus} x {p.cluster.gpu.name} ({p.cluster.name}).",
        f"Strategy: {s.degrees_label()}, global batch {s.global_batch}, seq_len "
        f"{p.training.seq_len}, {options}.",
        f"Predicted: {r.time.step_s:.3f} s per step, peak {r.memory.peak_bytes / 2**30:.1f} GiB "
        f"per GPU (stage {r.memory.peak_stage}), MFU {r.throughput.mfu:.1%}.",
        f"Keys checked against {checked_against}.",
    ]
    return [line for text in paragraphs
            for line in textwrap.wrap(text, width=94, subsequent_indent="  ",
                                      break_on_hyphens=False, break_long_words=False)]


@dataclass(frozen=True)
class ModelShape:
    """The transformer shapes launch configs need, read off the model chain."""

    num_layers: int
    layer: TransformerBlock
    """The representative layer: an MoE layer if the model has any."""
    embedding: EmbeddingBlock
    output: OutputBlock
    moe_pattern: tuple[bool, ...] = ()
    """Which layers are MoE (empty for a dense model)."""
    window_pattern: tuple[bool, ...] = ()
    """Which layers attend through a sliding window (empty if none does)."""
    dense_ffn: int | None = None
    """The dense MLP width of the non-MoE layers (None: all layers are MoE, or none is)."""
    mtp_layers: int = 0
    """Multi-token-prediction modules after the output layer."""

    @property
    def max_positions(self) -> int:
        return self.embedding.max_positions


def transformer_shape(model: ModelSpec, target: str) -> ModelShape:
    """The model as one stack of identical transformer layers, or an InputError saying why a
    framework's GPT/BERT trainer cannot run it."""
    from planner.errors import InputError

    layers = [b for b in model.blocks if b.kind == "transformer"]
    others = sorted({b.kind for b in model.blocks} - {"transformer", "embedding", "norm",
                                                      "output", "mtp"})
    # Layers may differ in being MoE (dense-first layers, a MoE frequency) and in a sliding
    # window or attention chunk (alternating local and global attention): the frameworks
    # express both as patterns (an emitter refuses what its framework cannot run);
    # and in being kept in bf16 (a setting of the run, its own flags).
    def kind(b):
        return b.model_copy(update=dict(num_experts=1, top_k=1, moe_ffn_hidden=None,
                                        shared_ffn_hidden=0, shared_expert_gate=False,
                                        router_bias=False, capacity_factor=None,
                                        router_groups=None, router_group_topk=None,
                                        ffn_hidden=None, sliding_window=None,
                                        attention_chunk=None,
                                        load_balancing=layers[0].load_balancing,
                                        keep_bf16=False))

    if others or not layers or len({kind(b) for b in layers}) != 1:
        what = f"{', '.join(others)} blocks" if others else "layers of different shapes"
        raise InputError(f"--emit {target}: {model.name} has {what}; {target} launch configs "
                         f"describe one stack of identical transformer layers")
    embedding = next((b for b in model.blocks if isinstance(b, EmbeddingBlock)), None)
    output = next((b for b in model.blocks if isinstance(b, OutputBlock)), None)
    if embedding is None or output is None:
        missing = "embedding" if embedding is None else "output layer"
        raise InputError(f"--emit {target}: {model.name} has no {missing}; {target} launch "
                         f"configs describe a language model with an embedding and an output "
                         f"layer")
    moe = [b.is_moe for b in layers]
    windows = [b.sliding_window is not None for b in layers]
    layer = next((b for b in layers if b.is_moe), layers[0]).model_copy(
        update=dict(sliding_window=next((b.sliding_window for b in layers if b.sliding_window),
                                        None)))
    unwindowed = {b.model_copy(update=dict(sliding_window=None, attention_chunk=None,
                                           keep_bf16=False))
                  for b in layers if b.is_moe}
    if len(unwindowed) > 1 or len({b.ffn for b in layers if not b.is_moe}) > 1:
        raise InputError(f"--emit {target}: {model.name} has MoE or dense layers of different "
                         f"shapes; {target} launch configs describe one shape of each")
    dense = next((b.ffn for b in layers if not b.is_moe), None)
    return ModelShape(len(layers), layer, embedding, output,
                      moe_pattern=tuple(moe) if any(moe) else (),
                      window_pattern=tuple(windows) if any(windows) else (),
                      dense_ffn=dense if any(moe) and dense is not None else None,
                      mtp_layers=sum(b.kind == "mtp" for b in model.blocks))
