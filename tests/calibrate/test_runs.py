"""RUNS.yaml and Megatron-LM logs read into measured runs; bad input is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.calibrate.runs import load_runs
from planner.errors import InputError

LOG = Path(__file__).parent / "data" / "megatron_llama3_8b_16gpu.log"


def test_a_megatron_log_gives_its_strategy_and_steady_step_time(write):
    runs = write("runs.yaml", f"""\
        runs:
          - name: from-log
            model: llama3-8b
            log: {LOG}
        """)
    (run,) = load_runs(runs, "dgx-h100")
    s = run.strategy
    # The logged arguments: tp 2, pp 2, world 16 -> dp 4; --sequence-parallel,
    # --use-distributed-optimizer, --overlap-grad-reduce, micro-batch 1 of a batch of 128.
    assert (s.dp, s.tp, s.pp, s.micro_batch, s.global_batch) == (4, 2, 2, 1, 128)
    assert s.sequence_parallel and int(s.zero_stage) == 1 and s.overlap_grad_reduce
    assert run.problem.num_gpus == 16 and run.problem.training.seq_len == 8192
    # Median of the intervals after the first (21.3 s holds the start-up):
    # 7950.4, 7918.7, 7963.0, 7937.9, 7941.6 ms -> 7941.6 ms.
    assert run.step_s == pytest.approx(7.9416)
    assert run.peak_bytes is None


@pytest.mark.parametrize("prefix", ["[rank0]: ", "INFO:megatron.training.arguments:",
                                    "[2026-11-20 10:00:00] [rank0]: "])
def test_a_log_whose_lines_carry_a_prefix(write, prefix):
    log = write("prefixed.log", "".join(prefix + line for line in
                                        LOG.read_text().splitlines(keepends=True)))
    runs = write("runs.yaml", f"runs:\n  - {{model: llama3-8b, log: {Path(log).name}}}\n")
    (run,) = load_runs(runs, "dgx-h100")
    assert (run.strategy.tp, run.strategy.pp, run.strategy.dp) == (2, 2, 4)
    assert run.step_s == pytest.approx(7.9416)


def test_a_log_with_a_measured_peak(write):
    runs = write("runs.yaml", f"""\
        runs:
          - model: llama3-8b
            log: {LOG}
            measured: {{peak_gib: 61.5}}
        """)
    (run,) = load_runs(runs, "dgx-h100")
    assert run.step_s == pytest.approx(7.9416) and run.peak_bytes == 61.5 * 2**30
    assert run.name == "run 1"


def test_a_config_file_as_the_strategy(write):
    config = write("ds.json", '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, '
                              '"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}')
    runs = write("runs.yaml", f"""\
        runs:
          - model: llama2-7b
            gpus: 16
            config: {Path(config).name}
            measured: {{step_s: 3.1}}
        """)
    (run,) = load_runs(runs, "dgx-h100")          # the config beside RUNS.yaml
    assert (run.strategy.dp, run.strategy.micro_batch, int(run.strategy.zero_stage)) == \
        (16, 2, 2)
    assert run.problem.framework.name == "deepspeed"


@pytest.mark.parametrize("entry, message", [
    ("{model: llama3-8b, gpus: 8, strategy: {tp: 2, micro_batchs: 1}, measured: {step_s: 1}}",
     "runs.yaml: runs[0].strategy.micro_batchs: unknown field (did you mean 'micro_batch'?)"),
    ("{model: llama3-8b, gpus: 8, strategy: {tp: 2}, config: x.sh, measured: {step_s: 1}}",
     "runs.yaml: runs[0]: give exactly one of strategy, config and log, or a config with "
     "its run's log (got strategy, config)"),
    ("{model: llama3-8b, gpus: 8, strategy: {tp: 2}}",
     "runs.yaml: runs[0]: measured: required (step_s, peak_gib or both) unless the run is a "
     "log"),
    ("{model: llama3-8b, gpus: 8, strategy: {tp: 2}, measured: {}}",
     "runs.yaml: runs[0].measured: give step_s, peak_gib or both"),
    ("{model: llama3-8b, gpus: 8, strategy: {tp: 2}, measured: {step_s: -1}}",
     "runs.yaml: runs[0].measured.step_s: Input should be greater than 0 (got -1)"),
    ("{model: llama3-8b, strategy: {tp: 2}, measured: {step_s: 1}}",
     "runs.yaml: runs[0]: gpus: required when the strategy gives no dp"),
    ("{model: llama3-9b, gpus: 8, strategy: {tp: 2}, measured: {step_s: 1}}",
     "runs.yaml: runs[0]: no model named 'llama3-9b' in the zoo (did you mean 'llama3-8b'?)"),
    ("{model: llama3-8b, gpus: 8, strategy: {tp: 3}, measured: {step_s: 1}}",
     "runs.yaml: runs[0]: dp: cannot derive dp: tp * pp (3) does not divide the 8 GPUs"),
])
def test_bad_runs_are_one_line(write, entry, message):
    runs = write("runs.yaml", f"runs:\n  - {entry}\n")
    with pytest.raises(InputError) as e:
        load_runs(runs, "dgx-h100")
    text = str(e.value).replace(str(Path(runs).parent) + "/", "")
    assert text.startswith(message) and "\n" not in text


def test_a_missing_log_names_the_run(write):
    runs = write("runs.yaml", "runs:\n  - {model: llama3-8b, log: nope.log}\n")
    with pytest.raises(InputError) as e:
        load_runs(runs, "dgx-h100")
    assert str(e.value).endswith("runs.yaml: runs[0].log: nope.log: file not found")


def test_two_runs_of_one_name(write):
    entry = "{name: a, model: llama3-8b, gpus: 8, strategy: {tp: 2}, measured: {step_s: 1}}"
    runs = write("runs.yaml", f"runs:\n  - {entry}\n  - {entry}\n")
    with pytest.raises(InputError, match="the name 'a' is given to two runs"):
        load_runs(runs, "dgx-h100")


@pytest.mark.parametrize("text, message", [
    ("iteration 10/ 100 | elapsed time per iteration (ms): 100.0 |\n",
     "neither a Megatron-LM log (no 'arguments' block, which it prints at start-up) nor a "
     "torchtitan log (no 'step: N ... tps: T' metrics line)"),
    ("------------------------ arguments ------------------------\n  world_size ... 8\n",
     "the arguments block has no end line"),
    (LOG.read_text().split(" [2026-11-20 10:01")[0],
     "1 'elapsed time per iteration (ms)' line after the arguments; the first interval holds "
     "the start-up, so log at least two (--log-interval)"),
])
def test_bad_logs_are_one_line(write, text, message):
    log = write("train.log", text)
    runs = write("runs.yaml", f"runs:\n  - {{model: llama3-8b, log: {Path(log).name}}}\n")
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_runs(runs, "dgx-h100")
