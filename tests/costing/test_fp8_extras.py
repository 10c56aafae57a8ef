"""What a low-precision run puts in FP8 beyond the linear layers, or keeps out of it (issue 25,
"Number formats"): FP8 attention against FlashAttention-3's published rates and Transformer
Engine's saved tensors, the output layer (bf16 by default, FP8 where asked), the first and
last layers kept in bf16 (Megatron-LM --first-last-layers-bf16), and the rules that refuse
each where the precision or the framework lacks it."""

import numpy as np
import pytest

from cost_models.compute import flash_attention_time_s
from cost_models.enums import (AttentionKind, Fp8Recipe, MlpKind, Precision, Recompute,
                               ZeroStage)
from cost_models.fp8 import (fp8_attention_fraction, fp8_attention_value_bytes,
                             fp8_value_bytes)
from cost_models.memory import output_activation_bytes, transformer_layer_activation_bytes
from cost_models.units import TFLOPS
from planner.core.candidates import Candidates
from planner.core.rules import Rule
from planner.costing.block_costs import block_cost
from planner.costing.evaluate import evaluate_strategy
from planner.costing.placement import tp_placement
from planner.errors import InfeasibleError, InputError
from planner.inputs.loader import load_cluster, load_framework, make_problem, resolve_strategy
from planner.rules.gate import RuleOptions, degree_violations
from planner.schemas.model import OutputBlock, TrainingSpec, TransformerBlock
from planner.schemas.strategy import Strategy
from planner.search.candidates import SearchSpace
from planner.search.solver import SolverSettings, search

# Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608), H100 SXM5: abstract, "FP16 reaching
# up to 740 TFLOPs/s (75% utilization), and with FP8 reaching close to 1.2 PFLOPs/s"; Fig. 7
# (FP8 forward, head dim 256, 16K tokens, no causal mask): FlashAttention-3 1171 TFLOP/s.
FA3_FP16_TFLOPS = 740.0
FA3_FP8_TFLOPS = 1200.0
FA3_FP8_FIG7_TFLOPS = 1171.0


# --------------------------------------------------------------------------- cost models

def test_h100_fp8_attention_rate_is_flashattention3s():
    # The preset's relative efficiency, applied to FlashAttention-3's FP16 share of the bf16
    # peak, gives its FP8 rate: the kernel times FA3's benchmark shape (B x S = 16K,
    # H x d = 2048) at the FP8 peak and that share.
    h100 = load_cluster("dgx-h100")
    fp16_share = FA3_FP16_TFLOPS / h100.gpu.peak_tflops.bf16            # 0.75 ("75%")
    assert fp16_share == pytest.approx(0.75, abs=0.005)
    share = fp8_attention_fraction(flash_fraction=fp16_share,
                                   relative_efficiency=h100.efficiency.fp8_attention_efficiency)
    s, heads, d = 16384, 8, 256
    seconds = flash_attention_time_s(seq_len=s, micro_batch=1, num_heads=heads, head_dim=d, tp=1,
                                     causal=False, peak_flops=h100.gpu.peak_flops(Precision.FP8),
                                     flash_fraction=share, backward=False)
    tflops = 4 * s * s * d * heads / seconds / TFLOPS          # FA3's forward count, 4 s^2 d h
    # "close to 1.2 PFLOP/s": rounded to one digit of PFLOP/s, hence 3%; the figure's bar too.
    assert tflops == pytest.approx(FA3_FP8_TFLOPS, rel=0.03)
    assert tflops == pytest.approx(FA3_FP8_FIG7_TFLOPS, rel=0.03)


def test_hopper_presets_share_the_rate_and_blackwell_has_none_published():
    rates = {name: load_cluster(name).efficiency.fp8_attention_efficiency
             for name in ("dgx-h100", "dgx-h200", "dgx-h800", "dgx-b200", "gb200-nvl72")}
    assert rates["dgx-h100"] == rates["dgx-h200"] == rates["dgx-h800"] == 0.81
    assert rates["dgx-b200"] is None and rates["gb200-nvl72"] is None


def test_fp8_attention_saves_q_k_v_in_one_byte():
    # TE backends.py FusedAttnFunc.forward @d0067d0d: with the backward in FP8 it saves
    # q_fp8, k_fp8, v_fp8; the output is counted once either way (Wo's input).
    s, b, h, heads, kv, d = 8192, 1, 4096, 32, 8, 128
    kw = dict(seq_len=s, micro_batch=b, hidden=h, num_heads=heads, num_kv_heads=kv, head_dim=d,
              ffn_hidden=14336, mlp=MlpKind.SWIGLU, attention=AttentionKind.FLASH,
              dropout=False, tp=1, sequence_parallel=False, recompute=Recompute.NONE,
              linear_input_bytes=1)
    bf16 = transformer_layer_activation_bytes(**kw)
    fp8 = transformer_layer_activation_bytes(
        **kw, attention_input_bytes=fp8_attention_value_bytes(Fp8Recipe.TENSORWISE))
    mx = transformer_layer_activation_bytes(
        **kw, attention_input_bytes=fp8_attention_value_bytes(Fp8Recipe.MXFP8))
    qkv_values = s * b * (heads * d + 2 * kv * d)                # Q 4096 + K, V 1024 each
    assert bf16 - fp8 == qkv_values * (2 - 1)
    assert bf16 - mx == pytest.approx(qkv_values * (2 - (1 + 1 / 32)))
    # NVFP4 linear layers run FP8 attention (TE has no FP4 attention).
    assert fp8_attention_value_bytes(Fp8Recipe.NVFP4) == 1


def test_fp8_output_layer_saves_its_input_quantized():
    kw = dict(seq_len=8192, micro_batch=1, hidden=8192, vocab_size=128256, tp=4,
              sequence_parallel=True, final_norm=False)
    bf16 = output_activation_bytes(**kw)
    mx = output_activation_bytes(**kw, input_bytes=fp8_value_bytes(Fp8Recipe.MXFP8))
    assert bf16 - mx == pytest.approx(8192 * 8192 / 4 * (2 - (1 + 1 / 32)))


# --------------------------------------------------------------------------- block costs

LLAMA3_8B_LAYER = TransformerBlock(hidden=4096, num_heads=32, num_kv_heads=8, ffn_hidden=14336,
                                   mlp=MlpKind.SWIGLU, bias=False, dropout=False)
LLAMA3_8B_OUTPUT = OutputBlock(vocab_size=128256, hidden=4096)


def _block(block, cluster, framework="megatron", **training):
    training = TrainingSpec(**{"seq_len": 8192, "global_batch": 128, **training})
    c = load_cluster(cluster)
    return block_cost(block, training=training, cluster=c, framework=load_framework(framework),
                      tp=[1], mb=[1], sequence_parallel=False, recompute=Recompute.NONE,
                      place=tp_placement(np.array([1.0]), c.nvlink_gpus))


def test_fp8_attention_runs_the_core_at_the_fp8_kernels_rate():
    fp8 = dict(precision=Precision.FP8, fp8_recipe=Fp8Recipe.TENSORWISE)
    plain = _block(LLAMA3_8B_LAYER, "dgx-h100", **fp8)
    fast = _block(LLAMA3_8B_LAYER, "dgx-h100", **fp8, fp8_attention=True)
    h100 = load_cluster("dgx-h100")
    core = flash_attention_time_s(seq_len=8192, micro_batch=1, num_heads=32, head_dim=128, tp=1,
                                  causal=True, peak_flops=h100.gpu.peak_flops(Precision.BF16),
                                  flash_fraction=0.5, backward=False)
    # The FP8 peak (1978.9 TFLOP/s, twice bf16's 989.4) at 0.81 of bf16's share: 1.62x.
    speedup = h100.gpu.peak_tflops.fp8 / h100.gpu.peak_tflops.bf16 * 0.81
    # Forward: the core runs 1.62x faster; casting Q, K, V (one read of 2 bytes with the
    # amax pass twice, one FP8 byte written) costs a little back.
    qkv_values = 8192 * (4096 + 2 * 1024)
    cast_s = qkv_values * (2 * 2 + 1) / (h100.gpu.hbm_gb_per_s * 1e9 * 0.8)
    assert plain.forward_s[0] - fast.forward_s[0] == pytest.approx(
        core * (1 - 1 / speedup) - cast_s, rel=1e-9)
    assert fast.backward_s[0] < plain.backward_s[0]
    assert plain.activation_bytes[0] - fast.activation_bytes[0] == pytest.approx(qkv_values)


def test_fp8_attention_changes_nothing_without_fp8():
    # Outside precision fp8 the setting has nothing to act on (the loader refuses it there).
    bf16 = _block(LLAMA3_8B_LAYER, "dgx-h100")
    asked = _block(LLAMA3_8B_LAYER, "dgx-h100", fp8_attention=True)
    for ours, theirs in zip(bf16, asked):
        assert np.array_equal(ours, theirs)


def test_fp8_attention_without_a_published_rate_saves_memory_only():
    # B200: no FP8 attention rate in the preset, so the kernel keeps the bf16 speed; the casts
    # cost a little, Q, K, V still take one byte (MXFP8: 1 + 1/32).
    mx = dict(precision=Precision.FP8, fp8_recipe=Fp8Recipe.MXFP8)
    plain = _block(LLAMA3_8B_LAYER, "dgx-b200", **mx)
    asked = _block(LLAMA3_8B_LAYER, "dgx-b200", **mx, fp8_attention=True)
    assert asked.forward_s[0] >= plain.forward_s[0]
    assert plain.activation_bytes[0] - asked.activation_bytes[0] == pytest.approx(
        8192 * (4096 + 2 * 1024) * (2 - (1 + 1 / 32)))


def test_output_layer_is_bf16_under_fp8_unless_asked():
    # Megatron-LM's LM head is tensor_parallel.ColumnParallelLinear, outside fp8_autocast
    # (gpt_model.py @d98e8a64); torchtitan filters "output" out of its converters.
    bf16 = _block(LLAMA3_8B_OUTPUT, "dgx-b200")
    fp8 = _block(LLAMA3_8B_OUTPUT, "dgx-b200", precision=Precision.FP8,
                 fp8_recipe=Fp8Recipe.MXFP8)
    assert fp8.forward_s[0] == bf16.forward_s[0] and fp8.backward_s[0] == bf16.backward_s[0]
    assert fp8.activation_bytes[0] == bf16.activation_bytes[0]
    head = _block(LLAMA3_8B_OUTPUT, "dgx-b200", precision=Precision.FP8,
                  fp8_recipe=Fp8Recipe.MXFP8, fp8_output_layer=True)
    assert head.forward_s[0] < fp8.forward_s[0] and head.backward_s[0] < fp8.backward_s[0]
    assert fp8.activation_bytes[0] - head.activation_bytes[0] == pytest.approx(
        8192 * 4096 * (2 - (1 + 1 / 32)))


def test_a_layer_kept_in_bf16_costs_what_a_bf16_layer_does():
    kept = LLAMA3_8B_LAYER.model_copy(update={"keep_bf16": True})
    fp8 = dict(precision=Precision.FP8, fp8_recipe=Fp8Recipe.TENSORWISE, fp8_attention=True)
    for ours, theirs in zip(_block(kept, "dgx-h100", **fp8), _block(LLAMA3_8B_LAYER, "dgx-h100")):
        assert np.array_equal(ours, theirs)


# --------------------------------------------------------------------------- plans

def _problem(precision="fp8", cluster="dgx-h100", framework="megatron", recipe=None, gpus=8,
             **run):
    return make_problem("llama3-8b", cluster, gpus=gpus, seq_len=8192, global_batch=128,
                        precision=precision, framework=framework, fp8_recipe=recipe, **run)


def _report(problem, **kw):
    s = resolve_strategy(Strategy(tp=1, pp=1, micro_batch=1, zero_stage=ZeroStage(1),
                                  recompute=Recompute.NONE, fp8_param_gather=False, **kw),
                         problem)
    return evaluate_strategy(problem, s)


def test_fp8_attention_shortens_the_step_on_h100():
    plain, fast = _report(_problem()), _report(_problem(fp8_attention=True))
    assert fast.time.step_s < plain.time.step_s
    # At 8K tokens the attention core is about a fifth of Llama 3 8B's FP8 step; 1.62x on it
    # saves 4-10% of the step.
    assert 0.04 < 1 - fast.time.step_s / plain.time.step_s < 0.10
    assert (fast.memory.stages[0].activations_bytes
            < plain.memory.stages[0].activations_bytes)


def test_fp8_run_settings_need_precision_fp8():
    for run in (dict(fp8_attention=True), dict(fp8_output_layer=True),
                dict(bf16_first_layers=1)):
        with pytest.raises(InputError, match=f"{next(iter(run))}: only with precision fp8 "
                                             r"\(precision is bf16\)"):
            _problem("bf16", **run)


def test_bf16_layers_are_marked_on_the_chain():
    problem = _problem(recipe="tensorwise", bf16_first_layers=1, bf16_last_layers=2)
    kept = [b.keep_bf16 for b in problem.model.blocks if isinstance(b, TransformerBlock)]
    assert kept == [True] + [False] * 29 + [True, True]
    # Changing the run's settings re-marks the chain.
    from dataclasses import replace
    plain = replace(problem, training=problem.training.model_copy(
        update={"bf16_first_layers": 0, "bf16_last_layers": 0}))
    assert not any(getattr(b, "keep_bf16", False) for b in plain.model.blocks)


def test_bf16_layers_cost_between_fp8_and_bf16():
    fp8 = _report(_problem(recipe="tensorwise"))
    ends = _report(_problem(recipe="tensorwise", bf16_first_layers=1, bf16_last_layers=1))
    bf16 = _report(_problem("bf16"))
    assert fp8.time.step_s < ends.time.step_s < bf16.time.step_s
    # Two of 32 layers lose FP8's speed-up: about 2/32 of the gap.
    share = (ends.time.step_s - fp8.time.step_s) / (bf16.time.step_s - fp8.time.step_s)
    assert share == pytest.approx(2 / 32, abs=0.02)
    # Their weights keep no FP8 copies: Hopper, no FP8 parameters, 2 more bytes per FP8 weight.
    layer = 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336
    assert (fp8.memory.stages[0].weights_bytes - ends.memory.stages[0].weights_bytes
            == pytest.approx(2 * layer * 2))


def test_fp8_output_layer_on_blackwell_with_mxfp8():
    plain = _report(_problem("mxfp8", cluster="dgx-b200"))
    head = _report(_problem("mxfp8", cluster="dgx-b200", fp8_output_layer=True))
    assert head.time.step_s < plain.time.step_s
    # TE keeps the LM head's MXFP8 copies (2 x 1.03 bytes per weight) beside its bf16 weight.
    assert (head.memory.stages[0].weights_bytes - plain.memory.stages[0].weights_bytes
            == pytest.approx(128256 * 4096 * 2 * (1 + 1 / 32)))


# --------------------------------------------------------------------------- rules

def _violations(problem, targets=(), **strategy):
    s = resolve_strategy(Strategy(**{"tp": 1, "zero_stage": ZeroStage(1), **strategy}), problem)
    cands = Candidates.from_strategy(s, problem.framework.defaults)
    return degree_violations(problem, cands, RuleOptions(targets=targets))


@pytest.mark.parametrize(("run", "framework", "rule"), [
    # Megatron-Core passes fp8_dot_product_attention to every recipe but Float8BlockScaling.
    (dict(recipe="blockwise", fp8_attention=True), "megatron", Rule.MEGATRON_FP8),
    # --fp8-output-proj "requires fp8_recipe='mxfp8'" (transformer_config.py).
    (dict(recipe="tensorwise", fp8_output_layer=True), "megatron", Rule.MEGATRON_FP8),
    # "Delayed scaling does not support first / last layer in BF16".
    (dict(recipe="delayed", bf16_first_layers=1), "megatron", Rule.MEGATRON_FP8),
    # torchtitan's converters swap linear layers only; it keeps no layers out of FP8.
    (dict(recipe="tensorwise", fp8_attention=True), "torchtitan", Rule.TORCHTITAN_FP8),
    (dict(recipe="tensorwise", bf16_last_layers=1), "torchtitan", Rule.TORCHTITAN_FP8),
    # FP8 attention is a fused kernel.
    (dict(recipe="tensorwise", fp8_attention=True, attention="unfused"), "megatron",
     Rule.MEGATRON_FP8),
])
def test_frameworks_refuse_what_they_cannot_run(run, framework, rule):
    problem = _problem(framework=framework, **run)
    assert _violations(problem)[rule].all()


@pytest.mark.parametrize(("run", "framework"), [
    (dict(recipe="tensorwise", fp8_attention=True), "megatron"),
    (dict(recipe="tensorwise", bf16_first_layers=1, bf16_last_layers=1), "megatron"),
    (dict(recipe="tensorwise", fp8_output_layer=True), "torchtitan"),
    (dict(recipe="rowwise", fp8_output_layer=True), "torchtitan"),
])
def test_frameworks_run_what_they_have(run, framework):
    problem = _problem(framework=framework, **run)
    rule = Rule.MEGATRON_FP8 if framework == "megatron" else Rule.TORCHTITAN_FP8
    assert not _violations(problem)[rule].any()


def test_megatron_keeps_at_most_a_stages_layers_in_bf16():
    # transformer_config.py: num_layers_at_start_in_bf16 must be between 0 and num_layers // pp.
    problem = _problem(recipe="tensorwise", bf16_first_layers=5, gpus=8)
    assert not _violations(problem, pp=4, dp=2)[Rule.MEGATRON_FP8].any()      # 8 per stage
    assert _violations(problem, pp=8, dp=1)[Rule.MEGATRON_FP8].all()          # 4 per stage


def test_refusals_name_the_setting_and_the_fix():
    with pytest.raises(InfeasibleError) as refused:
        search(_problem(framework="torchtitan", recipe="tensorwise", fp8_attention=True),
               SearchSpace(), SolverSettings(top_k=1))
    assert ("torchtitan_fp8: fp8_attention: torchtitan has no FP8 attention (its FP8 covers "
            "linear layers only); use fp8_attention false") in refused.value.details
    with pytest.raises(InfeasibleError) as refused:
        search(_problem(recipe="tensorwise", fp8_output_layer=True), SearchSpace(),
               SolverSettings(top_k=1))
    assert ("megatron_fp8: fp8_output_layer with fp8_recipe tensorwise: Megatron-LM runs the "
            "output layer in FP8 only with mxfp8; use fp8_recipe mxfp8, or fp8_output_layer "
            "false") in refused.value.details
