"""Shared fixtures: a tiny model, a small cluster, and a CLI runner that returns
(exit code, stdout, stderr)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from planner.cli import run

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

TINY_MODEL = """\
name: tiny
num_layers: 4
hidden: 64
num_heads: 8
vocab_size: 512
training:
  seq_len: 128
  global_batch: 32
  precision: bf16
"""

SMALL_CLUSTER = """\
name: small
num_nodes: 2
gpus_per_node: 4
gpu:
  name: test-gpu
  memory_gib: 16
  peak_tflops: {fp32: 10, fp16: 100, bf16: 100}
  hbm_gb_per_s: 1000
intra_node: {kind: nvlink, bandwidth_gb_per_s: 100, latency_us: 3}
inter_node: {kind: infiniband, bandwidth_gb_per_s: 10, latency_us: 10}
reserve: {framework_gib: 1.0, fragmentation_fraction: 0.05}
efficiency:
  gemm_peak_fraction: 0.6
  gemm_half_efficiency_k: 0
  flash_attention_fraction: 0.5
  hbm_fraction: 0.8
  intra_node_bus_fraction: 0.8
  inter_node_bus_fraction: 0.9
  overlap_interference: 0.1
  step_overhead_s: 0.0
"""


TINY_MOE_DENSE = """
    name: tiny-moe
    num_layers: 8
    hidden: 512
    num_heads: 8
    ffn_hidden: 2048
    vocab_size: 32000
    mlp: swiglu
    norm: rmsnorm
    position: rotary
    bias: false
    dropout: false
    training: {{seq_len: {seq_len}, global_batch: 64}}
    """
TINY_MOE_EXPERTS = """
    num_experts: 8
    top_k: 2
    moe_ffn_hidden: 512
    first_k_dense: 2
    mtp_layers: 1
    """
"""A small chain of unlike layers (two dense-first, six MoE, an MTP module), and without the
experts a chain of like ones: the layout tests' models (format `seq_len`)."""


def compositions(total: int, parts: int):
    """Every way to give `parts` pipeline chunks at least one of `total` layers, in order."""
    if parts == 1:
        yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in compositions(total - first, parts - 1):
            yield (first, *rest)


@pytest.fixture
def write(tmp_path: Path):
    """write(name, text) -> path of a file in a temporary directory."""

    def _write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    return _write


@pytest.fixture
def tiny_model(write) -> str:
    return write("model.yaml", TINY_MODEL)


@pytest.fixture
def small_cluster(write) -> str:
    return write("cluster.yaml", SMALL_CLUSTER)


@pytest.fixture
def cli(capsys):
    """cli(*args) -> (exit code, stdout, stderr)."""

    def _cli(*args: str):
        code = run(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return _cli
