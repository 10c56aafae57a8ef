"""What the one-line input errors say (issue 27 points 7 to 9): a directory given for a file,
every missing field named, and Megatron-LM / NeMo / torchtitan / DeepSpeed names answered
with the planner's own."""

from __future__ import annotations

import pytest

from tests.conftest import SMALL_CLUSTER, TINY_MODEL


def _error(cli, *args) -> str:
    code, _, err = cli(*args)
    assert code == 2 and len(err.splitlines()) == 1, err
    return err.rstrip("\n")


@pytest.mark.parametrize(("files", "suggested"), [
    ({"model.yaml": TINY_MODEL}, "model.yaml"),
    ({"config.json": "{}"}, "config.json"),
    ({"notes.txt": "", "my-model.yaml": TINY_MODEL}, "my-model.yaml"),
    ({}, None),
])
def test_a_directory_as_model(cli, tmp_path, small_cluster, files, suggested):
    folder = tmp_path / "llama"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    hint = (f" (did you mean '{folder / suggested}'?)" if suggested else ", and it holds none")
    assert _error(cli, "plan", str(folder), small_cluster) == (
        f"Error: {folder}: is a directory; expected a model.yaml or a Hugging Face config.json "
        f"file{hint}")


def test_a_directory_as_cluster(cli, tmp_path, tiny_model, monkeypatch):
    (tmp_path / "site").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _error(cli, "plan", tiny_model, "site") == (
        "Error: site: is a directory; expected a cluster.yaml file, and it holds none")
    (tmp_path / "site" / "cluster-a.yaml").write_text(SMALL_CLUSTER)
    assert _error(cli, "plan", tiny_model, "site") == (
        "Error: site: is a directory; expected a cluster.yaml file (did you mean "
        "'site/cluster-a.yaml'?)")


def test_a_zoo_name_wins_over_a_directory_of_that_name(cli, tmp_path, monkeypatch):
    (tmp_path / "llama2-7b").mkdir()
    (tmp_path / "dgx-h100").mkdir()
    monkeypatch.chdir(tmp_path)
    code, _, _ = cli("plan", "llama2-7b", "dgx-h100", "--gpus", "8", "--top", "1", "--json")
    assert code == 0


@pytest.mark.parametrize(("name", "text", "message"), [
    # Every missing field by name, not the first and "(+2 more)".
    ("model.yaml", "name: x\nnum_layers: 4\n",
     "required fields are missing: hidden, num_heads, vocab_size"),
    ("cluster.yaml", "name: c\nnum_nodes: 2\ngpus_per_node: 8\ngpu: {name: g}\n"
     "intra_node: {kind: nvlink, bandwidth_gb_per_s: 1, latency_us: 1}\n"
     "inter_node: {kind: infiniband, bandwidth_gb_per_s: 1, latency_us: 1}\n",
     "required fields are missing: gpu.memory_gib, gpu.peak_tflops, gpu.hbm_gb_per_s, reserve, "
     "efficiency"),
    # One missing field reads as before; other errors name the fields of the rest.
    ("model.yaml", TINY_MODEL.replace("hidden: 64\n", ""), "hidden: required field is missing"),
    ("strategy.yaml", "tp: x\npp: y\nbogus: 1\n", "bogus: unknown field (+2 more: tp, pp)"),
])
def test_every_field_in_error_is_named(cli, write, tiny_model, small_cluster, name, text,
                                       message):
    path = write(name, text)
    files = {"model.yaml": tiny_model, "cluster.yaml": small_cluster,
             "strategy.yaml": write("s.yaml", "tp: 1\n"), name: path}
    assert _error(cli, "memory", files["model.yaml"], files["cluster.yaml"],
                  files["strategy.yaml"]) == f"Error: {path}: {message}"


@pytest.mark.parametrize(("key", "meant"), [
    ("tensor_parallel", "tp"),                    # spelling alone says sequence_parallel
    ("tensor_model_parallel_size", "tp"),
    ("pipeline_model_parallel_size", "pp"),
    ("pipeline_parallel", "pp"),
    ("data_parallel_size", "dp"),
    ("virtual_pipeline_model_parallel_size", "vpp"),
    ("context_parallel_size", "cp"),
    ("expert_model_parallel_size", "ep"),
    ("expert_tensor_parallel_size", "etp"),
    ("micro_batch_size", "micro_batch"),
    ("train_micro_batch_size_per_gpu", "micro_batch"),
    ("global_batch_size", "global_batch"),
    ("tensor-model-parallel-size", "tp"),
])
def test_other_frameworks_names_in_a_strategy(cli, write, tiny_model, small_cluster, key,
                                              meant):
    strategy = write("strategy.yaml", f"{key}: 2\n")
    assert _error(cli, "memory", tiny_model, small_cluster, strategy) == (
        f"Error: {strategy}: {key}: unknown field (did you mean '{meant}'?)")


def test_a_training_setting_in_the_wrong_file(cli, write, tiny_model, small_cluster):
    strategy = write("strategy.yaml", "seq_length: 4096\n")
    assert _error(cli, "memory", tiny_model, small_cluster, strategy) == (
        f"Error: {strategy}: seq_length: unknown field (the planner's seq_len, which this "
        f"file does not set)")
    model = write("m.yaml", TINY_MODEL + "seq_length: 256\n")
    assert _error(cli, "memory", model, small_cluster, strategy) == (
        f"Error: {model}: seq_length: unknown field (did you mean 'training.seq_len'?)")
    model = write("m.yaml", TINY_MODEL.replace("num_layers", "num_hidden_layers"))
    assert _error(cli, "memory", model, small_cluster, strategy) == (
        f"Error: {model}: num_hidden_layers: unknown field (did you mean 'num_layers'?)")


def test_megatron_option_names_on_the_command_line(cli, tiny_model, small_cluster):
    ours = cli("plan", tiny_model, small_cluster, "--tp", "2", "--pp", "1", "--micro-batch",
               "1", "--global-batch", "16", "--seq-len", "64", "--cp", "1", "--json")
    megatrons = cli("plan", tiny_model, small_cluster, "--tensor-model-parallel-size", "2",
                    "--pipeline-model-parallel-size", "1", "--micro-batch-size", "1",
                    "--global-batch-size", "16", "--seq-length", "64",
                    "--context-parallel-size", "1", "--json")
    assert ours[0] == 0 and megatrons == ours
    for flag, ours in (("--expert-model-parallel-size", "--ep"),
                       ("--expert-tensor-parallel-size", "--etp"),
                       ("--num-virtual-stages-per-pipeline-rank", "--vpp")):
        code, _, err = cli("plan", tiny_model, small_cluster, flag, "0")
        assert (code, err) == (2, f"Error: Invalid value for '{ours}': 0 is not in the range "
                                  f"1<=x<=16777216. (see 'planner plan --help')\n")
