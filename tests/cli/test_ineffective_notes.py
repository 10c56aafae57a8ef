"""Settings with no effect are said, never passed over: `note:` lines and JSON `notes` from
validate, memory, plan and sweep, and what Megatron-LM scripts hold (planner/rules/
ineffective.py)."""

from __future__ import annotations

import json

NOTES = [
    "num_servers 4 has no effect with dp_comm all_reduce: only a parameter server has servers",
    "cp_comm a2a has no effect at cp 1: no context-parallel ranks exchange keys and values",
    "cp_a2a 2 has no effect with cp_comm a2a: only a2a+p2p runs an inner all-to-all group",
    "sequence_parallel has no effect at tp 1: it splits activations over the tensor-parallel "
    "ranks (Megatron-LM turns it off, with a warning)",
    "tp_comm_overlap has no effect at tp 1: there are no tensor-parallel collectives to overlap",
    "fp8_param_gather has no effect in bf16: only FP8 linear weights are gathered in FP8",
    "etp 2 has no effect on llama3-8b: a dense model has no routed experts to split",
]
STRATEGY = """\
tp: 1
pp: 1
micro_batch: 1
recompute: full
zero_stage: 1
sequence_parallel: true
tp_comm_overlap: true
num_servers: 4
cp_comm: a2a
cp_a2a: 2
fp8_param_gather: true
etp: 2
"""
"""llama3-8b on 8 H100s: valid and fits, with seven settings that do nothing."""


def _flat(text: str) -> str:
    return " ".join(text.split())      # rich wraps long lines at the terminal width


def test_validate_notes_each_setting_without_effect(cli, write):
    path = write("strategy.yaml", STRATEGY)
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "8",
                         "--no-compare", "--json")
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert result["valid"] and result["notes"] == NOTES
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "8",
                         "--no-compare")
    assert (code, err) == (0, "")
    for note in NOTES:
        assert f"note: {note}" in _flat(out)


def test_memory_notes_on_stderr_and_in_json(cli, write):
    path = write("strategy.yaml", STRATEGY)
    code, out, err = cli("memory", "llama3-8b", "dgx-h100", path, "--gpus", "8", "--json")
    assert code == 0
    assert err.splitlines() == [f"note: {note}" for note in NOTES]
    assert json.loads(out)["notes"] == NOTES


def test_a_strategy_whose_settings_all_act_has_no_note(cli, write):
    path = write("strategy.yaml", "tp: 2\npp: 1\nmicro_batch: 1\nzero_stage: 1\n"
                                  "sequence_parallel: true\ntp_comm_overlap: true\n")
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "8",
                         "--no-compare", "--json")
    assert (code, err) == (0, "") and json.loads(out)["notes"] == []


PLAN_NOTES = [
    "tp_comm_overlap has no effect without sequence_parallel: what it overlaps are sequence "
    "parallelism's all-gathers and reduce-scatters",
    "etp 1 has no effect on llama2-7b: a dense model has no routed experts to split",
    "cp_comm a2a has no effect at cp 1: no context-parallel ranks exchange keys and values",
]


def test_plan_notes_pins_without_effect(cli):
    # llama2-7b's 4,096 tokens never split over CP ranks (the search keeps 4,096 per rank):
    # every plan runs cp 1, so --cp-comm a2a does nothing; a dense model has no experts.
    code, out, err = cli("plan", "llama2-7b", "dgx-h100", "--gpus", "8", "--tp", "2", "--no-sp",
                         "--tp-comm-overlap", "--etp", "1", "--cp-comm", "p2p", "--cp-comm",
                         "a2a", "--top", "2", "--json")
    assert code == 0
    assert err.splitlines() == [f"note: {note}" for note in PLAN_NOTES]
    assert json.loads(out)["notes"] == PLAN_NOTES
    code, out, err = cli("plan", "llama2-7b", "dgx-h100", "--gpus", "8", "--tp", "2", "--sp",
                         "--tp-comm-overlap", "--top", "2", "--json")
    assert (code, err) == (0, "") and json.loads(out)["notes"] == []


def test_sweep_notes_pins_without_effect(cli):
    code, out, err = cli("sweep", "llama2-7b", "dgx-h100", "--gpus", "8,16", "--tp", "2",
                         "--no-sp", "--tp-comm-overlap", "--json")
    assert code == 0
    assert err.splitlines() == [f"note: {PLAN_NOTES[0]}"]
    assert json.loads(out)["notes"] == [PLAN_NOTES[0]]


MEGATRON = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
            "--micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer "
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 ")


def _validate_megatron(cli, write, flags):
    path = write("args.txt", MEGATRON + flags + "\n")
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "8",
                         "--no-compare", "--json")
    result = json.loads(out)
    return code, result["notes"], [(v["rule"], v["message"], v["fix"])
                                   for v in result["violations"]]


def test_megatron_fp8_param_gather_without_fp8_is_a_note(cli, write):
    code, notes, findings = _validate_megatron(
        cli, write, "--tensor-model-parallel-size 1 --fp8-param-gather")
    assert (code, findings) == (0, [])
    assert notes == [NOTES[5]]


def test_megatron_sequence_parallel_at_tp_1_is_a_note(cli, write):
    code, notes, findings = _validate_megatron(
        cli, write, "--tensor-model-parallel-size 1 --sequence-parallel")
    assert (code, findings, notes) == (0, [], [NOTES[3]])


def test_megatron_tp_comm_overlap_at_tp_1_stops_megatron(cli, write):
    # arguments.py turns sequence parallelism off at tp 1, then asserts tp_comm_overlap needs
    # it: a finding (exit 1), and the strategy is priced without the overlap (no note on it).
    code, notes, findings = _validate_megatron(
        cli, write, "--tensor-model-parallel-size 1 --sequence-parallel --tp-comm-overlap")
    assert code == 1 and notes == [NOTES[3]]
    assert findings == [("megatron_flag", "Megatron-LM stops: --tp-comm-overlap needs "
                         "--sequence-parallel, which it turns off at tp 1",
                         "drop --tp-comm-overlap")]


def test_emit_drops_sequence_parallelism_that_does_nothing(cli, write, tmp_path):
    # A Megatron-LM script with --sequence-parallel at tp 1, written back out: the flag that
    # has no effect is not written again.
    path = write("args.txt", MEGATRON + "--tensor-model-parallel-size 1 --sequence-parallel\n")
    out_dir = tmp_path / "out"
    code, out, err = cli("emit", "llama3-8b", "dgx-h100", path, "--gpus", "8", "--target",
                         "megatron", "--out", str(out_dir))
    assert code == 0, err
    script = (out_dir / "pretrain_gpt.sh").read_text()
    assert "--tensor-model-parallel-size 1" in script
    assert "--sequence-parallel" not in script


def test_deepspeed_refuses_sequence_parallelism_only_where_it_would_act(cli, write):
    # DeepSpeed AutoTP has no sequence parallelism: a rule at tp > 1, a note at tp 1.
    for tp, rules, notes in ((1, [], [NOTES[3]]), (2, ["deepspeed_sequence_parallel"], [])):
        path = write("strategy.yaml", f"tp: {tp}\nmicro_batch: 1\nzero_stage: 1\n"
                                      f"recompute: full\nsequence_parallel: true\n")
        code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "8",
                             "--no-compare", "--target", "deepspeed", "--framework",
                             "deepspeed", "--json")
        result = json.loads(out)
        assert [v["rule"] for v in result["violations"]] == rules, err
        assert result["notes"] == notes and code == (1 if rules else 0)


def test_a_dense_model_says_its_expert_fields_do_nothing(cli, write):
    # num_experts 1: every layer is a dense MLP, so the routed experts' fields change nothing
    # (the pricing is the same without them), and the plan says so.
    dense = ("name: tiny-dense\nnum_layers: 4\nhidden: 512\nnum_heads: 8\nvocab_size: 1000\n"
             "mlp: swiglu\ntraining: {seq_len: 512, global_batch: 8}\n")
    plain, tagged = write("plain.yaml", dense), write("tagged.yaml", dense + (
        "top_k: 2\nrouter_bias: true\nglu_clamp: 7.0\n"))
    results = []
    for path in (plain, tagged):
        code, out, err = cli("plan", path, "dgx-h100", "--gpus", "8", "--top", "1", "--json")
        assert code == 0
        results.append(json.loads(out))
    assert results[0]["notes"] == []
    assert results[1]["notes"] == [
        "tiny-dense: top_k, router_bias, glu_clamp have no effect: num_experts is 1 (every "
        "layer a dense MLP); set num_experts for routed experts"]
    assert results[0]["plans"][0]["time"] == results[1]["plans"][0]["time"]
