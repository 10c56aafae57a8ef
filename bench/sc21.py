"""The ten weak-scaling runs of Megatron-LM's SC21 Table 1, as planner problems.

Narayanan et al. 2021 (arXiv:2104.04473), Table 1: GPT models of 1.7B to 1T parameters on 32
to 3,072 A100 80GB GPUs (Selene, DGX A100 nodes), with their strategies and the achieved
TFLOP/s per GPU, counting the recompute pass (Eq. 3). The data file is a copy of
shared/data/sc21_table1.yaml. Used by bench/calibrate_sc21.py and tests/golden/test_sc21.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from bench.published import with_overrides
from cost_models.enums import AttentionKind, Precision, Recompute
from planner.costing.evaluate import evaluate_strategy
from planner.core.problem import Problem
from planner.inputs.loader import make_problem
from planner.schemas.cluster import ClusterSpec
from planner.schemas.strategy import Strategy

DATA = Path(__file__).resolve().parent.parent / "tests" / "golden" / "data" / "sc21_table1.yaml"
CLUSTER = "dgx-a100-80gb"
ZOO_NAMES = {"gpt-1008.0B": "gpt-1t"}
"""Zoo names of the rows, where they differ from the lower-cased row name."""


@dataclass(frozen=True)
class Row:
    name: str
    problem: Problem
    strategy: Strategy
    measured_tflops: float


@dataclass(frozen=True)
class Prediction:
    name: str
    measured_tflops: float
    predicted_tflops: float

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.predicted_tflops / self.measured_tflops - 1


DDP_IMPL = {"gpt-1.7B": "torch", "gpt-3.6B": "torch", "gpt-7.5B": "torch", "gpt-18.4B": "torch",
            "gpt-39.1B": "local", "gpt-76.1B": "local", "gpt-145.6B": "local",
            "gpt-310.1B": "local", "gpt-529.6B": "local", "gpt-1008.0B": "local"}
"""Each row's data-parallel implementation, `DDP=` in the paper's script
(examples/sc21/run_table_1.sh @de7dc40f88): PyTorch's DistributedDataParallel ("torch")
all-reduces gradient buckets while the backward pass runs; Megatron-LM's own of 2021 ("local")
all-reduced them after it (training.py, train_step: model.allreduce_gradients() after
forward_backward_func), with no overlap. PyTorch's overlapped only without a pipeline: the
pipelined schedules had no no_sync (schedules.py @de7dc40f88, only
forward_backward_no_pipelining enters it), so it would all-reduce on every micro-batch; the
script runs it only where pp is 1."""


def rows(cluster: ClusterSpec | None = None) -> list[Row]:
    """The runs as (problem, strategy); `cluster` replaces the preset (for calibration)."""
    out = []
    for run in yaml.safe_load(DATA.read_text())["runs"]:
        s = run["strategy"]
        zoo = ZOO_NAMES.get(run["name"], run["name"].lower())
        problem = make_problem(zoo, CLUSTER, gpus=run["cluster"]["num_gpus"],
                               global_batch=s["global_batch"])
        # All runs: fp16 mixed precision with loss scaling (Table 1 caption, run_table_1.sh).
        # Unfused attention: Megatron-LM of 2021 ran its fused scale-mask-softmax
        # (megatron/model/fused_softmax.py) and kept the s x s softmax output and dropout
        # mask for the backward pass (Korthikanti et al. 2022, Sec. 4.1: the 5as/h term);
        # FlashAttention came in 2022 (Dao et al., arXiv:2205.14135).
        # Megatron-LM of 2021 sent pipeline activations with blocking batched p2p: the
        # overlap_p2p_comm of the interleaved schedule arrived in May 2023 (commit f9283c5a8a,
        # "Add option to overlap p2p communication"; the default since October 2023). Its
        # interleaved schedule ran micro-batches in groups of pp only (groups of more came in
        # November 2024, commit 4295be1a6c). Its gradient all-reduce overlapped the backward
        # only without a pipeline (DDP_IMPL below).
        problem = with_overrides(problem, DATA.name,
                                 training={"precision": Precision.FP16.value,
                                           "attention": AttentionKind.UNFUSED.value},
                                 framework={"pipeline_p2p_overlap_interleaved": False,
                                            "micro_batch_groups": "pp",
                                            "overlap_grad_reduce_with_pipeline": False})
        problem = replace(problem, cluster=cluster or problem.cluster)
        layers_per_chunk = s["layers_per_virtual_stage"]
        per_stage = run["model"]["num_layers"] // s["pp"]
        vpp = 1 if layers_per_chunk is None else per_stage // layers_per_chunk
        strategy = Strategy(
            dp=s["dp"], tp=s["tp"], pp=s["pp"], vpp=vpp, micro_batch=s["micro_batch"],
            global_batch=s["global_batch"], recompute=Recompute.FULL,
            overlap_grad_reduce=DDP_IMPL[run["name"]] == "torch")
        out.append(Row(run["name"], problem, strategy, run["measured"]["tflops_per_gpu"]))
    return out


def predict(cluster: ClusterSpec | None = None) -> list[Prediction]:
    """Predicted hardware TFLOP/s per GPU (recompute included, as the table counts) per row."""
    return [Prediction(r.name, r.measured_tflops,
                       evaluate_strategy(r.problem, r.strategy).throughput
                       .hardware_tflops_per_gpu)
            for r in rows(cluster)]


def mean_absolute_error(predictions: list[Prediction]) -> float:
    return sum(abs(p.error) for p in predictions) / len(predictions)
