"""Log lines in the exact formats the frameworks print, for the log readers' tests."""

from __future__ import annotations

TITAN_PREFIX = "[titan] 2026-11-20 10:00:00,000 - root - INFO - "
"""torchtitan/tools/logging.py init_logger @b5bcd76c: '[titan] %(asctime)s - %(name)s -
%(levelname)s - ' on the root logger."""

COLORS = {"red": "\033[31m", "green": "\033[32m", "orange": "\033[38;2;180;60;0m",
          "turquoise": "\033[38;2;54;234;195m", "blue": "\033[34m", "cyan": "\033[36m",
          "magenta": "\033[35m", "reset": "\033[39m"}
"""torchtitan/tools/utils.py Color @b5bcd76c (metrics.disable_color_printing false)."""


def torchtitan_step(step: int, *, tps: float, memory_gib: float, capacity_gib: float = 79.1,
                    loss: float = 7.1, grad_norm: float = 1.25, tflops: float = 300.0,
                    mfu: float | None = 30.0, color: bool = False) -> str:
    """A metrics line of torchtitan/components/metrics.py MetricsProcessor.log @b5bcd76c:
    memory is max_reserved_gib, tps round(tps) with thousands separators."""
    c = COLORS if color else dict.fromkeys(COLORS, "")
    mfu_str = f"{mfu:.2f}%" if mfu is not None else "N/A"
    return (TITAN_PREFIX
            + f"{c['red']}step: {step:2}  "
            f"{c['green']}loss: {loss:8.5f}  "
            f"{c['orange']}grad_norm: {grad_norm:7.4f}  "
            f"{c['turquoise']}memory: {memory_gib:5.2f}GiB"
            f"({100 * memory_gib / capacity_gib:.2f}%)  "
            f"{c['blue']}tps: {round(tps):,}  "
            f"{c['cyan']}tflops: {tflops:,.2f}  "
            f"{c['magenta']}mfu: {mfu_str}{c['reset']}")


def torchtitan_validation(step: int, *, tps: float, memory_gib: float) -> str:
    """MetricsProcessor.log_validation's line @6404b932 (v0.2.x): not a training step."""
    return (TITAN_PREFIX + f"validate step: {step:2}  loss: {7.0:7.4f}  "
            f"memory: {memory_gib:5.2f}GiB({50.0:.2f}%)  tps: {round(tps):,}")


def torchtitan_log(steps_tps: dict[int, float], *, memory_gib: dict[int, float],
                   ranks: int = 2, color: bool = False) -> str:
    """A torchtitan run's output: trainer.py's start line, then every rank's metrics line of
    each logged step (every rank logs; the trial launcher keeps them all)."""
    lines = [TITAN_PREFIX + "torchtitan version: 0.0.0 (0.0.0 means __version__ is not "
             "defined correctly).", TITAN_PREFIX + "Training starts at step 1"]
    for step, tps in steps_tps.items():
        for rank in range(ranks):
            lines.append(f"[rank{rank}]:" + torchtitan_step(
                step, tps=tps, memory_gib=memory_gib[step] - 0.5 * rank, color=color))
    lines.append(TITAN_PREFIX + "Training completed")
    return "\n".join(lines) + "\n"


def megatron_memory(rank: int, iteration: int, *, max_allocated_mb: float,
                    max_reserved_mb: float) -> str:
    """megatron/training/utils/common_utils.py report_memory @d98e8a64, as training_log
    prints it after the first --log-interval (and every --log-memory-interval)."""
    return (f"[Rank {rank}] (after {iteration} iterations) memory (MB)"
            f" | allocated: {0.4 * max_allocated_mb:.2f}"
            f" | max allocated: {max_allocated_mb:.2f}"
            f" | reserved: {max_reserved_mb:.2f}"
            f" | max reserved: {max_reserved_mb:.2f}")
