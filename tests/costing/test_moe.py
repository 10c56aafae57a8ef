"""Mixture-of-Experts costs: expert memory split over ep x etp, token dispatch priced as the
all-to-all Megatron-Core runs, FLOPs of the active parameters, and the MoE rules."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from cost_models import communication as comm
from cost_models.communication import Group
from cost_models.compute import DROPLESS_IMBALANCE
from cost_models.enums import LoadBalancing, Recompute
from cost_models.compute import gemm_flops
from planner.costing.block_costs import block_cost, layer_gemms
from planner.costing.evaluate import evaluate_strategy, step_flops_per_sequence
from planner.costing.placement import tp_placement
from planner.core.candidates import Candidates
from planner.rules.gate import RuleOptions, degree_violations
from planner.core.rules import Rule
from planner.inputs.loader import load_model, make_problem
from planner.schemas.strategy import Strategy
from planner.search.candidates import _expert_values
from planner.search.solver import SearchSpace, SolverSettings, search

CONFIGS = Path(__file__).parents[1] / "inputs" / "hf_configs"


def _problem(model="mixtral-8x7b", gpus=64, **kw):
    return make_problem(model, "dgx-h100", gpus=gpus, **kw)


def _strategy(problem, **kw):
    base = dict(dp=64, tp=1, pp=1, micro_batch=1, global_batch=problem.training.global_batch)
    return Strategy(**{**base, **kw})


def test_expert_weights_are_split_over_ep():
    # Liu et al. 2025 (arXiv:2504.14960), Sec. 3: each EP rank holds E / ep experts; the dense
    # part is replicated. Mixtral 8x7B, bf16 weights (2 bytes), ZeRO 0, one stage.
    problem = _problem()
    model = problem.model
    expert = sum(b.params().expert for b in model.blocks)
    dense = model.num_params - expert
    for ep in (1, 2, 8):
        report = evaluate_strategy(problem, _strategy(problem, ep=ep, etp=1))
        assert report.memory.stages[0].weights_bytes == pytest.approx(2 * (dense + expert / ep))


def test_expert_optimizer_states_shard_over_expert_data_parallel():
    # ZeRO-1 shards the experts' fp32 states (12 B/param) over edp = tp dp / (etp ep) ranks
    # and the dense part's over dp (Megatron-Core distributed optimizer, expert-DP group).
    problem = _problem()
    model = problem.model
    expert = sum(b.params().expert for b in model.blocks)
    dense = model.num_params - expert
    report = evaluate_strategy(problem, _strategy(problem, ep=8, etp=1, zero_stage=1))
    edp = 64 // 8
    assert report.memory.stages[0].optimizer_bytes == pytest.approx(
        12 * (dense / 64 + expert / 8 / edp))


def test_dispatch_is_four_token_all_to_alls_per_layer():
    # Megatron-Core MoEAlltoAllTokenDispatcher: dispatch and combine all-to-alls of the rank's
    # T x top_k token copies (the busiest rank gets the imbalance share more), forward and
    # backward: 4 per MoE layer per micro-batch. ep 8 with etp 1 sits in one 8-GPU node.
    problem = _problem()
    layer = problem.model.blocks[1]
    cost = block_cost(layer, training=problem.training, cluster=problem.cluster,
                      framework=problem.framework, tp=[1], mb=[1], sequence_parallel=False,
                      recompute=Recompute.NONE,
                      place=tp_placement(np.array([1]), 8), ep=[8], etp=[1])
    imbalance = DROPLESS_IMBALANCE[LoadBalancing.AUX_LOSS]
    sent = problem.training.seq_len * layer.top_k * imbalance * layer.hidden * 2
    one = comm.all_to_all_time_s(sent, Group(size=8, ranks_per_node=8, num_nodes=1),
                                 problem.cluster.network)
    assert float(cost.ep_comm_s[0]) == pytest.approx(4 * one)


def test_expert_parallel_across_nodes_costs_more_than_inside_one():
    # The same tokens per rank: ep 8 stays on one node's NVLink, ep 16 spans two nodes and
    # (N - k) / N of each rank's message crosses the NIC (all_to_all_time_s).
    problem = _problem("qwen3-30b-a3b")
    inside = evaluate_strategy(problem, _strategy(problem, ep=8, etp=1))
    across = evaluate_strategy(problem, _strategy(problem, ep=16, etp=1))
    assert 0 < inside.time.ep_comm_s < across.time.ep_comm_s / 4


def test_model_flops_are_six_times_the_active_matmul_weights_plus_attention():
    # Narayanan et al. 2021, Sec. 5.1 (and PaLM App. B): 3 x the forward GEMMs, 2 FLOPs per
    # weight a token passes through, plus the attention scores and values (2 s d per head
    # each way, full s^2 as in Megatron-LM's formula). DeepSeek-V3: MLA with d_qk 192, d_v 128,
    # and one multi-token-prediction module (a 62nd layer, the 2h -> h projection and one
    # more pass through the shared output head).
    model, _ = load_model(str(CONFIGS / "deepseek-v3.json"))
    s = 4096
    flops, _, _ = step_flops_per_sequence(model, s)
    embedding = model.blocks[0].params().total
    # Parameters no GEMM multiplies: norms (2 per layer, the final one, MLA's latent norms)
    # and DeepSeek's balancing bias; the MTP module adds its layer's and 3 more norms.
    layer_norms = 2 * 7168 + 1536 + 512
    norms = 61 * layer_norms + 7168 + 58 * 256
    mtp = model.blocks[-1]
    assert mtp.kind == "mtp"
    mtp_matmul = mtp.active_params().total - layer_norms - 256 - 3 * 7168 + 129280 * 7168
    matmul = model.num_active_params - embedding - norms + mtp_matmul
    attention = 62 * 2 * s * 128 * (192 + 128)
    assert flops / s == pytest.approx(3 * (2 * matmul + attention), rel=1e-12)


def _violations(problem, **kw):
    s = _strategy(problem, **kw)
    c = Candidates.from_strategy(s, problem.framework.defaults)
    found = degree_violations(problem, c, RuleOptions())
    return {rule for rule, bad in found.items() if bad[0]}


def test_moe_rules():
    problem = _problem()
    assert Rule.EP_DIVIDES_EXPERTS in _violations(problem, ep=3, etp=1, dp=63)
    assert Rule.EXPERT_FOLDING in _violations(problem, ep=8, etp=16)
    assert Rule.MOE_SEQUENCE_PARALLEL in _violations(problem, tp=2, dp=32)
    assert _violations(problem, tp=2, dp=32, ep=8, etp=1, sequence_parallel=True) == set()
    dense = make_problem("llama3-8b", "dgx-h100", gpus=64)
    assert Rule.EP_DIVIDES_EXPERTS in _violations(dense, ep=2)


def test_validate_names_the_moe_rule_with_a_fix(cli, write):
    strategy = write("s.yaml", "dp: 63\ntp: 1\npp: 1\nep: 3\netp: 1\n")
    code, out, err = cli("validate", "mixtral-8x7b", "dgx-h100", strategy, "--gpus", "63",
                         "--no-compare")
    assert code == 1
    assert "ep (3) must divide the routed experts (8)" in out and "use ep 2" in out


def test_deepseek_v3_config_plans_with_expert_parallelism(cli, tmp_path):
    # The bar: a DeepSeek-V3 config.json on 1024 H100 plans with ep > 1, counts 671B
    # total and 37B active, and the Megatron-LM script carries the EP flags.
    import json

    code, out, err = cli("plan", str(CONFIGS / "deepseek-v3.json"), "dgx-h100", "--gpus",
                         "1024", "--seq-len", "4096", "--top", "1", "--json", "--emit",
                         "megatron", "--out", str(tmp_path))
    assert code == 0, err
    result = json.loads(out)
    assert result["params"]["total"] == 671_026_419_200
    assert round(result["params"]["active"] / 1e9) in (37, 38)
    plan = result["plans"][0]["strategy"]
    assert plan["ep"] > 1
    script = (tmp_path / "pretrain_gpt.sh").read_text()
    assert f"--expert-model-parallel-size {plan['ep']}" in script
    assert "--num-experts 256" in script and "--multi-latent-attention" in script


def test_nvl72_keeps_a_wide_expert_group_on_nvlink():
    # GB200 NVL72: 72 GPUs in one NVLink domain, so ep 64 dispatches over NVLink; on 8-GPU
    # DGX B200 nodes (same GPU, same NICs) 56 of every 64 shares cross the network.
    def ep_comm(cluster):
        problem = make_problem("qwen3-235b-a22b", cluster, gpus=576, global_batch=1152)
        s = Strategy(dp=288, tp=2, pp=1, ep=64, etp=1, micro_batch=1, sequence_parallel=True,
                     zero_stage=1, global_batch=1152)
        return evaluate_strategy(problem, s).time.ep_comm_s

    assert ep_comm("gb200-nvl72") < ep_comm("dgx-b200") / 5


def test_deepspeed_config_of_an_moe_model_carries_its_ep(cli, tmp_path):
    # DeepSpeed 0.19 reads expert parallelism from expert_parallel (AutoEP, runtime/config.py
    # get_expert_parallel_config): the emitted file sets it, and validate prices it.
    import json

    code, out, err = cli("plan", "mixtral-8x7b", "dgx-h100", "--gpus", "64", "--top", "1",
                         "--emit", "deepspeed", "--out", str(tmp_path), "--json")
    assert code == 0, err
    ep = json.loads(out)["plans"][0]["strategy"]["ep"]
    assert ep > 1
    config = tmp_path / "ds_config.json"
    assert json.loads(config.read_text())["expert_parallel"] == {"enabled": True,
                                                                  "autoep_size": ep}
    code, out, err = cli("validate", "mixtral-8x7b", "dgx-h100", str(config), "--gpus", "64",
                         "--no-compare", "--json")
    assert code == 0, err
    assert json.loads(out)["strategy"]["ep"] == ep


def test_wide_experts_try_the_expert_tp_between_1_and_tp():
    # Mixtral's experts (16,384 wide against a 6,144 model for 8x22B) split well, and
    # Megatron-Core's parallel folding takes any etp. With tp 8 and no pipeline, etp 1 does
    # not fit (a whole expert of every layer on each GPU); etp 2 does, with GEMMs four times
    # wider than etp 8's and ETP collectives over 2 GPUs.
    problem = _problem("mixtral-8x22b", gpus=128, seq_len=4096, global_batch=1024)
    space = SearchSpace(tp=8, pp=1, ep=8)
    plans = search(problem, space, SolverSettings(top_k=3)).plans
    assert plans[0].strategy.etp == 2
    etp8 = search(problem, SearchSpace(tp=8, pp=1, ep=8, etp=8), SolverSettings(top_k=1)).plans
    assert plans[0].time.step_s < 0.95 * etp8[0].time.step_s
    # Fine-grained experts (DeepSeek-V3: 2,048 wide against 7,168) keep etp 1 or tp.
    fine = make_problem("deepseek-v3", "dgx-h100", gpus=256)
    assert not fine.model.wide_experts and problem.model.wide_experts
    etps = {e for _, e, _ in _expert_values(fine, SearchSpace(), SearchSpace().rule_options(fine),
                                            tp=8, cp=1, dp=32, dispatchers=[0])}
    assert etps == {1, 8}


# Megatron-LM's MoE release tests (@d98e8a64): the last stage's steady and peak allocated
# bytes, with their provenance and the GPU counts they imply, in bench/data.
RELEASE_TESTS_FILE = (Path(__file__).parents[2] / "bench/data/memory"
                      / "megatron_lm_moe_release_tests.yaml")
_RELEASE = yaml.safe_load(RELEASE_TESTS_FILE.read_text())
RELEASE_TESTS = {run["name"]: run for run in _RELEASE["runs"]}


def _release_test_last_stage(tmp_path, name):
    run = RELEASE_TESTS[name]
    model = run["model"]
    if model in _RELEASE["models"]:
        path = tmp_path / f"{model}.yaml"
        path.write_text(yaml.safe_dump({"name": model, **_RELEASE["models"][model]}))
        model = str(path)
    degrees = run["strategy"]
    problem = make_problem(model, run["cluster"], gpus=run["gpus"], seq_len=4096,
                           global_batch=degrees["global_batch"])
    s = Strategy(**degrees, sequence_parallel=True, zero_stage=1)
    return evaluate_strategy(problem, s).memory.stages[-1]


@pytest.mark.parametrize("name", list(RELEASE_TESTS))
def test_last_stage_states_match_megatron_release_tests(tmp_path, name):
    # Weights, gradients and optimizer states of the last stage against the steady allocation,
    # which also holds persistent buffers the states leave out (about 1 GB for Mixtral, 3 GB
    # beside HybridEP): within 10% below it. The DeepSeek proxies' last stage runs the MTP
    # module, so it keeps a copy of the word embedding (Megatron-Core gpt_model.py builds it
    # wherever `pre_process or mtp_process`): without it, 29% and 17% under.
    last = _release_test_last_stage(tmp_path, name)
    steady = RELEASE_TESTS[name]["measured"]["steady_bytes"]
    states = last.weights_bytes + last.gradients_bytes + last.optimizer_bytes
    assert -0.10 < states / steady - 1 < 0


@pytest.mark.parametrize("name", list(RELEASE_TESTS))
def test_last_stage_activations_match_megatron_release_tests(tmp_path, name):
    # The kept activations against mem-max-allocated less the steady allocation (1F1B: one
    # micro-batch in flight on the last stage; interleaved: several), which also holds the
    # backward's working set the planner does not count (the expert path's and the logits'
    # gradients): Mixtral 8x22B 0.90, 8x7B 0.93, the DeepSeek proxies 1.07 (H100) and 1.13
    # (GB200). Counting the expert output, as Megatron-Core kept it for the combine's
    # probabilities until April 2025 (tests/golden/test_pytorch_measured.py counts what it
    # keeps now), gave 1.02, 0.99, 1.26 and 1.31.
    last = _release_test_last_stage(tmp_path, name)
    measured = RELEASE_TESTS[name]["measured"]
    steady, peak = measured["steady_bytes"], measured["peak_bytes"]
    assert last.activations_bytes / (peak - steady) == pytest.approx(1, abs=0.15)


@pytest.mark.parametrize(("model", "mtp", "published_gflop_per_token"), [
    # Megatron-Bridge performance tables (bench/data/megatron_bridge_moe.yaml): Model TFLOP/s
    # per GPU / tokens/s per GPU, the median over the rows at seq 4096, as its flop_utils.py
    # counts them: 3 x 2 x the matmuls a token passes through, causal attention halved.
    ("qwen3-30b-a3b", True, 23.0),
    ("qwen3-235b-a22b", True, 148.0),
    ("deepseek-v3", True, 260.0),        # with the MTP module
    ("deepseek-v3", False, 249.35),      # the two "w/o MTP" rows
])
def test_moe_flops_per_token_match_megatron_bridge(model, mtp, published_gflop_per_token):
    m, _ = load_model(model)
    if not mtp:
        m = m.model_copy(update=dict(blocks=tuple(b for b in m.blocks if b.kind != "mtp")))
    s = 4096
    flops, _, _ = step_flops_per_sequence(m, s)
    attention = 0.0
    for b in m.blocks:
        if b.kind in ("transformer", "mtp"):
            g = layer_gemms(b.layer if b.kind == "mtp" else b, seq_len=s)
            attention += 3 * (gemm_flops(g.scores) + gemm_flops(g.attend))
    causal = (flops - attention / 2) / s / 1e9        # their convention: the masked half skipped
    assert causal == pytest.approx(published_gflop_per_token, rel=0.01)


def test_a2a_overlap_speedup_against_megatron_bridge_measurement():
    # Megatron-Bridge skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md @067f987df
    # ("Correctness-First alltoall Benchmark"): Qwen3-30B-A3B on 16 H100, EP 16, alltoall
    # dispatcher, BF16, GBS 1024 (seq 4096, MBS 1), no CUDA graphs: 41.25 s without EP overlap,
    # 31.31 s with --overlap-moe-expert-parallel-comm, a 1.317x speedup. The Megatron
    # profile's moe_a2a_overlap_interference (0.32) is fitted on this one pair, so the ratio is
    # pinned to the fit's grid (1.317); the absolute steps are not fitted (51.5 s and 39.1 s
    # against 41.25 and 31.31: +25%, +25%; +17% and +18% before the all-to-all dispatcher's
    # sort copies, with 0.28).
    problem = make_problem("qwen3-30b-a3b", "dgx-h100", gpus=16, seq_len=4096,
                           global_batch=1024, precision="bf16")
    base = dict(dp=16, tp=1, pp=1, ep=16, etp=1, micro_batch=1, zero_stage=1,
                global_batch=1024)
    off = evaluate_strategy(problem, Strategy(**base, moe_a2a_overlap=False))
    on = evaluate_strategy(problem, Strategy(**base, moe_a2a_overlap=True))
    assert on.strategy.moe_a2a_overlap and not off.strategy.moe_a2a_overlap
    assert off.time.step_s / on.time.step_s == pytest.approx(41.25 / 31.31, rel=0.01)


def test_hybridep_against_megatron_bridge_canonical_h100_run():
    # Megatron-Bridge skills/nemo-mbridge-perf-moe-dispatcher-selection/SKILL.md @067f987df
    # ("Qwen3 30B A3B on H100"): the canonical 16 x H100 BF16 recipe (EP 16, GBS 1024) with
    # HybridEP and EP overlap averaged 20.147 s per step; the alltoall run with overlap
    # measured 31.31 s (the overlap A/B above): 1.554x. Held out (nothing is fitted on it).
    # Not one knob: the HybridEP run also sets 32 dispatcher SMs, 64-token combine chunks,
    # no delayed wgrad and CUDA graphs over the router and preprocessing, none of which the
    # planner prices; the planner gives 1.647x (38.3 s -> 23.2 s, +22% and +15% slow; 1.595x,
    # 39.1 s -> 24.5 s, with the former min(m, n, k) GEMM shape rule, which priced the
    # 256-token experts at a third of their rate; 1.565x before the all-to-all dispatcher's
    # sort copies).
    problem = make_problem("qwen3-30b-a3b", "dgx-h100", gpus=16, seq_len=4096,
                           global_batch=1024, precision="bf16")
    base = dict(dp=16, tp=1, pp=1, ep=16, etp=1, micro_batch=1, zero_stage=1,
                global_batch=1024, moe_a2a_overlap=True)
    a2a = evaluate_strategy(problem, Strategy(**base, moe_dispatcher="alltoall"))
    flex = evaluate_strategy(problem, Strategy(**base, moe_dispatcher="flex-hybridep"))
    assert flex.strategy.moe_dispatcher == "flex-hybridep"
    assert a2a.time.step_s / flex.time.step_s == pytest.approx(31.31 / 20.147, rel=0.07)


def test_flex_backends_differ_only_beyond_eight_gpus_of_nvlink():
    # DeepEP forwards over NVLink inside at most 8 GPUs (NUM_MAX_NVL_PEERS); HybridEP over the
    # NVLink domain: on GB200 NVL72 an EP group of 16 is one domain for HybridEP, four
    # 4-GPU trays joined by RDMA for DeepEP; on DGX H100 the two are the same.
    gb = make_problem("qwen3-30b-a3b", "gb200-nvl72", gpus=16, seq_len=4096,
                      global_batch=256, precision="bf16")
    base = dict(dp=16, tp=1, pp=1, ep=16, etp=1, micro_batch=1, zero_stage=1,
                global_batch=256, moe_a2a_overlap=False)
    deepep = evaluate_strategy(gb, Strategy(**base, moe_dispatcher="flex-deepep"))
    hybrid = evaluate_strategy(gb, Strategy(**base, moe_dispatcher="flex-hybridep"))
    assert hybrid.time.ep_comm_s < deepep.time.ep_comm_s


@pytest.mark.parametrize(("kw", "applies"), [
    (dict(pp=1), True),
    (dict(pp=2, vpp=1), False),          # a pipeline needs the interleaved schedule
    (dict(pp=2, vpp=2), True),
    (dict(pp=1, recompute="full"), False),   # Megatron-Core asserts no full recompute
    (dict(pp=1, ep=1, etp=1), False),        # nothing to overlap without expert parallelism
])
def test_a2a_overlap_applies_where_megatron_core_allows_it(kw, applies):
    # megatron/core/transformer/transformer_config.py __post_init__ (@d98e8a64) asserts
    # these for overlap_moe_expert_parallel_comm.
    problem = make_problem("qwen3-30b-a3b", "dgx-h100", gpus=16, seq_len=4096,
                           global_batch=1024, precision="bf16")
    fields = {**dict(tp=1, ep=16, etp=1, micro_batch=1, zero_stage=1, global_batch=1024),
              **kw}
    fields["dp"] = 16 // fields["pp"]
    fields["ep"] = min(fields["ep"], fields["dp"])
    report = evaluate_strategy(problem, Strategy(**fields, moe_a2a_overlap=True))
    assert report.strategy.moe_a2a_overlap is applies


def _gpt_oss_without(field: str, *, measure: str = "compute", **strategy):
    """gpt-oss-120b on 64 H100 (ep 8, micro-batch 1 of a 512 batch, bf16): the problem, what
    the Megatron profile's `field` adds (compute seconds, or stage 0's activation bytes), and
    the H100's achieved HBM rate."""
    from dataclasses import replace
    problem = make_problem("gpt-oss-120b", "dgx-h100", gpus=64, seq_len=4096,
                           global_batch=512, precision="bf16")
    assert getattr(problem.framework, field)
    off = replace(problem, framework=problem.framework.model_copy(update={field: False}))
    s = Strategy(**{**dict(dp=64, tp=1, pp=1, ep=8, etp=1, micro_batch=1, global_batch=512,
                           recompute="none", moe_a2a_overlap=False), **strategy})

    def value(p):
        report = evaluate_strategy(p, s)
        return (report.time.compute_s if measure == "compute"
                else report.memory.stages[0].activations_bytes)
    gpu, eff = problem.cluster.gpu, problem.cluster.efficiency
    return problem, value(problem) - value(off), gpu.hbm_gb_per_s * 1e9 * eff.hbm_fraction


def test_biased_experts_pay_megatron_eager_output_bias():
    # gpt-oss (biased experts) on Megatron-Core: TEGroupedMLP._apply_bias adds each local
    # expert's bias times the routing probability after linear_fc2 as eager ops, 12 bytes per
    # pair and hidden value forward and 16 backward (counted on PyTorch's dispatch,
    # bench/torch_elementwise.py). 64 H100, ep 8, micro-batch 1 of 4,096 tokens, 8 micro-
    # batches: 4,096 x top-4 = 16,384 pairs per rank on average, the busiest rank 1.52x that
    # (dropless routing with the auxiliary loss, DROPLESS_IMBALANCE), of h 2,880 in each of
    # 36 layers: 28 x 1.52 x 16,384 x 2,880 x 36 x 8 bytes at the H100's achieved HBM rate.
    from cost_models.compute import expert_bias_bytes
    problem, extra, rate = _gpt_oss_without("eager_expert_bias")
    forward, backward = expert_bias_bytes(pairs=16384, hidden=2880)
    assert (forward, backward) == (12 * 16384 * 2880, 16 * 16384 * 2880)
    assert DROPLESS_IMBALANCE[problem.model.blocks[1].load_balancing] == 1.52
    assert extra == pytest.approx(1.52 * 36 * 8 * (forward + backward) / rate, rel=1e-6)
    # A model without expert biases pays nothing.
    from dataclasses import replace
    mixtral = _problem(global_batch=512)
    plain = Strategy(dp=64, tp=1, pp=1, ep=8, etp=1, micro_batch=1, global_batch=512,
                     recompute="none", moe_a2a_overlap=False)
    off = replace(mixtral, framework=mixtral.framework.model_copy(
        update={"eager_expert_bias": False}))
    assert (evaluate_strategy(mixtral, plain).time.compute_s
            == evaluate_strategy(off, plain).time.compute_s)


def test_clamped_glu_pays_megatron_eager_clamp():
    # gpt-oss's experts clamp their GLU input (HF swiglu_limit 7); Megatron-Core's
    # weighted_bias_quick_geglu_impl does it as eager ops, two clamps and a torch.cat of the
    # first grouped GEMM's output (16 bytes per pair and GLU column forward, 30 backward,
    # counted on PyTorch's dispatch, bench/torch_elementwise.py). 64 H100, ep 8, micro-batch 1
    # of 4,096 tokens, 8 micro-batches: 16,384 pairs per rank on average, the busiest 1.52x,
    # of 2,880 GLU columns in each of 36 layers.
    from cost_models.compute import glu_clamp_bytes
    problem, extra, rate = _gpt_oss_without("eager_glu_clamp")
    assert problem.model.blocks[1].glu_clamp == 7.0
    forward, backward = glu_clamp_bytes(rows=16384, columns=2880)
    assert (forward, backward) == (16 * 16384 * 2880, 30 * 16384 * 2880)
    assert extra == pytest.approx(1.52 * 36 * 8 * (forward + backward) / rate, rel=1e-6)
    # moe_act re-runs the clamp with the activation in the backward pass.
    _, rerun, _ = _gpt_oss_without("eager_glu_clamp", recompute="selective",
                                   recompute_modules=["moe_act"])
    assert rerun == pytest.approx(1.52 * 36 * 8 * (2 * forward + backward) / rate, rel=1e-6)
    # The clamps keep the unclamped GEMM output: 4 bytes per pair and column more at the mean
    # load, in each of the 36 layers of the one stage.
    _, kept, _ = _gpt_oss_without("eager_glu_clamp", measure="activations")
    assert kept == pytest.approx(4 * 16384 * 2880 * 36, rel=1e-6)


def test_quantized_experts_pay_the_padding_copies_where_the_dispatcher_does_not_pad():
    # Megatron-Core TEGroupedMLP under FP8: Transformer Engine's Fp8Padding copies the
    # dispatched tokens into an aligned buffer and Fp8Unpadding the output back, forward and
    # backward (2 copies x read + write x 2 bytes per bf16 value, each way), unless HybridEP
    # pads as it dispatches. Qwen3-30B-A3B on 16 H100, ep 16, micro-batch 1 of 4,096 tokens:
    # 4,096 x top-8 = 32,768 pairs per rank (the busiest rank 1.52x, dropless with the
    # auxiliary loss) of h 2,048 in each of 48 layers, 64 micro-batches.
    from dataclasses import replace

    from cost_models.compute import quantization_padding_bytes
    problem = make_problem("qwen3-30b-a3b", "dgx-h100", gpus=16, seq_len=4096,
                           global_batch=1024, precision="fp8", fp8_recipe="tensorwise")
    base = dict(dp=16, tp=1, pp=1, ep=16, etp=1, micro_batch=1, global_batch=1024,
                recompute="none", moe_a2a_overlap=False)
    no_copies = replace(problem, framework=problem.framework.model_copy(
        update={"moe_padding_copies": ()}))
    forward, backward = quantization_padding_bytes(pairs=32768, hidden=2048)
    assert forward == backward == 8 * 32768 * 2048
    rate = problem.cluster.gpu.hbm_gb_per_s * 1e9 * problem.cluster.efficiency.hbm_fraction
    alltoall = Strategy(**base, moe_dispatcher="alltoall")
    extra = (evaluate_strategy(problem, alltoall).time.compute_s
             - evaluate_strategy(no_copies, alltoall).time.compute_s)
    assert extra == pytest.approx(1.52 * 48 * 64 * (forward + backward) / rate, rel=1e-6)
    # HybridEP pads as it dispatches; bf16 experts are not padded.
    hybrid = Strategy(**base, moe_dispatcher="flex-hybridep")
    assert (evaluate_strategy(problem, hybrid).time.compute_s
            == evaluate_strategy(no_copies, hybrid).time.compute_s)
    bf16 = make_problem("qwen3-30b-a3b", "dgx-h100", gpus=16, seq_len=4096,
                        global_batch=1024, precision="bf16")
    bf16_off = replace(bf16, framework=bf16.framework.model_copy(
        update={"moe_padding_copies": ()}))
    assert (evaluate_strategy(bf16, alltoall).time.compute_s
            == evaluate_strategy(bf16_off, alltoall).time.compute_s)


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed"])
def test_torchtitan_and_autoep_dispatchers_sync_like_megatron(framework):
    # torchtitan's AllToAllTokenDispatcher (_sync_token_count_exchange) and DeepSpeed AutoEP
    # (_split_plan_from_expert_counts: .cpu().tolist()) copy the all-to-all split sizes to the
    # host once per MoE layer and forward pass, as Megatron-Core's alltoall dispatcher does:
    # the same 60 us of GPU idle each. mixtral-8x7b: 32 MoE layers, 64 GPUs, ep 8, 512
    # sequences in micro-batches of 1 over dp 64: 8 forward passes per step.
    from dataclasses import replace
    problem = _problem(global_batch=512, framework=framework)
    assert problem.framework.moe_dispatcher_sync_s == 60e-6
    off = replace(problem, framework=problem.framework.model_copy(
        update={"moe_dispatcher_sync_s": 0.0}))
    strategy = _strategy(problem, ep=8, etp=1, recompute="none", zero_stage=1)
    extra = (evaluate_strategy(problem, strategy).time.compute_s
             - evaluate_strategy(off, strategy).time.compute_s)
    assert extra == pytest.approx(32 * 8 * 60e-6, rel=1e-6)
    # Without expert parallelism nothing is exchanged, nothing synced.
    local = _strategy(problem, ep=1, etp=1, recompute="none", zero_stage=1)
    assert (evaluate_strategy(problem, local).time.compute_s
            == evaluate_strategy(off, local).time.compute_s)
