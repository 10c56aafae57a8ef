"""Memory terms against what PyTorch itself keeps, measured by bench/torch_memory.py.

The numbers below were printed by `python bench/torch_memory.py` with torch 2.13.0+cpu (see
that script for the layer and the counting). They are pinned here so the suite runs without
torch; where torch is installed, the last tests measure again and must get the same bytes.
"""

import pytest

from cost_models.enums import AttentionKind, MasterWeights, MlpKind, Optimizer, Precision, \
    Recompute, RecomputeModule, ZeroStage
from cost_models.memory import model_state_bytes, moe_activation_bytes, state_bytes_per_param, \
    transformer_layer_activation_bytes, zero3_gather_buffer_bytes
from cost_models.units import BYTES_16BIT, BYTES_FP32

# Saved-tensor bytes of one Qwen3-style layer (bench/torch_memory.py LAYER, s 32, b 2, bf16).
MEASURED_LAYER_BYTES = 591_360                  # no QK norms
MEASURED_LAYER_QK_NORM_BYTES = 691_200          # q_norm and k_norm on every head
MEASURED_CHECKPOINTED_BYTES = 32_768            # the layer under torch.utils.checkpoint
# The layer with QK norms under selective recompute by module (bench/torch_memory.py).
MEASURED_RECOMPUTE_MODULES_BYTES = {"layernorm": 625_664, "mlp": 429_056, "act": 625_664}
# FSDP2 (fully_shard, MixedPrecisionPolicy bf16 / fp32), AdamW, 2 gloo ranks: rank 0.
MEASURED_FSDP2 = dict(num_params=65_536, block_params=32_768, weights=131_072,
                      gradients=131_072, optimizer=262_144, gathered_block=65_536)

S, B = 32, 2
SHAPE = dict(seq_len=S, micro_batch=B, hidden=256, num_heads=4, num_kv_heads=2, head_dim=128,
             ffn_hidden=512, mlp=MlpKind.SWIGLU, attention=AttentionKind.FLASH, dropout=False)


def _layer(*, qk_norm=False, recompute=Recompute.NONE, tp=1, sequence_parallel=False):
    return transformer_layer_activation_bytes(**SHAPE, tp=tp, sequence_parallel=sequence_parallel,
                                              recompute=recompute, qk_norm=qk_norm)


def test_qk_norm_term_is_what_pytorch_saves_for_the_norms():
    # Q and K before their norms (s b (a + g) d bf16 values) and the fp32 1/rms per head row.
    measured = MEASURED_LAYER_QK_NORM_BYTES - MEASURED_LAYER_BYTES
    assert _layer(qk_norm=True) - _layer() == pytest.approx(measured, rel=1e-12)


@pytest.mark.parametrize(("qk_norm", "measured"), [
    (False, MEASURED_LAYER_BYTES), (True, MEASURED_LAYER_QK_NORM_BYTES)])
def test_whole_layer_is_what_pytorch_saves_less_two_known_terms(qk_norm, measured):
    # Eager PyTorch keeps two things the fused kernels the formula follows do not: SwiGLU's
    # silu output as its own tensor (Megatron's fused bias_swiglu recomputes it from its
    # input: 2 s b f bytes), and the two layer norms' fp32 1/rms per token (4 s b each),
    # which the formula leaves out.
    eager_silu = BYTES_16BIT * S * B * SHAPE["ffn_hidden"]
    layer_norm_rstd = 2 * BYTES_FP32 * S * B
    assert _layer(qk_norm=qk_norm) + eager_silu + layer_norm_rstd == measured


def test_full_recompute_keeps_the_layer_input_only():
    assert _layer(qk_norm=True, recompute=Recompute.FULL) == MEASURED_CHECKPOINTED_BYTES


def test_selective_recompute_keeps_the_qk_norm_inputs():
    # Selective recompute re-runs the attention core; the QK norms run before it.
    assert (_layer(qk_norm=True, recompute=Recompute.SELECTIVE)
            - _layer(recompute=Recompute.SELECTIVE)) == _layer(qk_norm=True) - _layer()


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_qk_norm_term_splits_with_the_heads_over_tp(sequence_parallel):
    one = _layer(qk_norm=True) - _layer()
    for tp in (2, 4):
        got = (_layer(qk_norm=True, tp=tp, sequence_parallel=sequence_parallel)
               - _layer(tp=tp, sequence_parallel=sequence_parallel))
        assert got == pytest.approx(one / tp, rel=1e-12)


def _modules(*modules):
    return transformer_layer_activation_bytes(**SHAPE, tp=1, sequence_parallel=False,
                                              recompute=Recompute.SELECTIVE, qk_norm=True,
                                              recompute_modules=frozenset(modules))


def test_layernorm_module_drops_what_pytorch_saves_of_the_norm_outputs():
    # Megatron-Core's output-discarding checkpoint on both norms: the one s b h bf16 storage
    # of each norm's output that the QKV projections and the MLP saved.
    measured = MEASURED_LAYER_QK_NORM_BYTES - MEASURED_RECOMPUTE_MODULES_BYTES["layernorm"]
    assert _layer(qk_norm=True) - _modules(RecomputeModule.LAYERNORM) == measured


def test_mlp_module_drops_the_mlp_internals_pytorch_saves():
    # torch.utils.checkpoint over the MLP keeps its input (the norm output, saved anyway);
    # eager PyTorch also drops the silu output the formula never counted (see above).
    measured = MEASURED_LAYER_QK_NORM_BYTES - MEASURED_RECOMPUTE_MODULES_BYTES["mlp"]
    eager_silu = BYTES_16BIT * S * B * SHAPE["ffn_hidden"]
    assert _layer(qk_norm=True) - _modules(RecomputeModule.MLP) + eager_silu == measured


def test_moe_act_module_drops_the_activation_output_pytorch_saves():
    # The SwiGLU product (the second matrix's input), discarded: what moe_act drops in each
    # expert. The layer's MLP as one expert that every token visits (pairs = s b).
    measured = MEASURED_LAYER_QK_NORM_BYTES - MEASURED_RECOMPUTE_MODULES_BYTES["act"]
    expert = dict(pairs=S * B, tokens_per_rank=S * B, hidden=SHAPE["hidden"],
                  expert_ffn_hidden=SHAPE["ffn_hidden"], num_experts=1, mlp=MlpKind.SWIGLU)
    kept = moe_activation_bytes(**expert, recompute_modules=frozenset({RecomputeModule.MOE_ACT}))
    assert moe_activation_bytes(**expert) - kept == measured


def test_fsdp2_keeps_16_bytes_per_parameter_sharded():
    # fp32 parameter shard (the master), fp32 gradient shard, AdamW's two fp32 moments.
    m = MEASURED_FSDP2
    per = state_bytes_per_param(Precision.BF16, Optimizer.ADAM)
    got = model_state_bytes(num_params=m["num_params"], dp=2, zero_stage=ZeroStage.PARAMETERS,
                            per_param=per, master_weights=MasterWeights.PARAMETERS)
    assert (got.weights, got.gradients, got.optimizer) == (m["weights"], m["gradients"],
                                                          m["optimizer"])
    # Megatron's accounting (a bf16 shard beside the fp32 master) would charge 18 / 16.
    megatron = model_state_bytes(num_params=m["num_params"], dp=2,
                                 zero_stage=ZeroStage.PARAMETERS, per_param=per)
    assert megatron.total == pytest.approx(18 / 16 * got.total, rel=1e-12)


def test_fsdp2_gathers_one_bf16_block_at_a_time():
    m = MEASURED_FSDP2
    per = state_bytes_per_param(Precision.BF16, Optimizer.ADAM)
    assert zero3_gather_buffer_bytes(largest_block_params_per_rank=m["block_params"],
                                     weight_bytes=per.weights,
                                     prefetch_blocks=1) == m["gathered_block"]


def test_pytorch_still_measures_the_pinned_layer_bytes():
    pytest.importorskip("torch")
    from bench.torch_memory import saved_activation_bytes
    assert saved_activation_bytes(qk_norm=False) == MEASURED_LAYER_BYTES
    assert saved_activation_bytes(qk_norm=True) == MEASURED_LAYER_QK_NORM_BYTES
    assert saved_activation_bytes(qk_norm=True, checkpointed=True) == MEASURED_CHECKPOINTED_BYTES
    for module, measured in MEASURED_RECOMPUTE_MODULES_BYTES.items():
        assert saved_activation_bytes(qk_norm=True, recompute_modules=(module,)) == measured


def test_pytorch_still_measures_the_pinned_fsdp2_states():
    pytest.importorskip("torch")
    from bench.torch_memory import fsdp2_state_bytes
    assert fsdp2_state_bytes() == MEASURED_FSDP2


# HBM bytes per element, (forward, backward), of torchtitan's Llama block as eager PyTorch ops
# (and of Megatron-Core's eager expert bias)
# (bench/torch_elementwise.py, torch 2.13.0+cpu: every ATen op but the GEMMs and SDPA, its
# inputs read and its output written once).
MEASURED_EAGER = {"norm": (36.051, 92.086), "rotary": (20.4, 21.2), "kv_repeat": (2.5, 2.5),
                  "attn_out": (4.0, 0.0), "swiglu": (10.0, 18.0), "gelu": (4.0, 6.0),
                  "layernorm": (4.016, 6.023), "residual": (12.0, 0.0),
                  # Megatron-Core's biased experts (TEGroupedMLP._apply_bias), per pair x h.
                  "expert_bias": (12.02, 16.047),
                  # Megatron-Core's clamped GLU (gpt-oss), per row x GLU output column.
                  "glu_clamp": (16.0, 30.0)}


def test_eager_elementwise_constants_are_what_pytorch_dispatches():
    from cost_models.compute import EAGER_BYTES_PER_ELEMENT
    names = {"norm": "rmsnorm"}
    for measured_name, measured in MEASURED_EAGER.items():
        constant = EAGER_BYTES_PER_ELEMENT[names.get(measured_name, measured_name)]
        # The constants leave out the norms' per-row fp32 statistics (0.05-0.1 B per element
        # at the script's h 512).
        assert constant == pytest.approx(measured, abs=0.1), measured_name


def test_eager_native_kernels_move_what_the_fused_formula_charges():
    """F.layer_norm and F.gelu are one kernel each in eager PyTorch: forward 4 bytes per
    element (read and write bf16), backward 6, what `transformer_layer_elementwise_bytes`
    charges a fused kernel (x 1.5 backward): eager costs more only where a Python module
    writes a kernel as several ops (torchtitan's RMSNorm: 36 forward, 92 backward)."""
    for name in ("layernorm", "gelu"):
        forward, backward = MEASURED_EAGER[name]
        assert forward == pytest.approx(2 * BYTES_16BIT, abs=0.02)
        assert backward == pytest.approx(1.5 * 2 * BYTES_16BIT, abs=0.03)
    assert MEASURED_EAGER["norm"][0] > 8 * 2 * BYTES_16BIT


def test_pytorch_still_dispatches_the_pinned_eager_bytes():
    pytest.importorskip("torch")
    from bench.torch_elementwise import eager_bytes_per_element
    measured = eager_bytes_per_element()
    for name, v in measured.items():
        assert (round(v["forward"], 3), round(v["backward"], 3)) == MEASURED_EAGER[name], name
    assert round(measured["glu_clamp"]["kept"], 3) == MEASURED_GLU_CLAMP_KEPT


# What autograd keeps for Megatron-Core's eager clamp of a GLU input, per row and GLU output
# column (bench/torch_elementwise.py glu_clamp, torch 2.13.0+cpu): the unclamped bf16 input
# (2 columns per output column), which the two clamps save.
MEASURED_GLU_CLAMP_KEPT = 4.0


def test_clamped_glu_keeps_one_more_input_as_pytorch_saves():
    shape = dict(pairs=1000, tokens_per_rank=250, hidden=64, expert_ffn_hidden=96,
                 num_experts=8, mlp=MlpKind.SWIGLU)
    extra = (moe_activation_bytes(**shape, eager_glu_clamp=True)
             - moe_activation_bytes(**shape))
    assert extra == MEASURED_GLU_CLAMP_KEPT * 1000 * 96
    # moe_act runs the clamps under its checkpoint (no grad): nothing more is kept.
    act = frozenset({RecomputeModule.MOE_ACT})
    assert (moe_activation_bytes(**shape, eager_glu_clamp=True, recompute_modules=act)
            == moe_activation_bytes(**shape, recompute_modules=act))


# Megatron-Core's own MoE layer (local spec: sigmoid router with expert bias, alltoall
# dispatcher without permute fusion, 8 experts, top 4, expert and shared ffn 128, hidden 512,
# 256 tokens, bf16) counted on PyTorch's op stream by bench/megatron_moe_memory.py (torch
# 2.13.0+cpu, Megatron-Core @d98e8a64; bench/data/megatron_moe_kept_cpu.json): what it keeps
# after the forward, its 16-bit activations and the router's fp32 scores and int64 indices.
MEASURED_MOE_KEPT = {"activations": 2_031_616, "router_and_indices": 60_480}
MOE_SHAPE = dict(pairs=256 * 4, tokens_per_rank=256, hidden=512, expert_ffn_hidden=128,
                 num_experts=8, mlp=MlpKind.SWIGLU)


def test_moe_layer_keeps_what_megatron_cores_own_layer_keeps():
    # The permuted input once, each expert's first-matrix output and activation output, the
    # shared expert's internals (gate and up outputs and their product: 6 bytes per column);
    # no expert output (the probabilities scale the activation; the combine saves nothing).
    router = BYTES_FP32 * 256 * 8
    shared = (2 * BYTES_16BIT + BYTES_16BIT) * 256 * 128
    assert moe_activation_bytes(**MOE_SHAPE) - router + shared == MEASURED_MOE_KEPT["activations"]
    # Keeping the expert output too would be half as much again as Megatron-Core keeps.
    assert BYTES_16BIT * 256 * 4 * 512 / MEASURED_MOE_KEPT["activations"] > 0.5
    # The router's fp32 scores are part of what the unfused path keeps beside them (its int64
    # sort over every token-expert slot and of the kept pairs, which Transformer Engine's fused
    # permutation does not make).
    assert router < MEASURED_MOE_KEPT["router_and_indices"]


# Megatron-Core's own DeepSeek-style GPTModel (two MLA + MoE layers, one MTP module, both
# losses, 256 tokens, bench/megatron_moe_memory.py MODEL) on CPU with a flash-attention
# stand-in: the bytes its forward keeps, its local norms' fp32 copies counted as Transformer
# Engine's bf16 inputs (`--model`; bench/data/megatron_moe_model_kept_cpu.json).
MEASURED_MODEL_KEPT = 22_860_500


def test_whole_moe_model_keeps_what_megatron_cores_own_model_keeps(tmp_path):
    # The planner's activations of the same model on one GPU: 4.8% under (among what it does
    # not count: the unfused permutation's int64 indices, the rotary tables, the norms' 1/rms).
    # Counting the expert outputs again would put it 9% over.
    from bench.megatron_moe_memory import model_formula
    counted = model_formula(tmp_path)
    assert -0.06 < counted / MEASURED_MODEL_KEPT - 1 < 0


# torchtitan's per-op selective checkpointing (SelectiveAC) of a bf16 Llama block of
# bench/torch_sac.py's SHAPE (s 64, b 2, h 256, 8 heads, 2 KV heads, ffn 896), counted on
# PyTorch's op stream (torch 2.13.0+cpu): the kept outputs of wq, wv, attention (output and
# log-sum-exp), w1, w2, and the block input.
MEASURED_SAC = {"kept_ops": ["mm.default:65536", "mm.default:16384",
                             "_scaled_dot_product_flash_attention_for_cpu.default:69632",
                             "mm.default:229376", "mm.default:65536"],
                "layer_input_bytes": 65536, "total_bytes": 512000}
SAC_SHAPE = dict(seq_len=64, micro_batch=2, hidden=256, num_heads=8, q_dim=256, kv_dim=64,
                 ffn_hidden=896, gated=True)


def test_op_sac_keeps_what_torchtitans_policy_keeps_of_pytorchs_ops():
    from cost_models.memory import op_sac_layer_activation_bytes
    assert op_sac_layer_activation_bytes(**SAC_SHAPE, tp=1, sequence_parallel=False) == \
        MEASURED_SAC["total_bytes"]


def test_op_sac_keeps_far_less_than_megatrons_selective_recompute():
    # Megatron's selective recompute (core_attn) keeps all but the attention scores: the
    # per-op policy keeps 7.8 of the block's 17.0 bytes per token and hidden unit here.
    from cost_models.enums import AttentionKind, MlpKind, Recompute
    from cost_models.memory import transformer_layer_activation_bytes
    megatron = transformer_layer_activation_bytes(
        seq_len=64, micro_batch=2, hidden=256, num_heads=8, num_kv_heads=2, head_dim=32,
        ffn_hidden=896, mlp=MlpKind.SWIGLU, attention=AttentionKind.FLASH, dropout=False,
        tp=1, sequence_parallel=False, recompute=Recompute.SELECTIVE)
    assert MEASURED_SAC["total_bytes"] / megatron == pytest.approx(0.46, abs=0.001)


def test_op_sac_with_float8_keeps_every_linear():
    # torchao's Float8Linear runs aten._scaled_mm: compute-intensive, kept, and not an mm the
    # policy counts, so no linear output is recomputed (formula, not measured: no torchao here).
    from cost_models.memory import op_sac_layer_activation_bytes
    linears = 2 * 128 * (256 + 64 + 64 + 256 + 896 + 896 + 256)
    assert op_sac_layer_activation_bytes(**SAC_SHAPE, tp=1, sequence_parallel=False,
                                         scaled_linears=True) == \
        MEASURED_SAC["layer_input_bytes"] + linears + 69632


def test_pytorch_still_runs_the_pinned_sac_ops():
    pytest.importorskip("torch")
    from bench.torch_sac import sac_kept
    assert sac_kept() == MEASURED_SAC


# bench/torch_loss_memory.py (torch 2.13.0+cpu): torchtitan's eager loss,
# F.cross_entropy(pred.float(), labels) with pred deleted before the backward, on 512 x 4096
# bf16 logits: bytes alive per logit after the forward and at the peak (start of the backward).
MEASURED_LOSS = {"kept_bytes_per_logit": 4.0, "peak_bytes_per_logit": 12.0}
# The same under DTensor's loss_parallel (torchtitan with tensor parallelism until 2026-06), one
# gloo rank, 2048 x 32768 bf16 logits: the process's peak resident bytes over those before it.
MEASURED_LOSS_PARALLEL = {"kept_bytes_per_logit": 4.0, "peak_bytes_per_logit": 16.0}
# Hugging Face's causal-LM loss (transformers 5.24 loss/loss_utils.py ForCausalLMLoss) on the
# same 512 x 4096 bf16 logits, the model's CausalLMOutputWithPast holding them through the
# backward.
MEASURED_HF_LOSS = {"kept_bytes_per_logit": 6.002, "peak_bytes_per_logit": 14.0}


def test_eager_cross_entropy_peak_is_what_pytorch_holds():
    from cost_models.memory import eager_cross_entropy_working_bytes, output_activation_bytes
    s, b, V = 512, 1, 4096
    kept = output_activation_bytes(seq_len=s, micro_batch=b, hidden=0, vocab_size=V, tp=1,
                                   sequence_parallel=False, final_norm=False)
    working = eager_cross_entropy_working_bytes(seq_len=s, micro_batch=b, vocab_size=V, tp=1)
    assert kept / (s * V) == MEASURED_LOSS["kept_bytes_per_logit"]
    assert (kept + working) / (s * V) == MEASURED_LOSS["peak_bytes_per_logit"]


def test_hugging_face_loss_peak_is_what_pytorch_holds():
    # The returned bf16 logits (2 bytes per logit) beside torchtitan's 4 kept and 8 working.
    from cost_models.memory import (eager_cross_entropy_working_bytes, output_activation_bytes,
                                    returned_logits_bytes)
    s, V = 512, 4096
    kept = (output_activation_bytes(seq_len=s, micro_batch=1, hidden=0, vocab_size=V, tp=1,
                                    sequence_parallel=False, final_norm=False)
            + returned_logits_bytes(seq_len=s, micro_batch=1, vocab_size=V, tp=1))
    working = eager_cross_entropy_working_bytes(seq_len=s, micro_batch=1, vocab_size=V, tp=1)
    # The measured 6.002 kept: the shifted labels' int64 copy (8 bytes per token, 0.002 per
    # logit at V 4096) beside the logits.
    assert kept / (s * V) == pytest.approx(MEASURED_HF_LOSS["kept_bytes_per_logit"], abs=0.005)
    assert (kept + working) / (s * V) == MEASURED_HF_LOSS["peak_bytes_per_logit"]


def test_transformers_still_holds_the_pinned_loss_bytes():
    pytest.importorskip("transformers")
    from bench.torch_loss_memory import hf_loss_memory
    measured = hf_loss_memory()
    assert {k: round(v, 3) for k, v in measured.items()} == MEASURED_HF_LOSS


def test_loss_parallel_peak_is_what_pytorch_holds():
    from cost_models.memory import eager_cross_entropy_working_bytes
    s, V, t = 2048, 32768, 2
    # Each of t ranks holds V / t of the logits: per logit of its shard, 4 kept + 12.
    working = eager_cross_entropy_working_bytes(seq_len=s, micro_batch=1, vocab_size=V, tp=t)
    assert 4 + working / (s * V / t) == MEASURED_LOSS_PARALLEL["peak_bytes_per_logit"]


def test_pytorch_still_holds_the_pinned_loss_bytes():
    pytest.importorskip("torch")
    from bench.torch_loss_memory import loss_memory
    measured = loss_memory()
    assert {k: round(v, 3) for k, v in measured.items()} == MEASURED_LOSS


def test_pytorch_loss_parallel_still_holds_the_pinned_bytes():
    pytest.importorskip("torch")
    import sys
    if not sys.platform.startswith("linux"):
        pytest.skip("measured through /proc/self/status")
    from bench.torch_loss_memory import loss_parallel_memory
    assert loss_parallel_memory() == MEASURED_LOSS_PARALLEL
