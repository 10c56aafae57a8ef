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


# --------------------------------------------------------------------------- logged memory

def test_a_megatron_log_gives_the_peak_memory_of_its_fullest_rank(write):
    from tests.calibrate.framework_logs import megatron_memory

    # Two model-parallel ranks report after the first interval and at the end; the
    # reader takes the largest 'max allocated' and 'max reserved' (MB = 2**20 bytes).
    memory = [megatron_memory(0, 10, max_allocated_mb=40000.0, max_reserved_mb=44000.0),
              megatron_memory(1, 10, max_allocated_mb=42000.0, max_reserved_mb=43000.0),
              megatron_memory(0, 60, max_allocated_mb=40500.0, max_reserved_mb=45000.0),
              megatron_memory(1, 60, max_allocated_mb=42500.5, max_reserved_mb=43000.0)]
    lines = [line for line in LOG.read_text().splitlines() if "memory (MB)" not in line]
    log = write("mem.log", "\n".join(lines + ["[rank1]: " + m for m in memory]) + "\n")
    runs = write("runs.yaml", f"runs:\n  - {{model: llama3-8b, log: {Path(log).name}}}\n")
    (run,) = load_runs(runs, "dgx-h100")
    assert run.logged_memory.allocated_bytes == 42500.5 * 2**20
    assert run.logged_memory.reserved_bytes == 45000.0 * 2**20
    assert run.logged_memory.num_lines == 4
    assert run.peak_bytes is None                    # the nvidia-smi peak stays unmeasured


TT_STEPS = {1: 900.0, 5: 4410.0, 10: 4400.0, 15: 4390.0, 20: 4405.0}
TT_MEMORY = {1: 52.0, 5: 61.25, 10: 61.0, 15: 61.0, 20: 60.5}


@pytest.fixture
def titan(write):
    """A torchtitan recipe of llama3-8b on 16 GPUs: FSDP over 16, micro-batches of one 8192-
    token sequence, a global batch of 64 sequences."""
    from planner.frameworks.torchtitan_recipe import RecipeParts, render

    recipe = write("torchtitan_recipe.py", render(RecipeParts(
        name="llama3-8b", label="dp16", header=[],
        training={"num_tokens_per_microbatch_per_dp_rank": 8192,
                  "num_tokens_per_train_step": 64 * 8192, "max_context_length": 8192},
        parallelism={"data_parallel_shard_degree": 16, "tensor_parallel_degree": 1},
        recompute="full", async_tp=None)))
    return Path(recipe).name


@pytest.mark.parametrize("color", [False, True])
def test_a_torchtitan_log_gives_step_time_and_reserved_peak(write, titan, color):
    from tests.calibrate.framework_logs import torchtitan_log, torchtitan_validation

    text = torchtitan_log(TT_STEPS, memory_gib=TT_MEMORY, color=color)
    text += torchtitan_validation(20, tps=100.0, memory_gib=79.0) + "\n"   # not a step
    write("train.log", text)
    runs = write("runs.yaml", f"runs:\n  - {{model: llama3-8b, gpus: 16, config: {titan}, "
                              f"log: train.log}}\n")
    (run,) = load_runs(runs, "dgx-h100")
    assert (run.strategy.dp, run.strategy.micro_batch, run.strategy.global_batch) == (16, 1, 64)
    assert run.problem.framework.name == "torchtitan"
    # tps is per GPU (metrics.py: tokens / (seconds x non-data-parallel size) on each data-
    # parallel rank): step = 64 x 8192 tokens / (median tps after step 1 x 16 GPUs). Step 1
    # (900 tps: the start-up) is dropped; each later step is printed by both ranks, so the
    # median of 4410, 4400, 4390, 4405 (twice each) is (4400 + 4405) / 2.
    median = (4400.0 + 4405.0) / 2
    assert run.step_s == pytest.approx(64 * 8192 / (median * 16), rel=1e-12)
    # 'memory:' is the reserved peak of each interval; the fullest is rank 0 at step 5.
    assert run.logged_memory.reserved_bytes == 61.25 * 2**30
    assert run.logged_memory.allocated_bytes is None


def test_a_torchtitan_log_alone_asks_for_its_config(write):
    from tests.calibrate.framework_logs import torchtitan_log

    write("train.log", torchtitan_log(TT_STEPS, memory_gib=TT_MEMORY))
    runs = write("runs.yaml", "runs:\n  - {model: llama3-8b, gpus: 16, log: train.log}\n")
    with pytest.raises(InputError) as e:
        load_runs(runs, "dgx-h100")
    assert str(e.value).endswith("runs[0]: train.log is a torchtitan log, which does not hold "
                                 "the run's config (torchtitan prints it only with "
                                 "debug.print_config): name the config too, e.g. config: "
                                 "torchtitan_recipe.py")


@pytest.mark.parametrize("steps, message", [
    ({1: 900.0}, "train.log: 1 logged step after the start of training; the first holds the "
                 "start-up, so log at least two (metrics.log_freq)"),
    ({}, "train.log: neither a Megatron-LM log"),
])
def test_a_cut_torchtitan_log_is_one_line(write, titan, steps, message):
    from tests.calibrate.framework_logs import torchtitan_log

    write("train.log", torchtitan_log(steps, memory_gib={1: 50.0}))
    runs = write("runs.yaml", f"runs:\n  - {{model: llama3-8b, gpus: 16, config: {titan}, "
                              f"log: train.log}}\n")
    with pytest.raises(InputError) as e:
        load_runs(runs, "dgx-h100")
    assert message in str(e.value) and "\n" not in str(e.value)
