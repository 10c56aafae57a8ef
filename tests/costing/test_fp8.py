"""FP8 training: quantization cost and GEMM speed against Transformer Engine's published GEMM
profile, FP8 weight and activation bytes against the framework docs, the FP8 rules, and the
plan-level speed-up the issue asks for (1.2-1.9x over bf16 for a Llama-class model on H100)."""

from dataclasses import replace

import numpy as np
import pytest

from cost_models.compute import Gemm, gemm_time_s
from cost_models.enums import AttentionKind, Fp8Recipe, MlpKind, Precision, Recompute, ZeroStage
from cost_models.fp8 import (fp8_copies_bytes, fp8_value_bytes, fp8_weight_bytes_per_param,
                             gemm_operand_bytes, quantize_bytes)
from cost_models.memory import transformer_layer_activation_bytes
from planner.core.candidates import Candidates
from planner.costing.evaluate import evaluate_strategy
from planner.errors import InfeasibleError, InputError
from planner.rules.gate import RuleOptions, degree_violations
from planner.core.rules import Rule
from planner.inputs.loader import load_cluster, make_problem, resolve_strategy
from planner.schemas.strategy import LaunchTarget, Strategy
from planner.search.candidates import SearchSpace
from planner.search.solver import SolverSettings, search

# Transformer Engine docs/examples/gemm_profiling/gemm_profiling.rst @d0067d0d: a 5B model
# (hidden 4096, MLP 16384, GeLU), M = 31 x 512 tokens, the 12 GEMMs of one layer on an H200 NVL,
# each op timed on its own under autocast: Fprop quantizes X and W, Dgrad dY and W, Wgrad X
# and dY. Per-layer ms: BF16 32.014, FP8 current 20.285, delayed 18.978, block 22.882.
TE_M, TE_H, TE_F = 31 * 512, 4096, 16384
TE_SHAPES = [(TE_H, 3 * TE_H), (TE_H, TE_H), (TE_H, TE_F), (TE_F, TE_H)]   # (K, N) per GEMM
TE_H200_MS = {None: 32.014, Fp8Recipe.TENSORWISE: 20.285, Fp8Recipe.DELAYED: 18.978,
              Fp8Recipe.BLOCKWISE: 22.882}


def _te_quantized_elements() -> float:
    return sum(2 * TE_M * k + 2 * TE_M * n + 2 * k * n for k, n in TE_SHAPES)


def _te_layer_s(cluster, recipe):
    gpu, eff = cluster.gpu, cluster.efficiency
    kw = dict(peak_flops=gpu.peak_flops(Precision.BF16), peak_fraction=eff.gemm_peak_fraction,
              half_efficiency_k=eff.gemm_half_efficiency_k, fill_dim=eff.gemm_fill_dim,
              hbm_bytes_per_s=gpu.hbm_gb_per_s * 1e9, hbm_fraction=eff.hbm_fraction)
    if recipe is not None:
        kw.update(peak_flops=gpu.peak_flops(Precision.FP8), bytes_per_value=1,
                  peak_fraction=eff.gemm_peak_fraction * eff.fp8_gemm_efficiency[recipe],
                  shape_loss_flops=gpu.peak_flops(Precision.BF16) * eff.gemm_peak_fraction)
    t = 0.0
    for k, n in TE_SHAPES:      # fprop M x K x N, dgrad M x N x K, wgrad K x M x N
        t += sum(gemm_time_s(g, **kw) for g in (Gemm(TE_M, n, k), Gemm(TE_M, k, n),
                                                Gemm(k, n, TE_M)))
    if recipe is not None:
        hbm = gpu.hbm_gb_per_s * 1e9 * eff.hbm_fraction
        t += quantize_bytes(_te_quantized_elements(), recipe, transpose_free=False) / hbm
    return t


@pytest.mark.parametrize(("speedup", "peak_ratio", "preset", "recipe"), [
    # Transformer Engine's GEMM profile of a 5B layer (docs/examples/gemm_profiling and
    # features/low_precision_training/speedups), pre-quantized, its 12 GEMMs together.
    (1.90, 2, "dgx-h100", Fp8Recipe.TENSORWISE),     # H200: 31.97 / 16.79 ms
    (1.90, 2, "dgx-h200", Fp8Recipe.DELAYED),
    (1.92, 2, "dgx-b300", Fp8Recipe.TENSORWISE),     # B300: 13.10 / 6.81 ms
    (1.83, 2, "gb300-nvl72", Fp8Recipe.MXFP8),        # B300: 13.10 / 7.16 ms
    (3.55, 6, "dgx-b300", Fp8Recipe.NVFP4),
])
def test_low_precision_efficiency_is_what_transformer_engine_measured(speedup, peak_ratio,
                                                                      preset, recipe):
    from cost_models.compute import low_precision_gemm_efficiency

    cluster = load_cluster(preset)
    eff = cluster.efficiency
    gemms = [g for k, n in TE_SHAPES for g in (Gemm(TE_M, n, k), Gemm(TE_M, k, n),
                                                 Gemm(k, n, TE_M))]
    derived = low_precision_gemm_efficiency(speedup, gemms=gemms, peak_ratio=peak_ratio,
                                            half_efficiency_k=eff.gemm_half_efficiency_k,
                                            fill_dim=eff.gemm_fill_dim)
    assert eff.fp8_gemm_efficiency[recipe] == pytest.approx(derived, abs=0.001)
    # and gemm_time_s gives the speed-up back on the profile's layer
    bf16 = dict(peak_flops=cluster.gpu.peak_flops(Precision.BF16),
                peak_fraction=eff.gemm_peak_fraction,
                half_efficiency_k=eff.gemm_half_efficiency_k, fill_dim=eff.gemm_fill_dim,
                hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9, hbm_fraction=eff.hbm_fraction)
    low = dict(bf16, peak_flops=bf16["peak_flops"] * peak_ratio, bytes_per_value=1,
               peak_fraction=eff.gemm_peak_fraction * derived,
               shape_loss_flops=bf16["peak_flops"] * eff.gemm_peak_fraction)
    layer = sum(gemm_time_s(g, **bf16) for g in gemms) / sum(gemm_time_s(g, **low) for g in gemms)
    assert layer == pytest.approx(speedup, rel=1e-5)   # the HBM side joins the roofline smoothly


def _h100_fp8_log_errors(mode: str) -> list[float]:
    """log(model / measured) of the FP8 / bf16 speed-up on the H100's kernel times
    (bench/data/kernels_h100_fp8_shapes.json, fast accumulation), with the shape loss paid as
    the planner does ("planner") or all at the FP8 rate ("fp8")."""
    import json
    import math
    from pathlib import Path

    rows = [r for r in json.loads((Path(__file__).resolve().parents[2] / "bench" / "data"
                                   / "kernels_h100_fp8_shapes.json").read_text())["rows"]
            if r.get("section") == "fp8_shapes" and not r["shape"].startswith("te ")]
    cluster = load_cluster("dgx-h100")
    gpu, eff = cluster.gpu, cluster.efficiency
    bf16 = dict(peak_flops=gpu.peak_flops(Precision.BF16), peak_fraction=eff.gemm_peak_fraction,
                half_efficiency_k=eff.gemm_half_efficiency_k, fill_dim=eff.gemm_fill_dim,
                hbm_bytes_per_s=gpu.hbm_gb_per_s * 1e9, hbm_fraction=eff.hbm_fraction)
    fp8 = dict(bf16, peak_flops=gpu.peak_flops(Precision.FP8), bytes_per_value=1,
               peak_fraction=eff.gemm_peak_fraction * eff.fp8_gemm_efficiency[Fp8Recipe.TENSORWISE])
    bf16_rate = bf16["peak_flops"] * bf16["peak_fraction"]
    out = []
    for r in rows:
        g = Gemm(r["m"], r["n"], r["k"])
        loss_rate = bf16_rate if mode == "planner" else None
        fp8_s = gemm_time_s(g, **fp8, shape_loss_flops=loss_rate)
        out.append(math.log(gemm_time_s(g, **bf16) / fp8_s
                            / (r["fp8_fast_tflops"] / r["bf16_tflops"])))
    return out


def test_fp8_speedup_falls_with_k_as_measured_on_an_h100():
    """Held out: kernel times on an H100 (bench/device_kernels.py --sections fp8_shapes,
    CUDA-graph replays), 42 GEMMs: 256 to 16,384 tokens, k 512-16,384, GPT-3 175B's tp 4 and
    tp 8 shards at 1K-8K tokens, bf16 against tensorwise FP8 (fast accumulation, Transformer
    Engine's fprop), measured 1.14x to 2.11x. With the short-k loss paid at the bf16 rate the
    model follows them: log error mean +0.056, RMS 0.116 (worst +0.38: 256 tokens per expert,
    where few tiles leave FP8 little to gain); the GPT-3 shards by tokens +0.016 on average.
    The mean is the preset's rate: derived from Transformer Engine's 1.90x on an H200 layer,
    where these H100 kernels give 1.86x on the sustained grid (bench/fit_gemm_shape.py). All
    of it at the FP8 rate (a shape-independent speed-up) is 12% high on average (log +0.111,
    RMS 0.17)."""
    import math

    errors = _h100_fp8_log_errors("planner")
    assert len(errors) == 42
    assert abs(sum(errors) / len(errors)) < 0.07
    assert math.sqrt(sum(e * e for e in errors) / len(errors)) < 0.13
    assert abs(sum(errors[-24:]) / 24) < 0.05                   # the GPT-3 shards by tokens
    flat = _h100_fp8_log_errors("fp8")
    assert sum(flat) / len(flat) > sum(errors) / len(errors) + 0.04
    assert math.sqrt(sum(e * e for e in flat) / len(flat)) > 0.15


def test_current_scaling_costs_one_more_read_than_delayed():
    # TE: current scaling reads each tensor twice (amax, then cast), delayed once. The gap in
    # TE's H200 profile, 20.285 - 18.978 = 1.307 ms per layer, is that extra bf16 read of every
    # tensor the benchmark quantizes, at the preset's achieved HBM bandwidth.
    cluster = load_cluster("dgx-h200")
    hbm = cluster.gpu.hbm_gb_per_s * 1e9 * cluster.efficiency.hbm_fraction
    elements = _te_quantized_elements()
    gap = (quantize_bytes(elements, Fp8Recipe.TENSORWISE, transpose_free=False)
           - quantize_bytes(elements, Fp8Recipe.DELAYED, transpose_free=False)) / hbm
    measured = (TE_H200_MS[Fp8Recipe.TENSORWISE] - TE_H200_MS[Fp8Recipe.DELAYED]) / 1e3
    assert gap == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("recipe", [Fp8Recipe.DELAYED, Fp8Recipe.TENSORWISE,
                                    Fp8Recipe.BLOCKWISE])
def test_layer_gemm_speedup_matches_transformer_engine_profile(recipe):
    # The preset's FP8 efficiency comes from TE's pre-quantized 1.90x; with quantization priced
    # as HBM traffic the autocast speed-ups follow: 1.69x delayed, 1.58x current, 1.40x block.
    cluster = load_cluster("dgx-h200")
    predicted = _te_layer_s(cluster, None) / _te_layer_s(cluster, recipe)
    assert predicted == pytest.approx(TE_H200_MS[None] / TE_H200_MS[recipe], rel=0.03)


# The same page's B300 SXM6 run of the 5B config: per-layer ms under autocast (quantizing as
# above) and pre-quantized (the GEMM kernels alone): BF16 12.758 / 13.102, FP8 current 9.147 /
# 6.812, MXFP8 8.984 / 7.161. Their difference is the quantization the benchmark does.
TE_B300_QUANTIZE_MS = {Fp8Recipe.TENSORWISE: 9.147 - 6.812, Fp8Recipe.MXFP8: 8.984 - 7.161}


@pytest.mark.parametrize("recipe", sorted(TE_B300_QUANTIZE_MS, key=str))
def test_blackwell_quantization_against_transformer_engine_profile(recipe):
    # Held out (the B300 presets take nothing from it): the byte model of cost_models/fp8.py,
    # one FP8 copy on Blackwell (transpose-free), at the preset's achieved HBM bandwidth, gives
    # 1.94 ms (current) and 1.58 ms (MXFP8) for what TE measures as 2.34 and 1.82 ms: 17% and
    # 14% under. Recorded within 20%.
    cluster = load_cluster("dgx-b300")
    assert cluster.gpu.fp8_transpose_free
    hbm = cluster.gpu.hbm_gb_per_s * 1e9 * cluster.efficiency.hbm_fraction
    predicted = quantize_bytes(_te_quantized_elements(), recipe, transpose_free=True) / hbm
    assert predicted == pytest.approx(TE_B300_QUANTIZE_MS[recipe] / 1e3, rel=0.20)


def test_fp8_copy_bytes_follow_transformer_engine():
    # TE performance_considerations.rst Table 2: Hopper keeps a row-wise and a transposed FP8
    # copy, Blackwell one for per-tensor scaling. TE issue #1880: "Blackwell: FP8 only requires
    # 1 byte/param. MXFP8 requires 2 bytes/param" (plus one E8M0 scale per 32 values).
    assert fp8_copies_bytes(Fp8Recipe.DELAYED, transpose_free=False) == 2
    assert fp8_copies_bytes(Fp8Recipe.TENSORWISE, transpose_free=True) == 1
    assert fp8_copies_bytes(Fp8Recipe.MXFP8, transpose_free=True) == pytest.approx(2 * 33 / 32)
    assert fp8_value_bytes(Fp8Recipe.MXFP8) == pytest.approx(1 + 1 / 32)
    assert fp8_value_bytes(Fp8Recipe.BLOCKWISE) == pytest.approx(1 + 4 / 128)


def test_fp8_param_gather_removes_the_bf16_weight():
    # Megatron-LM dist_optimizer.md: bf16 weights + fp32 grads with the distributed optimizer
    # take 6 + 12/d bytes per parameter. With TE FP8 on Hopper the weight adds its two FP8 copies
    # (8 + 12/d); --fp8-param-gather "casts FP32 master weights directly to FP8, eliminating
    # BF16 intermediate copy" (Megatron-LM moe/README.md): back to 6 + 12/d, 5 + 12/d on
    # Blackwell's single copy.
    hopper = dict(recipe=Fp8Recipe.TENSORWISE, transpose_free=False, caches=True)
    assert fp8_weight_bytes_per_param(**hopper, fp8_params=False) == 4
    assert fp8_weight_bytes_per_param(**hopper, fp8_params=True) == 2
    assert fp8_weight_bytes_per_param(Fp8Recipe.TENSORWISE, transpose_free=True, caches=True,
                                      fp8_params=True) == 1
    # torchao quantizes in every pass: the bf16 weight is all it keeps.
    assert fp8_weight_bytes_per_param(Fp8Recipe.ROWWISE, transpose_free=False, caches=False,
                                      fp8_params=False) == 2
    # torchtitan's FSDP float8 all-gather: the gathered parameter is torchao's Float8 tensor,
    # 1 byte (float8.md: "FSDP2 float8 all-gather"), not nothing: ZeRO-2 (reshard never) keeps
    # every block's gathered weight from forward to backward.
    assert fp8_weight_bytes_per_param(Fp8Recipe.TENSORWISE, transpose_free=False, caches=False,
                                      fp8_params=True) == 1


def test_fp8_saves_linear_inputs_in_one_byte():
    # Korthikanti et al. 2022 with GeLU, 2 norms, no dropout and flash attention: the linear
    # inputs (QKV 2sbh, Wo 2sbh, fc1 2sbh, fc2 8sbh) take 1 byte each in FP8 (TE saves the
    # quantized input; Megatron-LM moe/README.md), saving 7 sbh of the layer's bytes.
    s, b, h = 4096, 1, 4096
    kw = dict(seq_len=s, micro_batch=b, hidden=h, num_heads=32, num_kv_heads=32, head_dim=128,
              ffn_hidden=4 * h, mlp=MlpKind.GELU, attention=AttentionKind.FLASH, dropout=False,
              tp=1, sequence_parallel=False, recompute=Recompute.NONE)
    bf16 = transformer_layer_activation_bytes(**kw)
    fp8 = transformer_layer_activation_bytes(**kw, linear_input_bytes=1)
    assert bf16 - fp8 == 7 * s * b * h


def _problem(precision="fp8", cluster="dgx-h100", framework="megatron", recipe=None, gpus=8):
    return make_problem("llama3-8b", cluster, gpus=gpus, seq_len=8192, global_batch=128,
                        precision=precision, framework=framework, fp8_recipe=recipe)


def _report(problem, **kw):
    kw = {"recompute": Recompute.SELECTIVE, **kw}
    s = resolve_strategy(Strategy(tp=1, pp=1, micro_batch=1, zero_stage=ZeroStage(1), **kw),
                         problem)
    return evaluate_strategy(problem, s)


def _stage(report):
    return report.memory.stages[0]


def test_recipe_defaults_to_the_frameworks_that_the_gpu_runs():
    assert _problem().training.fp8_recipe is Fp8Recipe.TENSORWISE             # Hopper: FP8-CS
    assert _problem(cluster="dgx-b200").training.fp8_recipe is Fp8Recipe.MXFP8
    assert _problem("mxfp8", cluster="dgx-b200").training.fp8_recipe is Fp8Recipe.MXFP8
    assert _problem(framework="torchtitan").training.fp8_recipe is Fp8Recipe.TENSORWISE
    with pytest.raises(InputError, match="only with precision fp8"):
        _problem("bf16", recipe="delayed")


def test_fp8_memory_of_the_recipe():
    bf16 = _report(_problem("bf16"))
    gathered = _report(_problem(), fp8_param_gather=True)
    kept = _report(_problem(), fp8_param_gather=False)
    # Llama 3 8B's 32 layers of QKV (4096 x 6144), Wo (4096^2) and SwiGLU (3 x 4096 x 14336).
    fp8_params = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    # Hopper with FP8 parameters: row-wise + transposed FP8 (2 B) in place of bf16 (2 B).
    assert _stage(gathered).weights_bytes == pytest.approx(_stage(bf16).weights_bytes)
    # Without: both copies on top of the bf16 weight.
    assert _stage(kept).weights_bytes - _stage(bf16).weights_bytes == pytest.approx(
        2 * fp8_params)
    assert _stage(gathered).activations_bytes < 0.85 * _stage(bf16).activations_bytes


def test_fp8_on_h100_is_1_2_to_1_9_times_faster():
    # Issue 14's bar; Megatron-Bridge reports 14,079 tokens/s per GPU for Llama 3 8B FP8-CS on
    # 8 H100 (25.09), TE's 5B-model GEMMs run 1.58x faster with current scaling.
    bf16, fp8 = _report(_problem("bf16")), _report(_problem())
    assert 1.2 < bf16.time.step_s / fp8.time.step_s < 1.9
    # Attention, norms and communication stay bf16: less than the GEMM-level 1.58x.
    assert bf16.time.step_s / fp8.time.step_s < 1.58
    # MFU is against the FP8 peak.
    assert fp8.throughput.mfu < bf16.throughput.mfu


def test_search_plans_fp8_with_fp8_params():
    problem = _problem(gpus=8)
    result = search(problem, SearchSpace(), SolverSettings(num_workers=1))
    best = result.plans[0]
    assert best.strategy.zero_stage >= 1 and best.strategy.fp8_param_gather


def test_fp8_rules():
    cands = Candidates.from_strategy(
        resolve_strategy(Strategy(tp=1, zero_stage=ZeroStage(0), fp8_param_gather=True),
                         _problem()), _problem().framework.defaults)
    found = degree_violations(_problem(), cands, RuleOptions())
    assert found[Rule.FP8_PARAM_GATHER].all() and not found[Rule.FP8_HARDWARE].any()
    a100 = _problem(cluster="dgx-a100-80gb")
    assert degree_violations(a100, cands, RuleOptions())[Rule.FP8_HARDWARE].all()
    mx_on_hopper = _problem("mxfp8")
    assert degree_violations(mx_on_hopper, cands, RuleOptions())[Rule.FP8_HARDWARE].all()
    for target, rule in ((LaunchTarget.DEEPSPEED, Rule.DEEPSPEED_FP8),
                         (LaunchTarget.MINDSPORE, Rule.MINDSPORE_FP8),
                         (LaunchTarget.TORCHRUN, Rule.TARGET_FP8)):
        assert degree_violations(_problem(), cands, RuleOptions(targets=(target,)))[rule].all()
    rowwise = _problem(recipe="rowwise")     # Megatron-LM has no rowwise recipe
    assert degree_violations(rowwise, cands,
                             RuleOptions(targets=(LaunchTarget.MEGATRON,)))[Rule.MEGATRON_FP8].all()


def test_torchao_keeps_no_fp8_weights_and_requantizes():
    # torchtitan (torchao float8) casts weights in every pass and saves bf16 inputs: no FP8
    # weight copies, no activation savings, more quantization than Transformer Engine.
    none = dict(recompute=Recompute.NONE)
    tt_bf16 = _report(_problem("bf16", framework="torchtitan"), **none)
    tt_fp8 = _report(_problem(framework="torchtitan"), fp8_param_gather=False, **none)
    assert _stage(tt_fp8).weights_bytes == pytest.approx(_stage(tt_bf16).weights_bytes)
    assert _stage(tt_fp8).activations_bytes == pytest.approx(_stage(tt_bf16).activations_bytes)
    assert np.isfinite(tt_fp8.time.step_s) and tt_fp8.time.step_s < tt_bf16.time.step_s
    # Its per-op checkpointing in 0.2.x (the TOML FP8 plans are written as) sees each float8
    # linear as an aten.mm and keeps every second one, as in bf16; today's policy keeps every
    # aten._scaled_mm output (selective_fp8_linears_as_mm false): more kept in FP8.
    sel_bf16 = _report(_problem("bf16", framework="torchtitan"))
    sel_fp8 = _report(_problem(framework="torchtitan"), fp8_param_gather=False)
    assert _stage(sel_fp8).activations_bytes == pytest.approx(_stage(sel_bf16).activations_bytes)
    current = _problem(framework="torchtitan")
    current = replace(current, framework=current.framework.model_copy(
        update={"selective_fp8_linears_as_mm": False}))
    sel_current = _report(current, fp8_param_gather=False)
    assert _stage(sel_current).activations_bytes > _stage(sel_bf16).activations_bytes


def test_nvfp4_bytes_follow_transformer_engine():
    # TE nvfp4.rst: E2M1 (4 bits) with one E4M3 scale per 16 consecutive values and one fp32
    # per tensor: 4.5 bits per activation value; GEMMs run TN only, so a row-wise and a
    # (transposed) column-wise copy are both kept; weights use 16x16 (2D) scale tiles.
    assert fp8_value_bytes(Fp8Recipe.NVFP4) == pytest.approx(0.5 + 1 / 16)
    assert gemm_operand_bytes(Fp8Recipe.NVFP4) == 0.5
    assert gemm_operand_bytes(Fp8Recipe.MXFP8) == 1
    assert fp8_copies_bytes(Fp8Recipe.NVFP4, transpose_free=True) == pytest.approx(2 * 4.5 / 8)
    assert fp8_copies_bytes(Fp8Recipe.NVFP4, transpose_free=True,
                            weight=True) == pytest.approx(2 * (0.5 + 1 / 256))
    # NVFP4's fp32 tensor scale comes from the tensor's amax: a read before the cast, as with
    # current scaling (nvfp4.rst "Scaling Factor Computation").
    assert quantize_bytes(1.0, Fp8Recipe.NVFP4, transpose_free=True) == pytest.approx(
        2 * 2 + 2 * 4.5 / 8)
    # With --fp4-param-gather the parameter is the NVFP4 tensor: its two copies, no bf16.
    assert fp8_weight_bytes_per_param(Fp8Recipe.NVFP4, transpose_free=True, caches=True,
                                      fp8_params=True) == pytest.approx(2 * (0.5 + 1 / 256))


def test_nvfp4_runs_on_the_fp4_tensor_cores():
    b200 = load_cluster("dgx-b200")
    assert b200.gpu.linear_peak_flops(Fp8Recipe.NVFP4) == 2 * b200.gpu.linear_peak_flops(
        Fp8Recipe.MXFP8)
    h100 = load_cluster("dgx-h100")
    assert not h100.gpu.runs_recipe(Fp8Recipe.NVFP4) and h100.gpu.runs_recipe(Fp8Recipe.DELAYED)


def test_nvfp4_is_faster_than_mxfp8_on_blackwell_and_refused_on_hopper():
    blackwell = [make_problem("llama3-70b", "gb200-nvl72", gpus=64, seq_len=8192,
                              global_batch=256, precision=p) for p in ("nvfp4", "mxfp8")]
    assert blackwell[0].training.precision_label == "nvfp4"
    strategy = Strategy(dp=8, tp=2, pp=4, vpp=5, micro_batch=1, global_batch=256)
    nvfp4, mxfp8 = (evaluate_strategy(p, strategy).time.step_s for p in blackwell)
    assert 1.2 < mxfp8 / nvfp4 < 1.6        # Megatron-Bridge 26.04.01 measured 1.31x here
    hopper = make_problem("llama3-70b", "dgx-h100", gpus=64, precision="nvfp4")
    with pytest.raises(InfeasibleError, match="fp8_hardware") as refused:
        search(hopper, SearchSpace(), SolverSettings(top_k=1))
    assert any("H100-SXM5-80GB has no FP4 tensor cores" in line and "use precision fp8" in line
               for line in refused.value.details)


def test_nvfp4_on_a_framework_without_it_says_so_as_nvfp4():
    # torchtitan's float8 recipes are FP8 only: the refusal names the precision asked for.
    problem = make_problem("llama3-8b", "dgx-b200", gpus=8, precision="nvfp4",
                           framework="torchtitan")
    with pytest.raises(InfeasibleError) as refused:
        search(problem, SearchSpace(), SolverSettings(top_k=1))
    assert any("precision nvfp4: torchtitan configures only" in line
               and "use precision fp8" in line for line in refused.value.details)



def _h200_fp8_rows(section: str) -> list[dict]:
    """torchao's rowwise GEMMs, casts and layout copies timed on an H200 (bench/
    device_kernels.py --sections fp8_rowwise,fp8_casts,fp8_rowwise_linear,fp8_transpose):
    CUDA-graph replays of torch._scaled_mm, CUDA events around the rest."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[2] / "bench" / "data"
                       / "kernels_h200_fp8_rowwise.json").read_text())
    return [r for r in data["rows"] if r.get("section") == section]


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-h200", "dgx-h800"])
def test_fp8_gemm_rates_against_kernels_timed_on_an_h200(preset):
    """Transformer Engine's 5B layer timed on an H200 with torch._scaled_mm: tensorwise FP8
    GEMMs give back the rate TE's own published profile gives the presets (0.969), an
    independent check of it; torchao's rowwise GEMMs (a scale per row and per column; the
    output GEMM with fast accumulation, dgrad and wgrad without, as torchao's float8 config
    runs them) reach 1.77x bf16, the presets' rate (0.90) on the same GH100 die."""
    from cost_models.compute import low_precision_gemm_efficiency

    eff = load_cluster(preset).efficiency
    te = [r for r in _h200_fp8_rows("fp8_rowwise") if r["shape"].startswith("te ")]
    assert len(te) == 12
    bf16 = sum(r["bf16_s"] for r in te)
    rowwise = sum(r["rowwise_fast_s" if "fprop" in r["shape"] else "rowwise_split_s"]
                  for r in te)
    tensorwise = sum(r["tensorwise_fast_s"] for r in te)
    gemms = [g for k, n in TE_SHAPES for g in (Gemm(TE_M, n, k), Gemm(TE_M, k, n),
                                                 Gemm(k, n, TE_M))]

    def rate(speedup):
        return low_precision_gemm_efficiency(speedup, gemms=gemms, peak_ratio=2,
                                             half_efficiency_k=eff.gemm_half_efficiency_k,
                                             fill_dim=eff.gemm_fill_dim)
    assert rate(bf16 / tensorwise) == pytest.approx(eff.fp8_gemm_efficiency[Fp8Recipe.TENSORWISE],
                                                    abs=0.02)
    assert bf16 / rowwise == pytest.approx(1.77, abs=0.01)
    assert eff.fp8_gemm_efficiency[Fp8Recipe.ROWWISE] == pytest.approx(rate(bf16 / rowwise),
                                                                       abs=0.001)


def test_torchao_cast_and_layout_copy_rates_are_the_measured_kernels():
    """torchtitan's profile prices torchao's rowwise casts and layout copies at what they were
    timed at on an H200: the casts compiled for fixed shapes (amax, scale, clamp, fp8; per row
    and per column) move their bytes (2 reads and 1 write per value) at 0.70 of a plain
    copy's rate; PyTorch's transposing copy (.contiguous() on a transposed FP8 tensor) moves
    1.48e11 elements per second, FP8 or bf16 alike, whatever the shape."""
    import statistics

    from planner.inputs.loader import load_framework

    fp8 = load_framework("torchtitan").fp8
    casts = _h200_fp8_rows("fp8_casts")
    assert len(casts) == 9
    ratios = [r[f"{d}_gb_per_s"] / r["copy_gb_per_s"] for r in casts for d in ("row", "column")]
    assert fp8.cast_efficiency == pytest.approx(statistics.median(ratios), abs=0.005)
    copies = _h200_fp8_rows("fp8_transpose")
    fp8_rate = statistics.median(r["m"] * r["k"] / r["fp8_transpose_s"] for r in copies)
    bf16_rate = statistics.median(r["m"] * r["k"] / r["bf16_transpose_s"] for r in copies)
    assert fp8.layout_copy_elements_per_s == pytest.approx(fp8_rate, rel=0.01)
    assert bf16_rate == pytest.approx(fp8_rate, rel=0.05)      # bound by elements, not bytes
    assert Fp8Recipe.ROWWISE in fp8.separate_layout_recipes


@pytest.mark.parametrize(("recipe", "both", "one"), [
    (Fp8Recipe.ROWWISE, 10, 5),            # a cast per layout, each with its amax pass
    (Fp8Recipe.TENSORWISE, 6, 5),          # one amax pass; the transposed copy on Hopper
    (Fp8Recipe.MXFP8, 2 + 2 * (1 + 1 / 32), 2 + 1 + 1 / 32),
])
def test_quantize_bytes_per_layout(recipe, both, one):
    """Bytes per bf16 value of casting into both GEMM layouts (TE writes both at once) or the
    one the GEMM at hand reads (torchao's rowwise casts)."""
    assert quantize_bytes(1, recipe, transpose_free=False) == pytest.approx(both)
    assert quantize_bytes(1, recipe, transpose_free=False, layouts=1) == pytest.approx(one)
