"""torch.compile as a run setting (training.compile): torchtitan's layers priced as eager PyTorch
ops when it does not compile, fused when it does; no effect where the framework runs fused
kernels of its own (Megatron-LM). The eager bytes per element are PyTorch's own dispatch
(tests/golden/test_pytorch_measured.py); the held-out check is torchtitan's December 2024
eager / torch.compile pairs, which nothing was fitted on."""

import pytest
import yaml

from bench.published import DATA
from cost_models.compute import (EAGER_BYTES_PER_ELEMENT, eager_layer_elementwise_bytes,
                                 transformer_layer_elementwise_bytes)
from cost_models.enums import AttentionKind, MlpKind, NormKind, PositionKind, ZeroStage
from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem, resolve_strategy
from planner.schemas.strategy import Strategy

# Llama 3 8B, micro-batch 2 of 8,192 tokens, one TP rank.
LLAMA3_8B = dict(seq_len=8192, micro_batch=2, hidden=4096, num_heads=32, num_kv_heads=8,
                 head_dim=128, ffn_hidden=14336, mlp=MlpKind.SWIGLU,
                 position=PositionKind.ROTARY, norms_per_layer=2)


def test_eager_layer_bytes_add_up_the_ops():
    s, b = 8192, 2
    sbh, heads = s * b * 4096, s * b * 32 * 128
    forward, backward = eager_layer_elementwise_bytes(**LLAMA3_8B, norm=NormKind.RMSNORM, tp=1,
                                                      sequence_parallel=False)
    e = EAGER_BYTES_PER_ELEMENT
    for i, got in ((0, forward), (1, backward)):
        want = ((2 * e["rmsnorm"][i] + e["residual"][i]) * sbh + e["attn_out"][i] * heads
                + e["rotary"][i] * s * b * (32 + 8) * 128 + e["kv_repeat"][i] * 2 * heads
                + e["swiglu"][i] * s * b * 14336)
        assert got == pytest.approx(want)
    assert forward == pytest.approx(10.30e9, rel=1e-3)      # vs 3.09e9 fused
    fused = transformer_layer_elementwise_bytes(**LLAMA3_8B, attention=AttentionKind.FLASH,
                                                dropout=False, tp=1, sequence_parallel=False)
    assert fused == pytest.approx(3.087e9, rel=1e-3)


def test_eager_bytes_split_over_tensor_parallel_ranks():
    kw = dict(LLAMA3_8B, norm=NormKind.RMSNORM)
    one = eager_layer_elementwise_bytes(**kw, tp=1, sequence_parallel=False)
    sp = eager_layer_elementwise_bytes(**kw, tp=4, sequence_parallel=True)
    assert sp[0] == pytest.approx(one[0] / 4) and sp[1] == pytest.approx(one[1] / 4)
    no_sp = eager_layer_elementwise_bytes(**kw, tp=4, sequence_parallel=False)
    assert one[0] / 4 < no_sp[0] < one[0]           # norms and residuals on every rank


def test_native_kernels_cost_what_the_fused_formula_charges():
    """GeLU and LayerNorm are one kernel each even in eager PyTorch: a GPT-style layer run
    eager moves only the copies fusion avoids (attention output, no GQA repeat) more."""
    gpt = dict(LLAMA3_8B, num_kv_heads=32, mlp=MlpKind.GELU, position=PositionKind.LEARNED)
    eager_fwd, _ = eager_layer_elementwise_bytes(**gpt, norm=NormKind.LAYERNORM, tp=1,
                                                 sequence_parallel=False)
    fused = transformer_layer_elementwise_bytes(**gpt, attention=AttentionKind.FLASH,
                                                dropout=False, tp=1, sequence_parallel=False)
    attn_out = EAGER_BYTES_PER_ELEMENT["attn_out"][0] * 8192 * 2 * 4096
    assert eager_fwd == pytest.approx(fused + attn_out)


def _step(framework: str, compile: bool | None, **strategy):
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8, seq_len=8192, global_batch=16,
                           framework=framework, compile=compile)
    s = resolve_strategy(Strategy(tp=1, pp=1, micro_batch=2, zero_stage=ZeroStage(3),
                                  **strategy), problem)
    return problem, evaluate_strategy(problem, s)


def test_torchtitan_compiles_by_default_and_eager_is_slower():
    problem, default = _step("torchtitan", None)
    assert not problem.eager_elementwise
    _, compiled = _step("torchtitan", True)
    eager_problem, eager = _step("torchtitan", False)
    assert eager_problem.eager_elementwise
    assert default.time.step_s == compiled.time.step_s
    assert eager.time.step_s > 1.1 * compiled.time.step_s
    # Eager, the loss holds two more fp32 copies of the logits at its peak
    # (memory.eager_cross_entropy_working_bytes); the layers keep the same.
    assert eager.memory.peak_bytes > compiled.memory.peak_bytes
    assert eager.memory.stages[0].weights_bytes == compiled.memory.stages[0].weights_bytes


def test_compile_has_no_effect_on_megatron_and_says_so():
    problem, eager = _step("megatron", False)
    _, default = _step("megatron", None)
    assert not problem.eager_elementwise
    assert eager.time.step_s == default.time.step_s
    assert any("compile false has no effect with megatron" in n for n in problem.notes)


def test_async_tp_needs_compile_on_torchtitan():
    """torchtitan refuses async TP without compile ("Async TP requires 'model' in
    --compile.components and --compile.enable"): eager, its TP collectives run exposed."""
    def tp_step(compile):
        problem = make_problem("llama3-8b", "dgx-h100", gpus=8, seq_len=8192,
                               global_batch=16, framework="torchtitan", compile=compile)
        s = resolve_strategy(Strategy(tp=8, pp=1, micro_batch=2, sequence_parallel=True,
                                      tp_comm_overlap=True, zero_stage=ZeroStage(3)), problem)
        return evaluate_strategy(problem, s).time
    assert tp_step(True).tp_comm_s < tp_step(False).tp_comm_s


def _pairs():
    runs = yaml.safe_load((DATA / "torchtitan_llama31_h100_202412.yaml").read_text())["runs"]
    by_name = {r["name"]: r for r in runs}
    return [(by_name[f"tt-llama31-8b-h100-{n}-fsdp-eager-bf16"],
             by_name[f"tt-llama31-8b-h100-{n}-fsdp-compile-bf16"]) for n in (8, 128)]


@pytest.mark.parametrize("pair", _pairs(), ids=("8", "128"))
def test_eager_over_compiled_against_torchtitans_measured_pairs(pair, tmp_path):
    """Held out: torchtitan's December 2024 Llama 3.1 8B rows on 8 and 128 H100 (FSDP, local
    batch 2, per-op selective checkpointing) measured 5,762 / 6,667 and 5,605 / 6,514 tokens/s
    per GPU without and with torch.compile: eager steps 1.157x and 1.162x as long. Priced with
    PyTorch's op counts (the complex rotary embedding eager in both), 1.18x: within 3% on the
    ratio."""
    from bench.published import load_runs, predict

    eager, compiled = pair
    runs, _ = load_runs(tmp_path, only={("torchtitan_llama31_h100_202412", eager["name"]),
                                        ("torchtitan_llama31_h100_202412", compiled["name"])})
    by_name = {p.run.name: p for p in predict(runs)}
    measured = (compiled["measured"]["tokens_per_s_per_gpu"]
                / eager["measured"]["tokens_per_s_per_gpu"])
    predicted = (by_name[eager["name"]].report.time.step_s
                 / by_name[compiled["name"]].report.time.step_s)
    assert measured == pytest.approx(1.16, abs=0.01)
    assert predicted == pytest.approx(measured, rel=0.03)
    assert predicted > measured                     # eager priced a little slow, not fast


EAGER_KERNELS = DATA / "kernels_h100_eager.json"


def test_compiled_complex_rotary_is_priced_eager():
    """torch.compile leaves torchtitan's complex-number rotary embedding eager (measured: the
    same time compiled and eager): compiled, it moves its eager bytes less the fused kernel's."""
    from cost_models.compute import complex_rotary_extra_bytes

    forward, backward = complex_rotary_extra_bytes(seq_len=8192, micro_batch=2, num_heads=32,
                                                   num_kv_heads=8, head_dim=128, tp=1)
    elements = 8192 * 2 * 40 * 128
    assert forward == pytest.approx((20.4 - 4) * elements)
    assert backward == pytest.approx((21.2 - 6) * elements)
    _, with_complex = _step("torchtitan", True)
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8, seq_len=8192, global_batch=16,
                           framework="torchtitan", compile=True)
    from dataclasses import replace
    plain = replace(problem, framework=problem.framework.model_copy(
        update={"complex_rotary": False}))
    s = resolve_strategy(Strategy(tp=1, pp=1, micro_batch=2, zero_stage=ZeroStage(3)), plain)
    without = evaluate_strategy(plain, s)
    # One micro-batch (16 sequences over dp 8, mb 2), no recompute: 32 layers' forward and
    # backward extra bytes at the H100's memory-bound rate.
    assert s.recompute.value == "none"
    extra = with_complex.time.compute_s - without.time.compute_s
    rate = problem.cluster.gpu.hbm_gb_per_s * 1e9 * problem.cluster.efficiency.hbm_fraction
    assert extra == pytest.approx(32 * (forward + backward) / rate, rel=1e-6)


def test_eager_byte_counts_give_the_measured_eager_kernel_times():
    """Held out: the byte counts come from PyTorch's dispatch on the CPU; the times from an
    H100 running the same ops (bench/device_kernels.py --sections eager, Llama 3 8B shapes,
    bench/data/kernels_h100_eager.json). At the rate a plain copy reaches there (2.96 TB/s),
    the counted bytes take 78-100% of each measured eager time, forward and backward."""
    import json

    rows = {r["op"]: r for r in json.loads(EAGER_KERNELS.read_text())["rows"]
            if r.get("section") == "eager"}
    rate = rows["copy_1GiB"]["gb_per_s_read_plus_write"] * 1e9
    assert rate == pytest.approx(2.96e12, rel=0.01)
    e = EAGER_BYTES_PER_ELEMENT
    for op, name in (("rmsnorm", "rmsnorm"), ("rotary", "rotary"), ("swiglu", "swiglu")):
        r = rows[op]
        forward, backward = e[name]
        assert forward * r["elements"] / rate == pytest.approx(r["eager_fwd_s"], rel=0.25), op
        assert (forward + backward) * r["elements"] / rate == pytest.approx(
            r["eager_fwd_bwd_s"], rel=0.20), op


def test_eager_passes_reach_the_measured_share_of_hbm_on_each_hopper():
    """The eager RMSNorm, rotary and SwiGLU passes (six, forward and backward), timed on the
    GPU (bench/device_kernels.py --sections eager) with the bytes PyTorch dispatches: on the
    H100 their mean share of the datasheet bandwidth is the preset's `hbm_fraction` (0.8,
    assumed, checked); on the H200 it is lower, 0.716: the passes with fp32 math (RMSNorm,
    rotary) speed up 1.21-1.23x for the 1.43x bandwidth. The H200 keeps 0.8, which streaming
    kernels reach there (a copy 0.87, the SwiGLU product 0.85-0.89, Transformer Engine's casts
    0.79: test_fp8.py), so eager runs are priced fast on it."""
    from bench.eager_hbm_share import passes, share
    from planner.inputs.loader import load_cluster

    h100, h200 = (EAGER_KERNELS.parent / name for name in ("kernels_h100_eager.json",
                                                            "kernels_h200_eager.json"))
    assert share(h100) == pytest.approx(0.789, abs=0.001)
    assert share(h200) == pytest.approx(0.716, abs=0.001)
    assert load_cluster("dgx-h100").efficiency.hbm_fraction == pytest.approx(share(h100),
                                                                             abs=0.012)
    _, datasheet, measured = passes(h200)
    swiglu = [gb / datasheet for op, _, gb in measured if op == "swiglu"]
    assert min(swiglu) > load_cluster("dgx-h200").efficiency.hbm_fraction > share(h200)


def test_torch_compile_fuses_the_norm_and_activation_not_complex_rotary():
    """Measured on the H100: torch.compile makes torchtitan's RMSNorm 6.4x and the SwiGLU
    product 1.6x faster (forward and backward), and leaves its complex-number rotary embedding
    as it was (Inductor: "does not support code generation for complex operators"): priced
    fused when compiled, the rotary part is priced fast (left out, see the README)."""
    import json

    rows = {r["op"]: r for r in json.loads(EAGER_KERNELS.read_text())["rows"]
            if r.get("section") == "eager"}
    speedup = {op: rows[op]["eager_fwd_bwd_s"] / rows[op]["compiled_fwd_bwd_s"]
               for op in ("rmsnorm", "rotary", "swiglu")}
    assert speedup["rmsnorm"] == pytest.approx(6.4, rel=0.05)
    assert speedup["swiglu"] == pytest.approx(1.59, rel=0.05)
    assert speedup["rotary"] == pytest.approx(1.0, abs=0.05)


def test_per_op_checkpointing_repeats_the_tp_all_gathers_not_the_reduce_scatters():
    """torchtitan's per-op policy saves matmuls, attention and reduce_scatter_tensor
    (parallelize.py _save_list): its recompute runs the forward's all-gathers again, half of
    each sequence-parallel all-gather / reduce-scatter pair: 2.5 passes of TP traffic where no
    recompute has 2 and full recompute 3."""
    from cost_models.enums import Recompute

    def tp_s(recompute):
        problem = make_problem("llama3-8b", "dgx-h100", gpus=8, seq_len=8192,
                               global_batch=16, framework="torchtitan")
        s = resolve_strategy(Strategy(tp=8, pp=1, micro_batch=2, sequence_parallel=True,
                                      tp_comm_overlap=False, recompute=recompute,
                                      zero_stage=ZeroStage(3)), problem)
        return evaluate_strategy(problem, s).time.tp_comm_s
    none = tp_s(Recompute.NONE)
    # (an all-gather takes about half its pair: NCCL's all-gather and reduce-scatter differ a
    # little in latency)
    assert tp_s(Recompute.SELECTIVE) == pytest.approx(1.25 * none, rel=0.01)
    assert tp_s(Recompute.FULL) == pytest.approx(1.5 * none, rel=0.01)
