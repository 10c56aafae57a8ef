"""Published measured runs outside the SC21 Table 1 calibration (bench/data/*.yaml): the
errors recorded when the constants were fitted (bench/calibrate_frameworks.py) are pinned, so a
change to the cost model that makes them worse fails here and must say why.

Sources and targets (the accuracy issue): SC21 Table 2 (DeepSpeed ZeRO-3 without model
parallelism, and Megatron PTD-P, 175B and 530B on 384-2240 A100): every run within 25%, here
within 10%. Megatron-Core on H100 (1.7B-462B, 48-6144 GPUs): MAPE under 8%.
"""

from pathlib import Path

import pytest

from bench.published import load_runs, predict, spearman, speed
from planner.costing.evaluate import evaluate_strategy
from cost_models.enums import Precision


@pytest.fixture(scope="module")
def predictions(tmp_path_factory):
    runs, _ = load_runs(Path(tmp_path_factory.mktemp("runs")))
    return predict(runs)


def _group(predictions, fp8: bool):
    out = {}
    for p in predictions:
        if (p.run.problem.training.precision is Precision.FP8) == fp8:
            out.setdefault(p.run.source, []).append(p)
    return out


@pytest.fixture(scope="module")
def by_source(predictions):
    """bf16 and fp16 runs per source."""
    return _group(predictions, fp8=False)


@pytest.fixture(scope="module")
def fp8_by_source(predictions):
    return _group(predictions, fp8=True)


def mape(predictions):
    return sum(abs(p.error) for p in predictions) / len(predictions)


@pytest.mark.parametrize(("source", "recorded_mape", "worst"), [
    ("narayanan2021_table2", 0.030, 0.10),       # 12 runs: ZeRO-3 (calibrated) and PTD-P
    # 9 runs; the 32B tp8 pp1 run -22% -> -30% with the per-step host + sync time (53 ms on
    # 384 GPUs) and the data-parallel buckets; H100 refitted 0.61 -> 0.62 (MAPE 7.0% -> 6.9%).
    # 6.9% -> 7.1% with H100 refitted 0.62 -> 0.61 once the per-step host term went to 0
    # (bench/calibrate_step_sync.py after the B200 GEMM rate, bench/blackwell_gemm_share.py).
    ("megatron_lm_readme_h100", 0.071, 0.31),
    # DeepSpeed pipeline engine: its per-micro-batch overhead is fitted on these two (384 and
    # 2240-3360 A100), 2.2% on the 9 runs; refitted (0.032 -> 0.04 s) with the A100 constants
    # SC21 Table 1 gave once each of its rows ran its script's DDP: BLOOM 2.2% -> 1.7%, MT-NLG
    # 1.6% -> 3.1%.
    # 0.04 -> 0.032 s refitted with the current A100 constants and per-step terms: 2.0%.
    # 2.0% -> 2.9% with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)).
    # 2.9% -> 1.9% with the overhead per layer a stage holds and micro-batch (10 ms), where
    # it was per micro-batch and stage (32 ms): 2.1% on the 9 runs; BLOOM's topology search,
    # held out, 14.8% -> 10.3%.
    ("bloom_176b_tr11", 0.019, 0.05),
    # 3.1% -> 3.7% with the A100 refit (0.72 / 128 -> 0.69 / 64, calibrate_sc21.py).
    ("mt_nlg_530b", 0.024, 0.06),                # 3.7% -> 1.9% with 0.032 s; 2.4% per layer
    # 8192-16384 H100, nothing fitted on it: the 8K rows +17%; the 128K CP16 row (all-gather
    # CP, priced since issue 14) +39% by Megatron-LM's full-s^2 FLOP count, -3% if Meta counts
    # the causal half FlashAttention runs (the paper does not say which). 20.7% -> 23.9% when
    # the interleaved schedule's pipeline transfers became hidden (Megatron-LM's
    # overlap_p2p_comm; Meta's schedule is priced as Megatron-LM's).
    # 23.9% -> 22.7% with H100 0.61.
    ("llama3_405b_table4", 0.227, 0.39),
    # Held out, nothing fitted on it: Megatron-LM of May 2022 (README MFU table = Korthikanti
    # et al. 2022 Table 5), tp 8, dp 1, sequence parallel + selective recompute on 8-512 A100,
    # no TP or pipeline-transfer overlap. 22B +2.7%, 175B -0.4%, 530B -5.0%, 1T -10.1% (vpp 1,
    # inferred: the paper interleaves only 175B and 530B; -6.1% if it ran vpp 2).
    # 4.7% -> 5.4% with the A100 refit (0.69 / 64): 1T -11.4%.
    ("megatron_lm_readme_2022_a100", 0.054, 0.12),
    # PyTorch FSDP, GPT-175B on 128-512 A100. 4.8% -> 7.6% (now fast, worst +9%) with
    # the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)): its tp-1 GEMMs lost the 2-4% the old rule charged them.
    ("fsdp_paper_2023", 0.076, 0.09),
    # torchtitan FSDP2 on 64 A100, 405B H100. 6.9% -> 9.3% when SC21 Table 1 was refitted with
    # each row's own DDP (gemm_peak_fraction 0.675 -> 0.72 with half-efficiency dim 0 -> 128):
    # these tp-1 FSDP runs have the widest GEMMs, which the refit makes 4-6% faster.
    # 9.3% -> 6.2% with the A100 refit (0.69 / 64); the 405B on 128 H100 +20%.
    # 6.2% -> 7.9% with tokens/s compared (bench/published.py), not TFLOP/s: torchtitan's TFLOP/s were
    # computed from tokens by 6N + 12Lhs, with N counting the input embedding.
    # 7.9% -> 7.6% with FlashAttention-2 on H100; 7.6% -> 5.2% with the A100 rows priced as
    # what they ran, eager PyTorch ops (configs compile = false; bench/torch_elementwise.py).
    # 5.2% -> 5.15% (405B +16.2% -> +15.4%) with the complex rotary embedding eager when compiled.
    ("torchtitan_perf_2024_a100_h100", 0.052, 0.16),
    # 25.3% -> 31.4% with tokens/s compared (bench/published.py), not TFLOP/s (Meta's 500 W H100s: peak unknown).
    # 31.4% -> 21.5% (worst 42% -> 32%) with the attention kernel of the run: FlashAttention-2
    # (SDPA's flash backend, 0.30 of peak at 8K on Hopper, measured: bench/data/kernels_h200.json)
    # 21.5% -> 7.7% (worst 32% -> 11%) with the two rows without torch.compile priced as eager
    # ops (+30% -> +4% and +6%) and per-op checkpointing re-running the memory-bound ops.
    # 7.7% -> 6.1% (worst 11% -> 7%): compiled, the complex rotary embedding still runs eager.
    # 6.1% -> 6.6% with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)).
    ("torchtitan_llama31_h100_202412", 0.066, 0.085),
    # The same machines; torchtitan's async-TP share (0.49) is fitted on this source's 70B
    # pairs (bench/calibrate_async_tp.py): 22.2% -> 14.5%.
    # 14.5% -> 17.5% with tokens/s compared (bench/published.py), not TFLOP/s.
    # 17.5% -> 11.7% with FlashAttention-2 as the run's kernel (measured rate, not fitted).
    # 11.7% -> 10.7% with per-op checkpointing re-running the memory-bound ops; 10.7% -> 8.9%
    # with the complex rotary embedding eager when compiled; 8.9% -> 7.0% (worst 14% -> 11%)
    # with per-op checkpointing re-running the forward's TP all-gathers (the share refitted).
    # 7.0% -> 11.7% (worst 12% -> 19%, all fast) with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)): Llama 3 8B's
    # tp-8 shards (n or k 512-1536) ran at 0.5-0.75 of the rate under the old rule and run at
    # 0.9 under the kernels'; a per-layer cost of these small TP steps is missing.
    ("torchtitan_asynctp_h100_202506", 0.117, 0.20),
    # torchao's bf16 baseline of its float8 table (pytorch/ao training.md), held out: +27%, the
    # H100 part unstated (see the FP8 rows).
    ("torchao_float8_llama3_8b_h100", 0.272, 0.28),
    # 124 BLOOM topology-search runs, step times, held out: 14.5% -> 10.3% (worst +56% ->
    # +45%, a Feb 20 run) with DeepSpeed's pipeline overhead per layer and micro-batch; 9.4%
    # with the engine at pp 1 too (its five pp-1 runs +15..+43% -> -6..+10%).
    ("bloom_176b_prequel", 0.094, 0.45),
    # Held out: Megatron-Bridge's controlled Qwen3-30B-A3B runs on 16 H100 (BF16, HybridEP, EP
    # 16; its skills pages @067f987df): all three priced 10-15% fast, the EP overlap's ratio
    # right (1.18x predicted, 1.177x measured) until the host constants were fitted on every
    # release (below): 1.32x, the overlap-off run now paying 2.9 s of host wait (Nsight saw
    # 1.89 s idle; the run graphs its router and preprocess) and the overlap hiding 3.1 s of
    # all-to-all where the GPU-active time fell 1.6 s.
    # Unchanged by the MoE token path's host time while it was fitted on the 25.11 rows of
    # megatron_bridge_moe alone (bench/calibrate_moe_host.py; these stay held out).
    # 12.1% -> 10.4% with the attention rate by sequence length and head dim (measured).
    # 10.4% -> 8.6% with the EP overlap's interference refitted (0.28 -> 0.32) after the
    # all-to-all dispatcher's sort copies.
    # 8.6% -> 12.4% (all fast) with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)): 256-token experts ran at a third of the rate under
    # the old rule, two thirds under the kernels' (bench/data/kernels_h100_grouped_streams.json).
    # 12.4% -> 7.7% with the host constants fitted on megatron_bridge_moe's every release (these
    # three never fitted): without the EP overlap the host now outruns the GPU at micro-batch
    # 1 (+0.9%), with it the paired passes hide it (+13.3%, +8.8% for the canonical recipe).
    ("megatron_bridge_skills_moe", 0.077, 0.14),
    # Megatron-Bridge's 17 bf16 MoE rows (GPT-OSS-120B, DeepSeek-V3 and Qwen3-235B-A22B on
    # GB200): GPT-OSS priced 30-100% fast by a cost outside the MoE terms (its attention
    # sinks and biased experts are the candidates); worst GPT-OSS B200 25.11 +102%.
    # 44.1% -> 43.4%: the attention rate by length
    # (34.0% when this was next measured) -> 30.1% (worst +94% -> +91%) with Megatron-Core's
    # eager expert bias on GPT-OSS (compute.expert_bias_bytes, counted on PyTorch's dispatch).
    # 30.1% -> 28.1% (worst +91% -> +88%) with the all-to-all dispatcher's sort copies
    # (expert_parallel.dispatcher_token_copies) and the EP overlap's interference refitted.
    # 28.1% -> 20.9% (worst +88% -> +84%) with GPT-OSS's eager GLU clamp (compute.
    # glu_clamp_bytes, counted on PyTorch's dispatch): its H100 rows +17..+20% -> +9..+12%.
    # 20.9% -> 21.0% (worst 0.84 -> 0.843) with the cross-node step constant refitted 41 -> 35 ms.
    # 21.0% -> 23.7% with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)) (small experts faster, as measured on kernels).
    # 23.7% -> 22.7% with the host constants fitted on every release and the paired passes'
    # host wait (bench/calibrate_moe_host.py).
    ("megatron_bridge_moe", 0.227, 0.85),
    # NVIDIA DGX Cloud Benchmarking (bench/data/dgxc_benchmarking.yaml), held out, bf16:
    # Nemotron-4 340B on 128-2048 H100 -5.8..-7.3%; DeepSeek-V3 on 512 / 1,024 H100 +14% /
    # +16% (priced fast); Llama 4 Maverick +1% (H100) to +9% (GB200); DeepSeek-V3 on 128-512
    # GB200 in the 25.05 release +159..+170%: that release's GB200 software ran at 10% MFU by
    # the source's own count, a third of what the same model ran in Megatron-Bridge's later
    # GB200 releases (megatron_bridge_moe), priced within 10%. Llama 3.1 405B on 32-2304 H100
    # (tp 8 cp 2, NVLS off; proxy layer counts below 576 GPUs) -5.6..-8.4%; Llama 3.1 405B of
    # release 25.05 on 128-512 GB200 -2.2..-4.0% and 512 H100 -5.8%; Nemotron-4 340B of
    # release 25.05 on 128-512 GB200 (weak and strong scaling) +1.5..+5.1%, 256 H100 -5.1%,
    # and 15B on 16 H100 -9.2%; Grok-1 314B (MoE, 8 experts top 2) on 512-2048 H100 -3.2..-4.3%;
    # NeMo 24.09's Llama 3.1 70B on 64-2048 H100 -4.8..-6.3%, 8B on 8-128 -8.4..-9.6%, GPT-3
    # 175B on 128-2048 -0.9..-2.3%, Nemotron-4 15B on 16-2048 -3.7..-7.4%: H100 bf16 dense
    # priced 1-10% slow (38 rows, 5.9%).
    ("dgxc_benchmarking", 0.138, 1.70),
])
def test_error_per_source_stays_at_what_was_recorded(by_source, source, recorded_mape, worst):
    predictions = by_source[source]
    assert mape(predictions) <= recorded_mape + 0.005, source
    assert max(abs(p.error) for p in predictions) <= worst, source


@pytest.mark.parametrize(("source", "recorded_mape", "worst"), [
    # FP8 runs, priced since issue 14 with the TE-derived FP8 GEMM efficiency per GPU (nothing
    # fitted on them but torchao's rowwise constant). Dense Megatron-Core FP8 (current scaling
    # on H100, MXFP8 / FP8-CS on B200; delayed in NeMo 24.07):
    # 14 Llama 3 runs, 8-1024 GPUs. 6.0% -> 7.2% when the interleaved schedule's pipeline
    # transfers became hidden (overlap_p2p_comm, on in these recipes): the 70B rows moved from
    # -3% to +1%, the 405B rows from +4% to +8% (H100) and +13% (B200, rate assumed as H100);
    # the rank correlation of the source rose from 0.91 to 0.95. 7.2% -> 8.3% when the source
    # stated its recipes' bf16 gradient reduce (training_overrides: half the gradient bytes
    # and reduce-scatter traffic), the rows a little faster still. 8.3% -> 8.9% with the GEMM
    # fraction refitted on H100 (0.61 -> 0.62; B200 assumes it): the B200 rows +17% -> +19%.
    # 8.9% -> 4.9% (worst 19% -> 8%) with tokens/s compared (bench/published.py), not TFLOP/s: Megatron-Bridge
    # counts half the causal score matrix (flop_utils.py), the planner all of it: the same
    # step read 12.5% fast on Llama 3 8B at 8K. And the B200 at its own GEMM rate (XLA's
    # measured B200 / H100 share, bench/blackwell_gemm_share.py; no run fitted).
    # 4.9% -> 5.6% (the H100 70B rows -7..-9%) with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    ("megatron_bridge_perf_summary", 0.056, 0.10),
    # 9 GPT-3 / Llama runs, 64-512 H100. Worst 15.9% -> 16.7% with the fixed per-step terms
    # (cost_models/step_fixed.py): GPT-3 20B on 64 GPUs, already predicted slow, pays the
    # Megatron gradient-buffer memset (15 ms) and clipping (1.5 ms) of its 10B local parameters.
    # GPT-3 20B on 64 H100 -17% -> -20% with the per-step host + sync time (53 ms).
    # 7.2% -> 6.5% (worst GPT-3 20B -20.6% -> -21.6%) with the attention rate by sequence
    # length (2K: 0.40 of peak, measured on Hopper, against the flat 0.5 before).
    # 6.5% -> 7.1% (worst -21.8% -> -24.6%) with FlashAttention-2, the kernel these runs had
    # (NeMo-Framework-Launcher 24.07's config.yaml: NVTE_FUSED_ATTN 0, "Disable cudnn FA until
    # we've tested it more"), not cuDNN: every row 2-14% slower, the Llama rows now -4..-7%.
    # 7.1% -> 7.3% (with GPT-3 175B on 128 GPUs on cuDNN) with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    ("nemo_perf_summary_2407", 0.073, 0.25),     # tokens/s compared
    # 405B tensorwise on 128 H100: 3.9% -> 5.6% with FlashAttention-2 (the run's kernel).
    # 5.7% -> 6.2%: complex rotary eager; 6.2% -> 6.8% with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)).
    ("torchtitan_perf_2024_a100_h100", 0.068, 0.085),
    # 8.1% -> 10.5%: tokens/s; 10.5% -> 1.5% with FlashAttention-2 (the run's kernel, measured);
    # 1.5% -> 3.1% (now slow) with per-op checkpointing re-running the memory-bound ops;
    # 3.1% -> 5.1% with the complex rotary embedding eager when compiled.
    # 5.1% -> 6.2% with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    ("torchtitan_llama31_8b_h200_trainy_202506", 0.062, 0.07),
    # GB200 (issue 24's expert layouts; preset gb200-nvl72 not fitted on any run): Llama 3 8B
    # on one node +23% (no pipeline, no network: the assumed GB200 rate itself is high), the
    # MXFP8 405B pipeline +45%, the 405B TP4 PP16 -13%; Megatron-FSDP rows within 10%. Since
    # the interleaved schedule hides its pipeline transfers the interleaved rows lost the
    # exposed p2p that offset that rate (405B TP4 PP8 CP2 +17% -> +26%, GPT-3 175B +2% -> +13%).
    # 15.4% / 46% -> 26.6% / 49% when the rows took the recipes' own recompute and activation
    # offload (Megatron-Bridge scripts/performance at r0.1.0 / 00b7660be: no recompute, the
    # FSDP rows cpu_offloading_num_layers 40 / 95, the 70B MXFP8 run mbs 1) instead of the
    # cheapest recompute that fits, which had picked full for four rows and hid the high
    # GB200 rate: those rows went from within 6% to +27-30%; the MXFP8 405B +45% -> +48%.
    # With the recipes' bf16 gradient reduce: 27.2% (rank correlation 0.08 -> 0.71).
    # 27.2% -> 27.9% with H100's refitted GEMM fraction (0.62), which gb200-nvl72 assumes.
    # 27.9% / 49% -> 6.4% / 21% with tokens/s compared (bench/published.py), not TFLOP/s and the GB200 at the
    # B200's GEMM rate (the same die measures 3-4.5% faster than a B200 here, not its
    # datasheet's 11%; bench/blackwell_gemm_share.py): 8B on one node +23% -> -1%.
    # 6.4% -> 7.2% with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    ("megatron_bridge_gb200_dense", 0.072, 0.23),
    # 7.0% -> 7.4% with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    ("nemo_perf_summary_2504_gb200", 0.074, 0.10),   # 19.6% -> 7.0%, likewise
    # GB300 (preset gb300-nvl72, efficiencies assumed: H100's GEMM fractions, B300's NVLink 5
    # fractions; nothing fitted on these rows): Llama 3 8B +3.0%, 70B Megatron-FSDP with 20
    # offloaded layers -1.0%, 70B MXFP8 PP4 VP5 -5.3%, 405B TP4 PP8 VP4 -9.3%, 405B MXFP8 TP2
    # PP8 CP2 -8.4% (recorded: 5.4%; the model is slow on the 405B pipelines, as on GB200).
    # 4.7% -> 10.2% (worst -12%, the model slow) with tokens/s compared (bench/published.py), not TFLOP/s and
    # H100's 0.61: the GB300 runs faster than H100's share of its peak.
    # 10.2% -> 3.4% (worst -5.0%) with the GB300's own GEMM rate (0.672), fitted on this
    # source's 8B row against its GB200 pair (bench/blackwell_gemm_share.py); the other four
    # held out (-1.3% to -5.0%).
    # 3.4% -> 3.6% with the attention curve assumed as the H100's on Blackwell (not measured).
    # 3.6% -> 2.9% with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    # 2.9% -> 4.4% (worst 7.5%) with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)) (assumed as H100's on Blackwell) and the GB300's
    # rate refitted 0.672 -> 0.619 on its pair.
    ("megatron_bridge_gb300_dense", 0.044, 0.08),
    # NVFP4 and MXFP8 at the same layouts on GB200 (Megatron-Bridge 26.04.01): the NVFP4 GEMM
    # efficiency is fitted on the 405B pair's ratio (bench/calibrate_nvfp4.py), the 70B pair's
    # ratio held out (+9.0%); the absolute errors are the assumed GB200 rate's (MXFP8 +16/+24%).
    # 22.5% -> 23.6% with the assumed GEMM fraction 0.61 -> 0.62 (as H100).
    # 23.6% -> 5.8% with tokens/s and the GB200 at the B200's rate; NVFP4 refitted 0.847 ->
    # 0.824, the 70B pair held out +10.5%.
    # 5.8% -> 4.8% (NVFP4 refitted 0.930, the 70B pair held out +9.0%) with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    # 4.8% -> 6.6% (NVFP4 refitted 0.857, the 70B pair held out +10.4%) with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)).
    ("megatron_bridge_nvfp4", 0.066, 0.11),
    # GB300 NVFP4, held out (its rate from TE's B300 GEMM profile): 70B -5.2%, 405B +0.2%.
    # 2.8% -> 7.9% with tokens/s and 0.61; 7.9% -> 5.3% with the GB300's fitted GEMM rate.
    # 5.3% -> 6.4% with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    # 6.4% -> 5.5% (worst 7.4% -> 8.5%) with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)).
    ("megatron_bridge_nvfp4_gb300", 0.064, 0.09),
    # MLPerf Training v5.1 Llama 3.1 8B: small steps (1K-16K tokens per GPU; MI355X 32K), step
    # times from the result logs. 35.1% -> 7.9% with the data-parallel buckets and the per-step
    # host + sync time, whose two constants are fitted on UF's six B200 runs
    # (bench/calibrate_step_sync.py: fitted 3.6%, the 10 held-out NVIDIA-stack runs 5.6%);
    # worst: Cisco's H100 tp 2 (an older stack without CUDA graphs) +43%.
    # 7.9% -> 8.3% when the B200 took its own GEMM rate and the two constants were refitted:
    # host 18 -> 0 ms (bounded at 0), cross-node 35 -> 41 ms; held out 5.6% -> 5.8%.
    # 8.0% -> 8.6% when FP8 GEMMs paid their short-k shape loss at the bf16 rate and the
    # cross-node constant was refitted 41 -> 35 ms (held out 5.8% -> 6.2%; MI355X -15.8% ->
    # -17.2%).
    # 8.3% -> 8.5% with the GB300's fitted GEMM rate: its 72-GPU run +14% -> +21% (priced
    # faster), its 8-GPU NVFP4 run -6% -> -1%.
    # 8.6% -> 8.0% (Cisco's H100 tp 2 +46% -> +48%) with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)) and the cross-node constant
    # refitted 35 -> 38 ms (held out 6.2% -> 5.7%).
    ("mlperf_training_v51_llama31_8b", 0.087, 0.49),
    # Recorded, not good: MoE (the bf16 MoE rows are as far off), Meta's 500 W H100s, and
    # long-context rows whose error grows with the sequence (attention at 32K-256K tokens
    # through torchtitan's all-gather CP: the next thing to calibrate).
    # 0.377 -> 0.365 when Qwen3's QK-norm inputs were counted: the two Qwen3-235B rows on 64
    # B200 (recompute not stated) no longer fit without it; full recompute: +88%/+44% ->
    # +43%/+10%.
    # 0.365 -> 0.377 with the all-to-all overlap the recipes turn on (issue 26: GPT-OSS on
    # GB200, Qwen3-235B-A22B on H100, by perf_recipes @067f987df): its exposed EP time was
    # hiding a cost outside the MoE terms on runs already priced too fast (GPT-OSS GB200
    # +29% -> +43%, Qwen3-235B H100 -8..-13% -> +8..+15%); the overlap's own ratio is
    # checked against Megatron-Bridge's A/B in tests/costing/test_moe.py.
    # 0.377 -> 0.439 with the dispatcher the recipes run (flex + HybridEP on every
    # Qwen3-30B-A3B row and on Qwen3-235B-A22B GB200 / B200 MXFP8 256, by perf_recipes and
    # the earlier scripts/performance/configs): HybridEP sends one copy per node instead of
    # per expert, so the EP time that hid the small-expert runs' missing cost shrinks (Qwen3-
    # 30B-A3B H100 FP8 -8% -> +55%, GB200/B200 +20..30% -> +30..44%); the flex model itself
    # matches Megatron-Bridge's H100 BF16 alltoall -> HybridEP pair within 1%
    # (tests/costing/test_moe.py). Worst: Qwen3-30B-A3B B200 FP8-MX 25.11 (mb 1) +273%.
    # 0.439 -> 0.417 with tokens/s compared for every source and the B200 / GB200 rates.
    # 0.417 -> 0.374 (worst 2.62 -> 2.32) now that the rows carry their recipes' settings
    # (recompute modules, dispatcher, EP overlap, pipeline layout, traced per release in
    # Megatron-Bridge): DeepSeek-V3 leaves full recompute.
    # 0.374 -> 0.176 (worst 2.32 -> 1.30) with the host time of the eager MoE token path
    # (cost_models/expert_parallel.py moe_host_s; three Megatron profile constants fitted on
    # the 25.11 rows, bench/calibrate_moe_host.py: held out 34.3% -> 22.2% over bf16 and FP8).
    # Worst: Qwen3-30B-A3B H100 FP8-CS 25.11 (pp 2 vpp 24 mb 2) +129%.
    # 0.176 -> 0.175 (worst 1.29 -> 1.26) with the attention rate by length and head dim.
    # (0.163 when next measured) -> 0.154 with GPT-OSS 26.06.01 GB200 MXFP8 left out (its
    # source names it a regression: cudnn-frontend#256, +71%) and Megatron-Core's eager expert
    # bias on the BF16 GPT-OSS rows (the MXFP8 ones run the op fuser's fused grouped MLP).
    # 0.154 -> 0.152 (worst 1.25 -> 1.19) with Transformer Engine's FP8 padding copies after
    # the all-to-all and DeepEP dispatchers (compute.quantization_padding_bytes): Qwen3-235B
    # on 256 H100 +7..+21% -> +4..+18%; 25.09's token-drop rows pad to capacity (none).
    # 0.152 -> 0.140 (worst 1.19 -> 1.04) with the all-to-all dispatcher's sort copies.
    # 14.0% -> 13.8% (Qwen3-30B-A3B H100 FP8 recipe +19..+21% -> +16..+18%) with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    # 13.8% -> 14.0% (worst Qwen3-30B-A3B 16 H100 FP8 +98% -> +107%) with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)).
    # 14.0% -> 12.6% (worst +107% -> +146%) with the experts' quantize kernels counted per FP8
    # recipe (expert_parallel.expert_quantizations), the host wait taken over the combined
    # 1F1B's paired passes, and the host constants fitted on every release (bench/
    # calibrate_moe_host.py; each release held out from the others' fit: 15.7% over bf16 and
    # FP8). Worst: Qwen3-30B-A3B on 16 H100, FP8-CS, 25.11, pp 2 vpp 24 mb 2, with the EP
    # overlap: measured 24.8 s where 25.09 measured the same layout at 12.5 s (+4%).
    # 14.0% -> 13.1% (worst +146% -> +85%, GPT-OSS on 64 B200 in 25.11) with 25.11's two
    # Qwen3-30B-A3B rows skipped: Megatron-Bridge's own issue #1998 names them a 2x dropless
    # regression against 25.09. The host constants stay as fitted with them (the refit
    # without them predicts twice the host idle Nsight measured; README, "MoE host").
    ("megatron_bridge_moe", 0.131, 0.85),
    # 32.5% -> 38.2% (worst +48% -> +59%) with the measured attention rate by length: cuDNN
    # reaches 0.55 of peak at these lengths, above the flat 0.5, so every row is predicted
    # faster still. The rows (TFLOP/s only, NeMo 24.03) read as if the kernel ran at half
    # that rate; whether NeMo then counted the causal half of the scores is not established.
    # 38.2% -> 39.9% (worst +62%) with each Hopper preset on its own GPU's measured curve
    # (the H100's: 0.56 of peak at 32K-64K; bench/data/kernels_h100.json).
    # 39.9% -> 2.5% (worst +62% -> -5.6%, rank correlation -0.96 -> 1.00) with the kernel
    # these runs had: NeMo-Framework-Launcher's config.yaml at 24.03.01 sets NVTE_FUSED_ATTN 0
    # ("Disable cudnn FA until we've tested it more"), so Transformer Engine ran the flash-attn
    # package, FlashAttention-2 (0.3 of peak, measured), not cuDNN. Nothing fitted: the rate is
    # the H100's measured FA2 curve, the kernel the launcher's setting.
    # 2.5% -> 2.5% (worst -5.6% -> -7.2%) with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    ("nemo_long_context_cp", 0.025, 0.08),
    # 28.0% -> 19.1% with the async-TP share; 22.6% with tokens/s compared.
    # 22.6% -> 18.2% with FlashAttention-2 as the run's kernel.
    # 18.2% -> 17.1% with per-op checkpointing re-running the memory-bound ops; -> 15.6% with
    # the complex rotary embedding eager when compiled; -> 13.3% with the re-run all-gathers.
    # 13.3% -> 12.3% with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    # 12.3% -> 15.9% (worst +32% -> +40%, rowwise FP8) with the GEMM shape rule measured on H100 kernels (compute.gemm_time_s: reduction k and output fill, not min(m, n, k)): see the bf16 rows.
    # 15.9% -> 9.0% (worst +40% -> +16%) with torchao's rowwise priced from its kernels
    # (GEMM rate, per-layout casts and the layout copies torch._scaled_mm forces, all timed on
    # an H200; the fitted GEMM rate gone): its 8B rowwise rows +32%/+40% -> +11%/+16%, about
    # what its bf16 rows miss (+16%/+19%).
    ("torchtitan_asynctp_h100_202506", 0.090, 0.17),
    # torchao's own Llama 3 8B on 8 H100 (pytorch/ao training.md), held out: tensorwise +37%,
    # rowwise +18%, the bf16 row +27%: which H100 part ran it is not stated (Meta's Grand
    # Teton H100s run at 500 W, torchtitan_llama31_h100_202412); their ratios to bf16 are +7%
    # and -8% (test_torchao_rowwise_gain_over_bf16_as_measured).
    ("torchao_float8_llama3_8b_h100", 0.272, 0.37),
    # 52.3% -> 53.8%: tokens/s; 53.8% -> 26.0% (worst +152% -> +72%) with FlashAttention-2
    # as the run's kernel: the long-sequence context-parallel rows are mostly attention.
    # 26.0% -> 27.1% (worst +75%) on the H100's own measured curve (FA2 0.33 of peak at 64K).
    # 27.1% -> 26.7% with per-op checkpointing re-running the memory-bound ops; -> 25.5% with
    # the complex rotary embedding eager when compiled.
    # 25.5% -> 25.6% with the short-k shape loss of FP8/FP4 GEMMs paid at the bf16
    # rate (compute.gemm_time_s; the rates re-derived from TE's profile of the same layer).
    ("torchtitan_llama31_h100_202412", 0.256, 0.75),
    # NVIDIA DGX Cloud Benchmarking, held out, FP8 (delayed scaling): Nemotron-4 340B on
    # 128-2048 H100 -1.4..+3.3%; Llama 3.1 405B on 32-2304 H100 -2.3..+7.7%, of release 25.05
    # on 512 H100 +2.4% and 128-512 GB200 +9.8..+12.1%; Llama 4 Maverick +17% (H100) and
    # +21..+26% (GB200); Nemotron-4 340B of release 25.05 on GB200 +14.6..+21.6%, on H100
    # -0.6%, 15B -2.1%: NeMo 25.04's delayed-scaling FP8 on GB200 runs 10-26% slower than
    # priced in all three models (12 rows, 17.5%), its bf16 rows within 4.3%; not fitted.
    # Grok-1 314B FP8 on 512-2048 H100 +8.2..+10.4%; NeMo 24.09's Llama 3.1 70B +7.4..+11.6%,
    # 8B -0.8..-2.0%, GPT-3 175B +7.3..+20.4% (its 512 and 1,024 GPU rows measured slower than
    # its 2,048), Nemotron-4 15B -1.3..+3.2%.
    ("dgxc_benchmarking", 0.077, 0.26),
])
def test_fp8_error_per_source_stays_at_what_was_recorded(fp8_by_source, source, recorded_mape,
                                                         worst):
    predictions = fp8_by_source[source]
    assert mape(predictions) <= recorded_mape + 0.005, source
    assert max(abs(p.error) for p in predictions) <= worst, source


@pytest.mark.parametrize(("source", "at_least"), [
    ("bloom_176b_tr11", 0.75),         # six strategies of one 176B model on 384 A100 (0.81)
    ("narayanan2021_table2", 0.9),     # ZeRO-3 vs PTD-P, 175B and 530B (0.97)
    ("bloom_176b_prequel", 0.8),       # BLOOM's 124-run topology search, Feb 2022 (0.85)
])
def test_ranking_of_measured_strategies(by_source, source, at_least):
    predictions = by_source[source]
    rho = spearman([speed(p, measured=True) for p in predictions],
                   [speed(p, measured=False) for p in predictions])
    assert rho >= at_least


@pytest.mark.parametrize(("source", "over_10_percent", "worst"), [
    ("bloom_176b_tr11", 0, 0.08),          # 5 runs; the target: within 10%
    ("bloom_176b_prequel", 3, 0.30),       # 88 runs; three outliers, the worst -30%
])
def test_peak_memory_of_megatron_deepspeed_runs(by_source, source, over_10_percent, worst):
    # nvidia-smi per-GPU memory of BLOOM's runs (the busiest GPU: stage 0, 250K vocabulary),
    # counting DeepSpeed's kept pipeline outputs, BF16_Optimizer's gradient copy and the
    # recompute working set: 4.3% mean absolute error on both sources (recorded).
    errors = [p.memory_error for p in by_source[source] if p.memory_error is not None]
    assert sum(abs(e) for e in errors) / len(errors) <= 0.045
    assert sum(abs(e) > 0.10 for e in errors) <= over_10_percent
    assert max(abs(e) for e in errors) <= worst


def test_zero3_ranks_below_3d_parallelism_at_scale_as_measured(by_source):
    # SC21 Sec. 5.2: at 1536 (175B) and 2240 (530B) GPUs PTD-P is ~3x faster than ZeRO-3.
    rows = {p.run.name: p.predicted_tflops for p in by_source["narayanan2021_table2"]}
    assert rows["sc21-t2-175b-ptdp-1536"] > 2.5 * rows["sc21-t2-175b-zero3-1536"]
    assert rows["sc21-t2-530b-ptdp-2240"] > 2.5 * rows["sc21-t2-530b-zero3-2240"]


def test_source_framework_overrides_reach_only_that_source(by_source):
    # megatron_lm_readme_2022_a100 sets framework_overrides (Megatron-LM of May 2022 had no
    # overlap_p2p_comm); the other Megatron sources keep the profile as it is.
    old = by_source["megatron_lm_readme_2022_a100"]
    assert all(not p.run.problem.framework.pipeline_p2p_overlap_interleaved for p in old)
    assert all(p.run.problem.framework.pipeline_p2p_overlap_interleaved
               for p in by_source["megatron_lm_readme_h100"])


def test_moe_memory_against_a_measured_peak(by_source):
    # Held out: Megatron-Bridge's HybridEP Qwen3-30B-A3B run on 16 H100 (EP 16, BF16, MBS 1,
    # seq 4096, EP overlap) reports "rank-0 peak allocated memory was 62.166 GiB"
    # (skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md @067f987df). Allocated memory
    # leaves out what the planner's reserve adds (CUDA context, allocator fragmentation), and
    # holds at its peak the backward's working set the planner does not count: the planner's
    # peak less its reserve is 57.1 GiB, 8% under (63.1 GiB when it kept every expert output,
    # which Megatron-Core has not since April 2025: tests/golden/test_pytorch_measured.py).
    run = next(p for p in by_source["megatron_bridge_skills_moe"]
               if p.run.name == "qwen3-30b-a3b-h100-16-bf16-hybridep-overlap")
    stage = run.report.memory.stages[run.report.memory.peak_stage]
    allocated = (stage.total_bytes - stage.other_bytes) / 2**30
    assert -0.10 < allocated / 62.166 - 1 < 0


def test_ep_overlap_hides_the_host_launches_as_nsight_shows(by_source):
    # Held out: Megatron-Bridge's matched Nsight comparison of the HybridEP Qwen3-30B-A3B runs
    # on 16 H100 (skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md @067f987df): the
    # GPU-active union is 22.821 s of the 24.714 s step without the EP overlap (1.89 s idle)
    # and 21.221 s with it, as long as the step (20.99 s): none idle. On the combined 1F1B
    # schedule one host sequence issues two micro-batches' token paths beside both passes'
    # compute and all-to-alls. The run graphs its router and preprocess, which a strategy
    # cannot state: priced eager, the overlap-off wait comes out above the idle time measured.
    runs = {p.run.name: p.report.time for p in by_source["megatron_bridge_skills_moe"]}
    off = runs["qwen3-30b-a3b-h100-16-bf16-hybridep-nooverlap"]
    on = runs["qwen3-30b-a3b-h100-16-bf16-hybridep-overlap"]
    assert on.host_wait_s < 0.01 * on.step_s
    assert off.host_wait_s > 1.0


def test_torchtitan_async_tp_share_on_held_out_pairs(tmp_path):
    # torchtitan's async-TP share (profile tp_comm_overlap_fraction 0.49) is fitted on the
    # three Llama 3 70B off/on pairs of torchtitan_asynctp_h100_202506; the three 8B pairs on
    # 64 H100 are held out: measured 1.06-1.10x, predicted 1.12-1.14x, within 6.5% of each
    # (4.4% mean, 4.1% with the former min(m, n, k) GEMM rule; 2.5% before per-op
    # checkpointing re-ran the forward's TP all-gathers, which the vanilla runs pay exposed
    # and async TP hides: the rowwise pair is off by 6.4%).
    from bench.calibrate_async_tp import FIT_ON, measured_ratio, pairs
    from planner.inputs.loader import load_framework

    share = load_framework("torchtitan").tp_comm_overlap_fraction
    held_out = [(off, on) for name, off, on in pairs(tmp_path) if FIT_ON not in name]
    assert len(held_out) == 3
    for off, on in held_out:
        assert off.problem.framework.tp_comm_overlap_fraction == share
        predicted = (evaluate_strategy(off.problem, off.strategy).time.step_s
                     / evaluate_strategy(on.problem, on.strategy).time.step_s)
        assert predicted == pytest.approx(measured_ratio(off, on), rel=0.065)


def test_run_framework_overrides_reach_only_that_run(fp8_by_source):
    # GPT-OSS's MXFP8 recipes from 26.06 run the Transformer Engine op fuser's grouped MLP,
    # which adds the expert bias inside its fused ops: those rows turn eager_expert_bias off,
    # every other row of the file keeps the Megatron profile's.
    rows = {p.run.name: p.run.problem.framework.eager_expert_bias
            for p in fp8_by_source["megatron_bridge_moe"]}
    assert not rows["gpt-oss-120b-gb200-64-mxfp8-2606"]
    assert not rows["gpt-oss-120b-gb200-64-mxfp8-2608"]
    assert rows["qwen3-30b-a3b-gb200-8-mxfp8-2606"]


def test_a_run_its_source_calls_a_regression_is_skipped(tmp_path):
    # Megatron-Bridge 26.06.01's GPT-OSS GB200 MXFP8 row carries the page's footnote naming
    # a known regression (cudnn-frontend#256): skipped, and counted as such.
    name = ("megatron_bridge_moe", "gpt-oss-120b-gb200-64-mxfp8-260601")
    runs, skipped = load_runs(tmp_path, only={name})
    assert runs == [] and skipped == {"a regression its source names": 1}
    # 25.11's Qwen3-30B-A3B dropless rows on H100 and B200: Megatron-Bridge#1998 ("the perf
    # in 25.11 is 2X slower than 25.09").
    names = {("megatron_bridge_moe", "qwen3-30b-a3b-h100-16-fp8cs-2511"),
             ("megatron_bridge_moe", "qwen3-30b-a3b-b200-8-fp8mx-2511")}
    runs, skipped = load_runs(tmp_path, only=names)
    assert runs == [] and skipped == {"a regression its source names": 2}


@pytest.mark.parametrize(("source", "bf16", "rowwise", "within"), [
    # torchao's Llama 3 8B on 8 H100, tp 1 (pytorch/ao docs/source/workflows/training.md):
    # rowwise measured 1.10x bf16, the model 1.02x (its fitted GEMM rate gave 1.08x).
    ("torchao_float8_llama3_8b_h100", "torchao-llama3-8b-h100-8-bf16",
     "torchao-llama3-8b-h100-8-fp8-rowwise", 0.08),
    # torchtitan's async-TP benchmark, TP 8 on 64 and 256 H100 (off and on): rowwise measured
    # 0.85x / 0.81x bf16 on 8B and 1.00x / 0.96x on 70B; the model within 4% of each (the
    # fitted rate: +14%, +18%, +2%, +7%).
    ("torchtitan_asynctp_h100_202506", "tt-asynctp-llama3-8b-h100-64-vanillatp-bf16",
     "tt-asynctp-llama3-8b-h100-64-vanillatp-fp8-rowwise", 0.05),
    ("torchtitan_asynctp_h100_202506", "tt-asynctp-llama3-8b-h100-64-asynctp-bf16",
     "tt-asynctp-llama3-8b-h100-64-asynctp-fp8-rowwise", 0.05),
    ("torchtitan_asynctp_h100_202506", "tt-asynctp-llama3-70b-h100-256-vanillatp-bf16",
     "tt-asynctp-llama3-70b-h100-256-vanillatp-fp8-rowwise", 0.05),
    ("torchtitan_asynctp_h100_202506", "tt-asynctp-llama3-70b-h100-256-asynctp-bf16",
     "tt-asynctp-llama3-70b-h100-256-asynctp-fp8-rowwise", 0.05),
])
def test_torchao_rowwise_gain_over_bf16_as_measured(by_source, fp8_by_source, source, bf16,
                                                    rowwise, within):
    """torchao's rowwise casts each layout apart and copies the weight gradient's operands
    into the layout torch._scaled_mm takes: at tp 8 those passes cost as much as the FP8 GEMMs
    save, at tp 1 less. Priced from kernels timed on an H200 (bench/data/
    kernels_h200_fp8_rowwise.json), nothing fitted to these runs, the model's rowwise / bf16
    speed ratio is the measured one."""
    base = next(p for p in by_source[source] if p.run.name == bf16)
    fp8 = next(p for p in fp8_by_source[source] if p.run.name == rowwise)
    measured = speed(fp8, measured=True) / speed(base, measured=True)
    predicted = speed(fp8, measured=False) / speed(base, measured=False)
    assert predicted == pytest.approx(measured, rel=within)

