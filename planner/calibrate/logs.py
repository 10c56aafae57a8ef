"""Training logs read for `planner calibrate`: a Megatron-LM log (its arguments, iteration times
and memory reports) or a torchtitan log (its metrics lines). Which one a file is shows in its
text: Megatron-LM prints an arguments block at start-up, torchtitan 'step: N ... tps: T' lines.

Memory is what the framework prints, the maximum over every rank whose lines are in the file:

* Megatron-LM: 'max allocated' and 'max reserved' of report_memory, MiB
  (torch.cuda.max_memory_allocated / max_memory_reserved since the process started);
* torchtitan: 'memory: X GiB' of the metrics line, the caching allocator's reserved peak
  (reserved_bytes.all.peak) over the logging interval; torchtitan prints no allocated bytes
  (max_active goes to TensorBoard and W&B only).
"""

from __future__ import annotations

import re
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path

from cost_models.units import GiB, MiB
from planner.errors import InputError, shown
from planner.inputs.safe_parse import read_text


@dataclass(frozen=True)
class LoggedMemory:
    """The peak memory a log reports: the fullest GPU among the ranks that print it."""

    allocated_bytes: float | None
    """Peak bytes PyTorch allocated (None: the framework does not print it)."""
    reserved_bytes: float
    """Peak bytes the caching allocator reserved (allocated plus its fragmentation)."""
    num_lines: int
    """Memory lines read (Megatron-LM: one per model-parallel rank and report)."""


@dataclass(frozen=True)
class MegatronLog:
    arguments: str
    """The logged arguments as a command line Megatron-LM would accept."""
    world_size: int | None
    step_s: float
    """Median of the logged 'elapsed time per iteration' after the first interval."""
    memory: LoggedMemory | None = None


@dataclass(frozen=True)
class TorchtitanLog:
    tokens_per_s_per_gpu: float
    """Median of the logged tps after the first logged step (torchtitan's tps is per GPU)."""
    memory: LoggedMemory

    def step_s(self, *, global_batch_tokens: int, num_gpus: int) -> float:
        """Seconds per optimizer step. components/metrics.py @b5bcd76c: tps = tokens this
        rank loaded / (seconds x non_data_parallel_size), a data-parallel rank loading
        global_batch_tokens / dp a step, so tps = global_batch_tokens / (step_s x GPUs)."""
        return global_batch_tokens / (self.tokens_per_s_per_gpu * num_gpus)


TrainingLog = MegatronLog | TorchtitanLog


def read_log(path: str) -> TrainingLog:
    """A Megatron-LM or torchtitan training log, by what its text holds."""
    file = shown(path)
    text = _ANSI.sub("", read_text(Path(path)))
    if _ARGS_START in text:
        return _read_megatron(text, file)
    if _TT_STEP.search(text):
        return _read_torchtitan(text, file)
    raise InputError(f"{file}: neither a Megatron-LM log (no '{_ARGS_START.strip('- ')}' block, "
                     f"which it prints at start-up) nor a torchtitan log (no 'step: N ... "
                     f"tps: T' metrics line)")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
"""Colour codes: torchtitan colours its metrics line unless metrics.disable_color_printing."""
_NUMBER = r"[0-9.]+(?:[eE][+-]?\d+)?"

# --------------------------------------------------------------------------- Megatron-LM

_ARGS_START = "------------------------ arguments ------------------------"
_ARGS_END = "-------------------- end of arguments ---------------------"
# megatron/training/arguments.py _print_args: '  {name} {dots} {value}', dots = 48 - len(name).
_ARG_LINE = re.compile(r"^\s*([A-Za-z_]\w*) (?:\.+ |\s)(.*?)\s*$")
# megatron/training/training.py training_log: 'iteration N/ M | ... | elapsed time per
# iteration (ms): T | ...', the mean over the last --log-interval iterations.
_ITERATION = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration "
                        rf"\(ms\):\s*({_NUMBER})")
# megatron/training/utils/common_utils.py report_memory @d98e8a64, printed by every rank of
# data-parallel rank 0 after the first --log-interval and every --log-memory-interval:
# '[Rank R] (after N iterations) memory (MB) | allocated: A | max allocated: M | reserved: S
# | max reserved: X' (MB = 2**20 bytes: torch.cuda.max_memory_allocated() / (1024 * 1024)).
_MEMORY = re.compile(rf"memory \(MB\)\s*\|\s*allocated:\s*{_NUMBER}\s*\|\s*max allocated:\s*"
                     rf"({_NUMBER})\s*\|\s*reserved:\s*{_NUMBER}\s*\|\s*max reserved:\s*"
                     rf"({_NUMBER})")
_PREFIX = re.compile(r"^(?:\[[^\]]*\]:?\s*|[A-Z]+:[\w.]+:)+")
"""What launchers and loggers put before a line: '[rank0]: ', '[2025-01-01 10:00:00] ',
'INFO:megatron.training.arguments:'."""
_DEST_FLAGS = {"fp8": "--fp8-format"}
"""Arguments whose flag is not their name (arguments.py: --fp8-format has dest='fp8')."""


def _read_megatron(text: str, file: str) -> MegatronLog:
    from planner.frameworks.megatron import KNOWN_FLAGS

    start = text.rfind(_ARGS_START)      # the last launch in the file, if it restarted
    end = text.find(_ARGS_END, start)
    if end < 0:
        raise InputError(f"{file}: the arguments block has no end line: the log is cut")
    values = {}
    for line in text[start + len(_ARGS_START):end].splitlines():
        m = _ARG_LINE.match(_PREFIX.sub("", line))
        if m:
            values[m.group(1)] = m.group(2)
    words = ["pretrain_gpt.py"]
    for dest, value in values.items():
        flag = _DEST_FLAGS.get(dest, "--" + dest.replace("_", "-"))
        if flag not in KNOWN_FLAGS or value in ("None", "False", ""):
            continue
        words.append(flag)
        if value != "True":
            words += _value_words(value)
    times = [(int(m.group(1)), float(m.group(2)) / 1000)
             for m in _ITERATION.finditer(text, end)]
    if len(times) < 2:
        raise InputError(f"{file}: {len(times)} 'elapsed time per iteration (ms)' line"
                         f"{'' if len(times) == 1 else 's'} after the arguments; the first "
                         f"interval holds the start-up, so log at least two (--log-interval)")
    world = values.get("world_size", "")
    peaks = [(float(m.group(1)) * MiB, float(m.group(2)) * MiB)
             for m in _MEMORY.finditer(text, end)]
    memory = LoggedMemory(max(a for a, _ in peaks), max(r for _, r in peaks), len(peaks)) \
        if peaks else None
    return MegatronLog(arguments=" ".join(words),
                       world_size=int(world) if world.isdigit() and int(world) > 0 else None,
                       step_s=statistics.median(t for _, t in times[1:]), memory=memory)


def _value_words(value: str) -> list[str]:
    """A logged value as command-line words: lists spread, enums by their member name."""
    if value.startswith("[") and value.endswith("]"):
        return [shlex.quote(v.strip().strip("'\"")) for v in value[1:-1].split(",")
                if v.strip()]
    enum = re.fullmatch(r"[A-Z]\w*\.(\w+)", value)     # AttnBackend.auto -> auto
    return [shlex.quote(enum.group(1) if enum else value)]


# --------------------------------------------------------------------------- torchtitan

# torchtitan/components/metrics.py MetricsProcessor.log @b5bcd76c (the same in v0.2.x,
# @6404b932), through the '[titan] <time> - root - INFO - ' logger prefix:
# 'step: {step:2}  loss: {loss:8.5f}  grad_norm: {g:7.4f}  memory: {max_reserved_gib:5.2f}GiB
# ({max_reserved_pct:.2f}%)  tps: {round(tps):,}  tflops: {tflops:,.2f}  mfu: {mfu:.2f}%',
# logged at step 1 and every metrics.log_freq steps. log_validation's 'validate step: N'
# lines are not training steps.
_TT_STEP = re.compile(rf"(?<!validate )\bstep:\s*(\d+)\s+loss:.*?memory:\s*({_NUMBER})\s*GiB"
                      r".*?tps:\s*([0-9][0-9,]*)")
_TT_START = "Training starts at step"
"""trainer.py Trainer.train: logged once per launch, before the first step."""


def _read_torchtitan(text: str, file: str) -> TorchtitanLog:
    start = text.rfind(_TT_START)        # the last launch in the file, if it restarted
    steps = [(int(m.group(1)), float(m.group(2)) * GiB, float(m.group(3).replace(",", "")))
             for m in _TT_STEP.finditer(text, max(start, 0))]
    first = min((step for step, _, _ in steps), default=None)
    # The first logged step's tps counts from the metrics' start: model build, compile, the
    # first step's warm-up. Every rank prints its own line (all ranks log): drop that step's.
    steady = [tps for step, _, tps in steps if step != first]
    if not steady:
        logged = len({step for step, _, _ in steps})
        raise InputError(f"{file}: {logged} logged step{'' if logged == 1 else 's'} after the "
                         f"start of training; the first holds the start-up, so log at least "
                         f"two (metrics.log_freq)")
    if min(steady) <= 0:
        raise InputError(f"{file}: a metrics line logs tps 0: no tokens were trained")
    memory = LoggedMemory(None, max(reserved for _, reserved, _ in steps), len(steps))
    return TorchtitanLog(tokens_per_s_per_gpu=statistics.median(steady), memory=memory)
