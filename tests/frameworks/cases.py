"""Plans the emitter tests share: for each target, strategies its own rules accept."""

from __future__ import annotations

from dataclasses import dataclass

from planner.costing.evaluate import evaluate_strategy
from planner.frameworks import LaunchPlan
from planner.inputs.loader import make_problem
from planner.schemas.strategy import LaunchTarget, Strategy

T = LaunchTarget


@dataclass(frozen=True)
class Case:
    name: str
    target: LaunchTarget
    model: str
    cluster: str
    gpus: int
    strategy: dict
    precision: str | None = None
    fp8_recipe: str | None = None

    def plan(self) -> LaunchPlan:
        # Priced by the target's own framework profile, as `validate` prices the file.
        framework = "megatron" if self.target is T.TORCHRUN else self.target.framework
        problem = make_problem(self.model, self.cluster, gpus=self.gpus,
                               precision=self.precision, framework=framework,
                               fp8_recipe=self.fp8_recipe)
        strategy = Strategy(global_batch=problem.training.global_batch, **self.strategy)
        return LaunchPlan(problem, strategy, evaluate_strategy(problem, strategy))


CASES = [
    # MoE: DeepSeek-V3 (MLA, dense-first layers, shared expert, expert-bias balancing) with
    # experts over 128 ranks that fold across TP and DP (Liu et al. 2025, arXiv:2504.14960).
    Case("deepseek-v3-ep", T.MEGATRON, "deepseek-v3", "dgx-h100", 1024,
         dict(dp=128, tp=8, pp=1, ep=128, etp=1, micro_batch=1, sequence_parallel=True,
              recompute="full", zero_stage=1)),
    # DeepSeek-V3 with the recompute modules of NVIDIA's 1,024-GPU H100 recipe
    # (Megatron-Bridge perf_recipes/deepseek/h100/deepseek_v3.py @067f987df: TP 2, EP 64,
    # recompute_modules [mla_up_proj, mlp]) on the degrees of deepseek-v3-ep: pp 1 keeps the
    # recipe's uneven pipeline layout (PP 8, VP 4) out of it.
    Case("deepseek-v3-recompute-modules", T.MEGATRON, "deepseek-v3", "dgx-h100", 1024,
         dict(dp=128, tp=8, pp=1, ep=128, etp=1, micro_batch=1, sequence_parallel=True,
              recompute="selective", recompute_modules=("mla_up_proj", "mlp"), zero_stage=1)),
    # gpt-oss: alternating sliding-window attention, sinks, biased experts (etp 1).
    Case("gpt-oss-120b-ep", T.MEGATRON, "gpt-oss-120b", "dgx-h100", 64,
         dict(dp=64, tp=1, pp=1, ep=64, etp=1, micro_batch=1, recompute="full", zero_stage=1)),
    # Qwen3-30B-A3B as NVIDIA's 16-GPU H100 recipe lays it out (EP 16 over two nodes), with the
    # expert all-to-all hidden behind the other micro-batch (--overlap-moe-expert-parallel-comm
    # --delay-wgrad-compute, Megatron-Bridge moe_a2a_overlap).
    Case("qwen3-30b-a3b-ep-overlap", T.MEGATRON, "qwen3-30b-a3b", "dgx-h100", 16,
         dict(dp=16, tp=1, pp=1, ep=16, etp=1, micro_batch=1, zero_stage=1,
              moe_a2a_overlap=True)),
    Case("mixtral-8x7b-ep", T.TORCHTITAN, "mixtral-8x7b", "dgx-h100", 64,
         dict(dp=64, tp=1, pp=1, ep=8, etp=1, micro_batch=1, recompute="full", zero_stage=3)),
    # Context parallelism as each framework runs it: Megatron-LM's hierarchical a2a+p2p,
    # torchtitan's all-gathered K/V, DeepSpeed-Ulysses, MindFormers ulysses_cp.
    Case("llama3-8b-cp-hierarchical", T.MEGATRON, "llama3-8b", "dgx-h100", 64,
         dict(dp=2, tp=2, pp=1, cp=16, cp_comm="a2a+p2p", cp_a2a=4, micro_batch=1,
              sequence_parallel=True, recompute="selective", zero_stage=1)),
    # FP8 as Megatron-LM runs it: current scaling with FP8 parameters on Hopper, MXFP8 on
    # Blackwell (--reuse-grad-buf-for-mxfp8-param-ag), delayed scaling without FP8 params.
    Case("llama3-8b-fp8", T.MEGATRON, "llama3-8b", "dgx-h100", 8,
         dict(dp=8, tp=1, pp=1, micro_batch=1, recompute="full", zero_stage=1,
              fp8_param_gather=True), precision="fp8"),
    Case("llama3-8b-mxfp8", T.MEGATRON, "llama3-8b", "dgx-b200", 8,
         dict(dp=4, tp=2, pp=1, micro_batch=1, sequence_parallel=True, recompute="selective",
              zero_stage=1, fp8_param_gather=True), precision="mxfp8"),
    # NVFP4 (Megatron-Bridge bf16_with_nvfp4_mixed): --fp4-format e2m1 --fp4-recipe nvfp4 with
    # NVFP4 parameters gathered (--fp4-param-gather), its 26.04.01 GB200 layout.
    Case("llama3-70b-nvfp4", T.MEGATRON, "llama3-70b", "gb200-nvl72", 64,
         dict(dp=8, tp=2, pp=4, vpp=5, micro_batch=1, sequence_parallel=True,
              recompute="none", zero_stage=1, fp8_param_gather=True), precision="nvfp4"),
    Case("llama3-8b-fp8-delayed", T.MEGATRON, "llama3-8b", "dgx-h100", 16,
         dict(dp=4, tp=4, pp=1, micro_batch=1, sequence_parallel=True, recompute="full",
              zero_stage=0, fp8_param_gather=False), precision="fp8", fp8_recipe="delayed"),
    Case("llama3-8b-float8", T.TORCHTITAN, "llama3-8b", "dgx-h100", 8,
         dict(dp=8, tp=1, pp=1, micro_batch=1, recompute="full", zero_stage=3,
              fp8_param_gather=True), precision="fp8", fp8_recipe="tensorwise"),
    Case("llama3-8b-cp", T.TORCHTITAN, "llama3-8b", "dgx-h100", 16,
         dict(dp=4, tp=2, pp=1, cp=2, cp_comm="all_gather", micro_batch=1,
              sequence_parallel=True, recompute="selective", zero_stage=3)),
    Case("llama3-8b-ulysses", T.DEEPSPEED, "llama3-8b", "dgx-h100", 16,
         dict(dp=4, tp=1, pp=1, cp=4, cp_comm="a2a", micro_batch=1, recompute="full",
              zero_stage=1)),
    Case("llama3-8b-ulysses", T.MINDSPORE, "llama3-8b", "dgx-h100", 16,
         dict(dp=4, tp=2, pp=1, cp=2, cp_comm="a2a", micro_batch=1, sequence_parallel=True,
              recompute="selective", zero_stage=1)),
    # Korthikanti et al. 2022's 175B configuration, Megatron-LM's own ground.
    Case("gpt3-175b-interleaved", T.MEGATRON, "gpt3-175b", "dgx-a100-80gb", 1024,
         dict(dp=16, tp=8, pp=8, vpp=3, micro_batch=1, sequence_parallel=True,
              recompute="selective", zero_stage=1)),
    Case("llama3-70b-fsdp", T.MEGATRON, "llama3-70b", "dgx-h100", 64,
         dict(dp=16, tp=4, pp=1, micro_batch=1, sequence_parallel=True, recompute="full",
              zero_stage=3)),
    Case("bert-large-fp16", T.MEGATRON, "bert-large", "dgx-a100-80gb", 8,
         dict(dp=8, tp=1, pp=1, micro_batch=4, zero_stage=0), precision="fp16"),
    Case("llama3-8b-zero3", T.DEEPSPEED, "llama3-8b", "dgx-h100", 8,
         dict(dp=8, tp=1, pp=1, micro_batch=1, recompute="full", zero_stage=3)),
    Case("gpt3-175b-pipeline-fp16", T.DEEPSPEED, "gpt3-175b", "dgx-a100-80gb", 1024,
         dict(dp=16, tp=8, pp=8, micro_batch=1, recompute="full", zero_stage=1),
         precision="fp16"),
    # AutoEP (expert_parallel.autoep_size): experts over 8 of the 64 data-parallel ranks.
    Case("mixtral-8x7b-autoep", T.DEEPSPEED, "mixtral-8x7b", "dgx-h100", 64,
         dict(dp=64, tp=1, pp=1, ep=8, etp=1, micro_batch=1, recompute="full", zero_stage=2)),
    Case("llama3-8b-node", T.TORCHRUN, "llama3-8b", "dgx-h100", 8,
         dict(dp=8, tp=1, pp=1, micro_batch=1, zero_stage=3)),
    Case("gpt3-175b-ascend-hccl", T.TORCHRUN, "gpt3-175b", "ascend-910b", 512,
         dict(dp=8, tp=8, pp=8, micro_batch=1, sequence_parallel=True, recompute="full",
              zero_stage=1)),
    Case("llama3-8b-fsdp", T.TORCHTITAN, "llama3-8b", "dgx-h100", 8,
         dict(dp=8, tp=1, pp=1, micro_batch=1, recompute="selective", zero_stage=3)),
    Case("llama3-70b-3d", T.TORCHTITAN, "llama3-70b", "dgx-h100", 64,
         dict(dp=2, tp=8, pp=4, vpp=2, micro_batch=1, sequence_parallel=True,
              recompute="full", zero_stage=2)),
    Case("gpt2-xl-ddp", T.TORCHTITAN, "gpt2-xl", "dgx-a100-80gb", 16,
         dict(dp=16, tp=1, pp=1, micro_batch=4, zero_stage=0)),
    Case("llama3-405b-published-layout", T.MEGATRON, "llama3-405b", "dgx-h100", 1024,
         dict(dp=8, tp=8, pp=16, micro_batch=1, sequence_parallel=True, recompute="full",
              zero_stage=1, layers_per_stage=(7,) + (8,) * 14 + (7,))),
    Case("llama3-8b-balanced", T.MEGATRON, "llama3-8b", "dgx-h100", 32,
         dict(dp=8, tp=1, pp=4, vpp=2, micro_batch=1, recompute="full", zero_stage=1,
              layers_per_stage=(4, 4, 4, 3, 4, 5, 5, 3))),
    Case("llama3-8b-balanced-fqns", T.TORCHTITAN, "llama3-8b", "dgx-h100", 32,
         dict(dp=8, tp=1, pp=4, vpp=2, micro_batch=1, recompute="full", zero_stage=3,
              layers_per_stage=(4, 4, 4, 3, 4, 5, 5, 3))),
    Case("llama2-7b-ascend-offset", T.MINDSPORE, "llama2-7b", "ascend-910b", 32,
         dict(dp=8, tp=1, pp=4, micro_batch=1, recompute="full", zero_stage=1,
              layers_per_stage=(8, 9, 9, 6))),
    Case("llama2-7b-ascend", T.MINDSPORE, "llama2-7b", "ascend-910b", 64,
         dict(dp=8, tp=8, pp=1, micro_batch=1, sequence_parallel=True, recompute="selective",
              zero_stage=1)),
    # HSDP: ZeRO-3 inside each node (8 ranks), replicated over 8 nodes.
    Case("llama3-8b-hsdp", T.TORCHTITAN, "llama3-8b", "dgx-h100", 64,
         dict(dp=64, tp=1, pp=1, micro_batch=1, recompute="full", zero_stage=3, dp_shard=8)),
    Case("llama3-8b-hsdp", T.MEGATRON, "llama3-8b", "dgx-h100", 64,
         dict(dp=64, tp=1, pp=1, micro_batch=1, recompute="full", zero_stage=3, dp_shard=8)),
    Case("llama3-8b-mics", T.DEEPSPEED, "llama3-8b", "dgx-h100", 64,
         dict(dp=64, tp=1, pp=1, micro_batch=1, recompute="full", zero_stage=3, dp_shard=8)),
    Case("gpt3-175b-ascend-pipeline", T.MINDSPORE, "gpt3-175b", "ascend-910b", 512,
         dict(dp=8, tp=8, pp=8, micro_batch=1, recompute="full", zero_stage=1)),
    # The MindFormers run YAML of the same kind of plans: a pipeline with uneven stages
    # (model_config.offset), and tensor parallelism with sequence parallelism.
    Case("llama2-7b-ascend-offset", T.MINDFORMERS, "llama2-7b", "ascend-910b", 32,
         dict(dp=8, tp=1, pp=4, micro_batch=1, recompute="full", zero_stage=1,
              layers_per_stage=(8, 9, 9, 6))),
    Case("llama2-7b-ascend", T.MINDFORMERS, "llama2-7b", "ascend-910b", 64,
         dict(dp=8, tp=8, pp=1, micro_batch=1, sequence_parallel=True, recompute="selective",
              zero_stage=1)),
]
