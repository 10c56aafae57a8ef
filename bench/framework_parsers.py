"""Run each framework's own parser on what the planner emits (issue 27, item 2).

The unit tests check the emitted keys statically (flag lists read from git mirrors). This dev
script runs the frameworks' own code on the files instead, in a side virtual environment that
has the frameworks (never the repo's tests: they must not import torch):

  * Megatron-LM (mirror @d98e8a64): the words the script passes to pretrain_gpt.py (expanded by
    the planner's own bash reader) go through pretrain_gpt.py's start-up as it runs it:
    arguments.parse_and_validate_args (argparse, allow_abbrev=False, no unknown arguments,
    then validate_args with WORLD_SIZE from the script's torchrun line), then
    gpt_config_from_args (TransformerConfig.__post_init__) and
    pretrain_cfg_container_from_args (the DDP and optimizer configs).
  * DeepSpeed (0.19.8 from PyPI, and any release given with --deepspeed-site):
    deepspeed.runtime.config.DeepSpeedConfig on the ds_config, the data-parallel size given by
    a model-parallel unit (mpu) as Megatron-DeepSpeed passes it, and AutoEP's
    parse_autoep_config / validate_autoep_config on expert_parallel; every top-level key must
    be one the installed package names (DeepSpeed drops unknown keys without a word).
  * torchrun: torch.distributed.run.get_args_parser() on the launcher's options (torchrun.sh,
    and the launch line of every Megatron-LM script).
  * torchtitan: the 0.2.x TOML through ConfigManager.parse_args at the v0.2.2 release (the
    TOML emitter's target) and the stage count of its pipeline_llm; the recipe by importing it
    against the mirror @b5bcd76c and calling its function, then _get_pipeline_metadata (the
    stage count and its checks); ParallelDims (both versions) on the degrees.
  * MindSpore / MindFormers (a Python 3.11 environment, --mindspore-python): the parallel
    module run on the CPU backend (set_auto_parallel_context, TransformerOpParallelConfig);
    the run YAML through MindFormerConfig, the context validators, build_parallel_config and
    the parallel rules of tools/check_rules.py.

Then every setting of the plan is looked up in what the framework parsed (the args namespace,
TransformerConfig, DeepSpeedConfig, JobConfig, Trainer.Config, the auto-parallel context), and
a table is printed: target, case, framework version, accepted, settings checked, mismatches.
The exit status is 1 on any rejection or mismatch (but a documented one: `_expected_rejection`).

Stubs, each for what a CPU-only machine cannot run, and nothing else:
  * Megatron-LM (`_megatron_stubs`): Transformer Engine's version
    (megatron.core.utils._te_version, the TransformerEngine mirror's), its fused RoPE kernel
    rope_utils.fused_apply_rotary_pos_emb (only tested for None; raises if called), and the
    GPU's compute capability (arguments.get_device_arch_version and
    torch.cuda.get_device_capability: the planned GPU's).
  * DeepSpeed: deepspeed.comm.torch.build_shm_op (the CPU accelerator's shared-memory
    all-reduce, a C++ build at start-up that parsing a config never calls).
  * MindSpore: device_target "Ascend" run as "CPU"; MindFormers' get_device_num and
    get_server_num (the plan's: there is no cluster to ask).

Usage (side environments as README "Frameworks' own parsers" sets them up):

  .venv/bin/python bench/framework_parsers.py --python /work/venv-fw312/bin/python \
      --mindspore-python /work/venv-ms/bin/python --deepspeed-site /work/ds-0.19.6 \
      --mirrors /work/.mirror [--only megatron] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MEGATRON_COMMIT = "d98e8a64"
TORCHTITAN_RECIPE_COMMIT = "b5bcd76c"
TORCHTITAN_TOML_RELEASE = "v0.2.2"
MIRRORS = {"megatron": "NVIDIA+Megatron-LM", "torchtitan": "pytorch+torchtitan",
           "te": "NVIDIA+TransformerEngine"}


# --------------------------------------------------------------------------------------------
# The driver (the planner's environment): plans, emitted files, expectations
# --------------------------------------------------------------------------------------------

def _cases():
    """(target, case name, model, cluster, gpus, strategy, precision, fp8 recipe)."""
    from planner.schemas.strategy import LaunchTarget as T

    full = dict(recompute="full")
    return [
        # Megatron-LM
        (T.MEGATRON, "dense", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, micro_batch=1, recompute="selective", zero_stage=1), None, None),
        (T.MEGATRON, "pp-vpp", "gpt3-175b", "dgx-a100-80gb", 1024,
         dict(dp=16, tp=8, pp=8, vpp=3, sequence_parallel=True, recompute="selective",
              zero_stage=1), None, None),
        (T.MEGATRON, "uneven-first-last", "llama3-405b", "dgx-h100", 1024,
         dict(dp=8, tp=8, pp=16, sequence_parallel=True, zero_stage=1,
              layers_per_stage=(7,) + (8,) * 14 + (7,), **full), None, None),
        (T.MEGATRON, "layout-string", "llama3-8b", "dgx-h100", 32,
         dict(dp=8, pp=4, vpp=2, zero_stage=1, layers_per_stage=(4, 4, 4, 3, 4, 5, 5, 3),
              **full), None, None),
        (T.MEGATRON, "cp-a2a+p2p", "llama3-8b", "dgx-h100", 64,
         dict(dp=2, tp=2, cp=16, cp_comm="a2a+p2p", cp_a2a=4, sequence_parallel=True,
              recompute="selective", zero_stage=1), None, None),
        (T.MEGATRON, "cp-p2p", "llama3-70b", "dgx-h100", 64,
         dict(dp=4, tp=8, cp=2, sequence_parallel=True, zero_stage=1, **full), None, None),
        (T.MEGATRON, "moe-deepseek-v3", "deepseek-v3", "dgx-h100", 1024,
         dict(dp=128, tp=8, ep=128, etp=1, sequence_parallel=True, zero_stage=1, **full),
         None, None),
        (T.MEGATRON, "moe-recompute-modules", "deepseek-v3", "dgx-h100", 1024,
         dict(dp=128, tp=8, ep=128, etp=1, sequence_parallel=True, recompute="selective",
              recompute_modules=("mla_up_proj", "mlp"), zero_stage=1), None, None),
        (T.MEGATRON, "moe-qwen3-a2a-overlap", "qwen3-30b-a3b", "dgx-h100", 16,
         dict(dp=16, ep=16, etp=1, zero_stage=1, moe_a2a_overlap=True), None, None),
        (T.MEGATRON, "moe-gpt-oss", "gpt-oss-120b", "dgx-h100", 64,
         dict(dp=64, ep=64, etp=1, zero_stage=1, **full), None, None),
        (T.MEGATRON, "moe-mixtral-flex", "mixtral-8x7b", "dgx-h100", 64,
         dict(dp=32, tp=2, ep=8, sequence_parallel=True, zero_stage=1,
              moe_dispatcher="flex-deepep", **full), None, None),
        (T.MEGATRON, "fp8-tensorwise", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=1, fp8_param_gather=True, **full), "fp8", None),
        (T.MEGATRON, "fp8-delayed", "llama3-8b", "dgx-h100", 16,
         dict(dp=4, tp=4, sequence_parallel=True, zero_stage=0, fp8_param_gather=False,
              **full), "fp8", "delayed"),
        (T.MEGATRON, "mxfp8", "llama3-8b", "dgx-b200", 8,
         dict(dp=4, tp=2, sequence_parallel=True, recompute="selective", zero_stage=1,
              fp8_param_gather=True), "mxfp8", None),
        (T.MEGATRON, "nvfp4-pp-vpp", "llama3-70b", "gb200-nvl72", 64,
         dict(dp=8, tp=2, pp=4, vpp=5, sequence_parallel=True, zero_stage=1,
              fp8_param_gather=True), "nvfp4", None),
        (T.MEGATRON, "optimizer-offload", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=1, optimizer_offload=0.5, **full), None, None),
        (T.MEGATRON, "activation-offload", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=1, activation_offload_layers=4), None, None),
        (T.MEGATRON, "fsdp-zero3", "llama3-70b", "dgx-h100", 64,
         dict(dp=16, tp=4, sequence_parallel=True, zero_stage=3, **full), None, None),
        (T.MEGATRON, "hsdp", "llama3-8b", "dgx-h100", 64,
         dict(dp=64, zero_stage=3, dp_shard=8, **full), None, None),
        (T.MEGATRON, "cp-tp1", "llama3-8b", "dgx-h100", 8,
         dict(dp=4, cp=2, zero_stage=1, **full), None, None),
        (T.MEGATRON, "cuda-graphs-layer", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=1, cuda_graphs="layer", recompute="selective"), None, None),
        (T.MEGATRON, "cuda-graphs-full-iteration", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=1, cuda_graphs="full_iteration", **full), None, None),
        # DeepSpeed
        (T.DEEPSPEED, "zero3", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=3, **full), None, None),
        (T.DEEPSPEED, "zero3-offload", "llama3-70b", "dgx-h100", 8,
         dict(dp=8, zero_stage=3, optimizer_offload=1.0, param_offload=True, **full),
         None, None),
        (T.DEEPSPEED, "zero2-optimizer-offload", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=2, optimizer_offload=1.0, **full), None, None),
        (T.DEEPSPEED, "zero3-partial-offload", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=3, optimizer_offload=0.5, **full), None, None),
        (T.DEEPSPEED, "pipeline-fp16", "gpt3-175b", "dgx-a100-80gb", 1024,
         dict(dp=16, tp=8, pp=8, zero_stage=1, **full), "fp16", None),
        (T.DEEPSPEED, "ulysses-cp", "llama3-8b", "dgx-h100", 16,
         dict(dp=4, cp=4, cp_comm="a2a", zero_stage=1, **full), None, None),
        (T.DEEPSPEED, "moe-autoep", "mixtral-8x7b", "dgx-h100", 64,
         dict(dp=64, ep=8, etp=1, zero_stage=2, **full), None, None),
        (T.DEEPSPEED, "moe-autoep-qwen3", "qwen3-30b-a3b", "dgx-h100", 16,
         dict(dp=16, ep=8, etp=1, zero_stage=1, **full), None, None),
        (T.DEEPSPEED, "mics-hsdp", "llama3-8b", "dgx-h100", 64,
         dict(dp=64, zero_stage=3, dp_shard=8, **full), None, None),
        (T.DEEPSPEED, "activation-cpu-checkpointing", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=1, activation_offload_layers=32, **full), None, None),
        # torchrun
        (T.TORCHRUN, "one-node", "llama3-8b", "dgx-h100", 8, dict(dp=8, zero_stage=3),
         None, None),
        (T.TORCHRUN, "64-nodes", "gpt3-175b", "ascend-910b", 512,
         dict(dp=8, tp=8, pp=8, sequence_parallel=True, zero_stage=1, **full), None, None),
        # torchtitan (the TOML and the recipe of each plan)
        (T.TORCHTITAN, "fsdp", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, recompute="selective", zero_stage=3), None, None),
        (T.TORCHTITAN, "3d-pp-vpp", "llama3-70b", "dgx-h100", 64,
         dict(dp=2, tp=8, pp=4, vpp=2, sequence_parallel=True, zero_stage=2, **full),
         None, None),
        (T.TORCHTITAN, "cp", "llama3-8b", "dgx-h100", 16,
         dict(dp=4, tp=2, cp=2, cp_comm="all_gather", sequence_parallel=True,
              recompute="selective", zero_stage=3), None, None),
        (T.TORCHTITAN, "moe-qwen3-ep", "qwen3-30b-a3b", "dgx-h100", 16,
         dict(dp=16, ep=8, etp=1, zero_stage=3, **full), None, None),
        (T.TORCHTITAN, "moe-deepseek-v3-ep", "deepseek-v3", "dgx-h100", 256,
         dict(dp=32, pp=8, ep=32, etp=1, zero_stage=3, **full), None, None),
        (T.TORCHTITAN, "float8", "llama3-8b", "dgx-h100", 8,
         dict(dp=8, zero_stage=3, fp8_param_gather=True, **full), "fp8", "tensorwise"),
        (T.TORCHTITAN, "mxfp8", "llama3-8b", "dgx-b200", 8,
         dict(dp=8, zero_stage=3, **full), "mxfp8", None),
        (T.TORCHTITAN, "cpu-offload", "llama3-70b", "dgx-h100", 8,
         dict(dp=8, zero_stage=3, optimizer_offload=1.0, param_offload=True, **full),
         None, None),
        (T.TORCHTITAN, "hsdp", "llama3-8b", "dgx-h100", 64,
         dict(dp=64, zero_stage=3, dp_shard=8, **full), None, None),
        (T.TORCHTITAN, "ddp", "gpt2-xl", "dgx-a100-80gb", 16,
         dict(dp=16, micro_batch=4, zero_stage=0), None, None),
        # MindSpore (parallel .py) and MindFormers (run YAML)
        *((target, case, model, cluster, gpus, strategy, None, None)
          for target in (T.MINDSPORE, T.MINDFORMERS)
          for case, model, cluster, gpus, strategy in (
              ("pipeline-offset", "llama2-7b", "ascend-910b", 32,
               dict(dp=8, pp=4, zero_stage=1, layers_per_stage=(8, 9, 9, 6), **full)),
              ("tp-sp-selective", "llama2-7b", "ascend-910b", 64,
               dict(dp=8, tp=8, sequence_parallel=True, recompute="selective", zero_stage=1)),
              ("ulysses-cp", "llama3-8b", "dgx-h100", 16,
               dict(dp=4, tp=2, cp=2, cp_comm="a2a", sequence_parallel=True,
                    recompute="selective", zero_stage=1)),
              ("3d-no-zero", "gpt3-175b", "ascend-910b", 512,
               dict(dp=8, tp=8, pp=8, zero_stage=0, **full)))),
    ]


def _plan(target, model, cluster, gpus, strategy, precision, fp8_recipe):
    from planner.costing.evaluate import evaluate_strategy
    from planner.frameworks import LaunchPlan
    from planner.inputs.loader import make_problem
    from planner.schemas.strategy import Strategy

    framework = "megatron" if target.value == "torchrun" else target.framework
    problem = make_problem(model, cluster, gpus=gpus, precision=precision,
                           framework=framework, fp8_recipe=fp8_recipe)
    s = Strategy(global_batch=problem.training.global_batch, **strategy)
    return LaunchPlan(problem, s, evaluate_strategy(problem, s))


def _launch_words(text: str, file: str) -> tuple[list[str], list[str], dict[str, str]]:
    """(torchrun's options, the words after the training script, the script's environment) of
    an emitted launch script, expanded by the planner's bash reader, with MASTER_ADDR set as
    the script asks."""
    from planner.frameworks.shell import ShellScript

    script = ShellScript("MASTER_ADDR=node0\n" + text, file=file)
    environment = {name: value for name, value in script.variables.items()
                   if isinstance(value, str) and name.isupper() and "\x00" not in value}
    for command in script.commands:
        if command.words and command.words[0] == "torchrun":
            words = list(command.words[1:])
            at = next((i for i, w in enumerate(words) if w.endswith(".py") or "\x00" in w),
                      len(words))
            return words[:at], words[at + 1:], environment
    raise SystemExit(f"{file}: no torchrun line")


def _megatron_expect(plan) -> dict:
    """args attributes (and TransformerConfig fields, 'config.'), as the plan means them."""
    from cost_models.enums import CpComm, MoeDispatcher, Precision, Recompute

    s, t, model = plan.strategy, plan.problem.training, plan.problem.model
    want = {
        "tensor_model_parallel_size": s.tp, "pipeline_model_parallel_size": s.pp,
        "virtual_pipeline_model_parallel_size": s.vpp if s.vpp > 1 else None,
        "context_parallel_size": s.cp, "data_parallel_size": s.dp,
        "micro_batch_size": s.micro_batch, "global_batch_size": s.global_batch,
        "seq_length": t.seq_len, "sequence_parallel": s.sequence_parallel and s.tp > 1,
        "use_distributed_optimizer": s.zero_stage >= 1,
        "overlap_grad_reduce": s.overlap_grad_reduce,
        "overlap_param_gather": bool(s.zero_stage >= 1 and s.overlap_grad_reduce
                                     and plan.overlap("overlap_param_gather")),
        "tp_comm_overlap": bool(plan.overlap("tp_comm_overlap") and s.sequence_parallel
                                and s.tp > 1),
        "bf16": t.precision in (Precision.BF16, Precision.FP8),
        "fp16": t.precision is Precision.FP16,
        "recompute_granularity": {Recompute.NONE: None, Recompute.SELECTIVE: "selective",
                                  Recompute.FULL: "full"}[s.recompute],
        "optimizer_cpu_offload": s.optimizer_offload > 0,
        "config.cpu_offloading": s.activation_offload_layers > 0,
        "config.recompute_granularity": {Recompute.NONE: None,
                                         Recompute.SELECTIVE: "selective",
                                         Recompute.FULL: "full"}[s.recompute],
        "config.tensor_model_parallel_size": s.tp,
        "config.context_parallel_size": s.cp,
    }
    if s.zero_stage >= 2:
        want["use_megatron_fsdp"] = True
        want["data_parallel_sharding_strategy"] = {2: "optim_grads",
                                                   3: "optim_grads_params"}[int(s.zero_stage)]
    if s.zero_stage >= 1 and s.dp_shard not in (None, s.dp):
        want["num_distributed_optimizer_instances"] = s.dp // s.dp_shard
    if s.optimizer_offload:
        want["optimizer_offload_fraction"] = s.optimizer_offload
    if s.activation_offload_layers:
        want["config.cpu_offloading_num_layers"] = s.activation_offload_layers
    if s.recompute is Recompute.FULL:
        # every layer: uniform blocks of one layer
        want.update(recompute_method="uniform", recompute_num_layers=1)
    if s.recompute is Recompute.SELECTIVE:
        want["config.recompute_modules"] = [m.value for m in s.recompute_modules] \
            if s.recompute_modules else ["core_attn"]
    if s.cp > 1:
        want["cp_comm_type"] = [s.cp_comm.value]          # nargs='+': a list per layer group
        if s.cp_comm is CpComm.A2A_P2P:
            want["hierarchical_context_parallel_sizes"] = [s.context_a2a,
                                                           s.cp // s.context_a2a]
    if model.is_moe:
        dispatcher = plan.overlap("moe_dispatcher") or MoeDispatcher.ALLTOALL
        want.update(expert_model_parallel_size=s.ep,
                    expert_tensor_parallel_size=s.expert_tp,
                    moe_token_dispatcher_type="alltoall"
                    if dispatcher is MoeDispatcher.ALLTOALL else "flex")
        if dispatcher is not MoeDispatcher.ALLTOALL:
            want["moe_flex_dispatcher_backend"] = dispatcher.value.split("-")[1]
        want["config.expert_model_parallel_size"] = s.ep
        from planner.frameworks.megatron import moe_overlap_allowed
        overlap = bool(plan.overlap("moe_a2a_overlap") and moe_overlap_allowed(s))
        want["overlap_moe_expert_parallel_comm"] = overlap
        want["delay_wgrad_compute"] = overlap
    recipe = t.fp8_recipe.value if t.fp8_recipe else None
    if t.precision is Precision.FP8 and recipe == "nvfp4":
        want.update(fp4="e2m1", fp4_recipe="nvfp4", fp8=None,
                    fp4_param_gather=bool(s.fp8_param_gather))
    elif t.precision is Precision.FP8:
        want.update(fp8="e4m3" if recipe in ("mxfp8",) else "hybrid",
                    fp8_recipe=recipe or "tensorwise", fp4=None,
                    fp8_param_gather=bool(s.fp8_param_gather))
        want["config.fp8"] = want["fp8"]
    else:
        want.update(fp8=None, fp4=None)
    if s.cuda_graphs is not None:
        want["cuda_graph_impl"] = {"layer": "local", "full_iteration": "full_iteration"}[
            s.cuda_graphs.value]
    return want


def _deepspeed_expect(plan) -> dict:
    from cost_models.enums import Precision

    s, t = plan.strategy, plan.problem.training
    want = {
        "train_batch_size": s.global_batch, "train_micro_batch_size_per_gpu": s.micro_batch,
        "gradient_accumulation_steps": s.global_batch // (s.dp * s.micro_batch),
        "zero_optimization_stage": int(s.zero_stage), "zero_enabled": s.zero_stage > 0,
        "bfloat16_config.enabled": t.precision in (Precision.BF16, Precision.FP8),
        "float16_config.enabled": t.precision is Precision.FP16,
        "zero_config.offload_optimizer.device": "cpu" if s.optimizer_offload else None,
        "zero_config.offload_param.device": "cpu" if s.param_offload else None,
        "zero_config.overlap_comm": s.overlap_grad_reduce,
        "activation_checkpointing_config.cpu_checkpointing": bool(s.activation_offload_layers),
    }
    if 0 < s.optimizer_offload < 1:
        want["zero_config.offload_optimizer.ratio"] = s.optimizer_offload
    if s.dp_shard not in (None, s.dp):
        want["zero_config.mics_shard_size"] = s.dp_shard
    if s.pp > 1:
        want["pipeline.stages"] = s.pp
    if s.tp > 1:
        want["tensor_parallel_config.autotp_size"] = s.tp
    if s.cp > 1:
        want["_param_dict.sequence_parallel_size"] = s.cp
    if s.ep > 1:
        want.update({"expert_parallel_config.enabled": True,
                     "expert_parallel_config.autoep_size": s.ep})
    return want


def _torchrun_expect(plan) -> dict:
    gpus_per_node = plan.problem.cluster.gpus_per_node
    return {"nnodes": str(plan.problem.num_gpus // gpus_per_node),
            "nproc_per_node": str(gpus_per_node), "rdzv_backend": "c10d"}


def _torchtitan_expect(plan, *, recipe: bool) -> dict:
    from cost_models.enums import Fp8Recipe, Precision, Recompute

    s, t = plan.strategy, plan.problem.training
    sharded = s.zero_stage >= 2
    p = "parallelism."
    want = {
        p + "data_parallel_replicate_degree": s.dp // (s.dp_shard or s.dp) if sharded else s.dp,
        p + "data_parallel_shard_degree": (s.dp_shard or s.dp) if sharded else 1,
        p + "tensor_parallel_degree": s.tp, p + "pipeline_parallel_degree": s.pp,
        p + "context_parallel_degree": s.cp, p + "expert_parallel_degree": s.ep,
        "world_size": plan.problem.num_gpus,
        "training.enable_cpu_offload": bool(s.optimizer_offload or s.param_offload),
    }
    if s.tp > 1:
        want[p + "enable_sequence_parallel" if recipe else p + "disable_loss_parallel"] = (
            s.sequence_parallel if recipe else False)
    if recipe:
        want.update({"training.num_tokens_per_microbatch_per_dp_rank":
                     s.micro_batch * t.seq_len,
                     "training.num_tokens_per_train_step": s.global_batch * t.seq_len,
                     "activation_checkpoint": {Recompute.NONE: None,
                                               Recompute.SELECTIVE: "SelectiveAC",
                                               Recompute.FULL: "FullAC"}[s.recompute]})
    else:
        # 0.2.x: with a pipeline a step feeds local_batch_size samples in micro-batches of
        # pipeline_parallel_microbatch_size; without one local_batch_size is the micro-batch
        # (torchtitan accumulates gradients up to global_batch_size).
        if s.pp > 1:
            want[p + "pipeline_parallel_microbatch_size"] = s.micro_batch
        want.update({"training.local_batch_size": (s.global_batch // s.dp if s.pp > 1
                                                   else s.micro_batch),
                     "training.global_batch_size": s.global_batch,
                     "training.seq_len": t.seq_len,
                     "activation_checkpoint.mode": s.recompute.value})
    if s.pp > 1:
        want["pipeline_stages"] = s.pp * s.vpp
    if t.precision is Precision.FP8 and not recipe:
        mx = t.fp8_recipe is Fp8Recipe.MXFP8
        want["model.converters"] = ["quantize.linear.mx" if mx else "quantize.linear.float8"]
        if mx:
            want["quantize.linear.mx.recipe_name"] = "mxfp8_cublas"
        else:
            want["quantize.linear.float8.recipe_name"] = (t.fp8_recipe.value if t.fp8_recipe
                                                         else "tensorwise")
            want["quantize.linear.float8.enable_fsdp_float8_all_gather"] = bool(
                s.fp8_param_gather and s.zero_stage >= 1)
    return want


def _mindspore_expect(plan, *, yaml: bool) -> dict:
    """MindSpore's auto-parallel context and MindFormers' TransformerOpParallelConfig, as the
    plan means them."""
    from cost_models.enums import Recompute

    s = plan.strategy
    want = {"context.device_num": plan.problem.num_gpus,
            "context.parallel_mode": "semi_auto_parallel",
            "context.enable_parallel_optimizer": s.zero_stage >= 1,
            "parallel_config.data_parallel": s.dp, "parallel_config.model_parallel": s.tp,
            "parallel_config.pipeline_stage": s.pp,
            "parallel_config.use_seq_parallel": s.sequence_parallel and s.tp > 1,
            "parallel_config.recompute.recompute": s.recompute is Recompute.FULL,
            "parallel_config.recompute.select_recompute": s.recompute is Recompute.SELECTIVE}
    if not yaml:
        want["context.pipeline_stages"] = s.pp
    if s.pp > 1:
        want["parallel_config.micro_batch_num"] = plan.num_micro_batches
    if s.cp > 1:
        want["parallel_config.context_parallel"] = s.cp
        want["parallel_config.context_parallel_algo"] = (
            "ulysses_cp" if s.cp_comm.value == "a2a" else "colossalai_cp")
    return want


def _jobs(out: Path, only: set[str] | None, deepspeed_sites: list[str | None]):
    """Emit every case; yield (target, case, check kind, file, expectations, extra)."""
    from planner.frameworks import EMITTERS
    from planner.errors import InputError

    for target, case, model, cluster, gpus, strategy, precision, recipe in _cases():
        if only and target.value not in only:
            continue
        try:
            plan = _plan(target, model, cluster, gpus, strategy, precision, recipe)
            files = EMITTERS[target].emit(plan)
        except InputError as e:
            yield target.value, case, "emit", None, {}, {"error": str(e)}
            continue
        for name, text in files.items():
            path = out / f"{target.value}-{case}-{name}"
            path.write_text(text, encoding="utf-8")
            if name.endswith(".sh") and target.value == "megatron":
                launcher, argv, environment = _launch_words(text, str(path))
                yield target.value, case, "megatron", path, _megatron_expect(plan), {
                    "argv": argv, "environment": environment,
                    "world_size": plan.problem.num_gpus,
                    "gpu_arch": _gpu_arch(plan)}
                yield "torchrun", f"{case} (megatron)", "torchrun", path, \
                    _torchrun_expect(plan), {"argv": launcher}
            elif name.endswith(".sh") and target.value == "torchrun":
                launcher, _, _ = _launch_words(text, str(path))
                yield "torchrun", case, "torchrun", path, _torchrun_expect(plan), {
                    "argv": launcher}
            elif name.endswith(".json"):
                for site in deepspeed_sites:
                    yield target.value, case, "deepspeed", path, _deepspeed_expect(plan), {
                        "dp": plan.strategy.dp, "tp": plan.strategy.tp,
                        "pp": plan.strategy.pp, "cp": plan.strategy.cp,
                        "world_size": plan.problem.num_gpus, "site": site}
            elif name.endswith(".toml"):
                yield "torchtitan-toml", case, "torchtitan_toml", path, \
                    _torchtitan_expect(plan, recipe=False), {
                        "num_layers": plan.problem.model.num_layers}
            elif name.endswith((".yaml", "mindspore_parallel.py")):
                kind = "mindformers" if name.endswith(".yaml") else "mindspore"
                yield kind, case, kind, path, _mindspore_expect(plan, yaml=kind == "mindformers"), {
                    "world_size": plan.problem.num_gpus, "python": "mindspore"}
            elif name.endswith("_recipe.py"):
                want = _torchtitan_expect(plan, recipe=True)
                placeholder = "def base_config():" in text
                if placeholder and plan.strategy.pp > 1:
                    want.pop("pipeline_stages")      # the stand-in model has its own layers
                yield "torchtitan-recipe", case + (" (llama3 base)" if placeholder else ""), \
                    "torchtitan_recipe", path, want, {"placeholder_base": placeholder}


def _gpu_arch(plan) -> int:
    """The compute capability major of the planned GPU (Hopper 9, Blackwell 10)."""
    name = plan.problem.cluster.gpu.name.upper()
    return 10 if name.startswith(("B", "GB")) else 8 if name.startswith("A") else 9


def _sources(mirrors: Path, cache: Path) -> dict[str, Path]:
    """Source trees of the pinned commits, copied file by file out of the git mirrors (a
    mirror may lack objects of files nothing imports: those are skipped)."""
    wanted = {"megatron": (MIRRORS["megatron"], MEGATRON_COMMIT, ["megatron"]),
              "torchtitan_recipe": (MIRRORS["torchtitan"], TORCHTITAN_RECIPE_COMMIT,
                                    ["torchtitan"]),
              "torchtitan_toml": (MIRRORS["torchtitan"], TORCHTITAN_TOML_RELEASE,
                                  ["torchtitan"])}
    found = {}
    for key, (mirror, commit, paths) in wanted.items():
        git_dir = mirrors / mirror / "repo"
        dest = cache / f"{key}-{commit}"
        if not (dest / ".complete").exists():
            names = subprocess.run(["git", "-C", str(git_dir), "ls-tree", "-r", "--name-only",
                                    commit, "--", *paths], check=True, capture_output=True,
                                   text=True).stdout.split("\n")
            for name in filter(None, names):
                shown = subprocess.run(["git", "-C", str(git_dir), "show", f"{commit}:{name}"],
                                       capture_output=True)
                if shown.returncode == 0:
                    (dest / name).parent.mkdir(parents=True, exist_ok=True)
                    (dest / name).write_bytes(shown.stdout)
            (dest / ".complete").write_text(commit)
        found[key] = dest
    te = subprocess.run(["git", "-C", str(mirrors / MIRRORS["te"] / "repo"), "show",
                         "HEAD:build_tools/VERSION.txt"], capture_output=True, text=True)
    found["te_version"] = te.stdout.strip() or "2.10.0"
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=os.environ.get("FRAMEWORK_PYTHON"),
                        required="FRAMEWORK_PYTHON" not in os.environ,
                        help="the side environment's python (env FRAMEWORK_PYTHON)")
    parser.add_argument("--mirrors", type=Path,
                        default=Path(os.environ.get("FRAMEWORK_MIRRORS", "/work/.mirror")),
                        help="folder of the git mirrors (env FRAMEWORK_MIRRORS)")
    parser.add_argument("--cache", type=Path,
                        default=Path(tempfile.gettempdir()) / "planner-framework-sources")
    parser.add_argument("--only", action="append", help="targets to run (megatron, ...)")
    parser.add_argument("--keep", type=Path, help="keep the emitted files in this folder")
    parser.add_argument("--mindspore-python", default=os.environ.get("MINDSPORE_PYTHON"),
                        help="a python with mindspore and mindformers (their wheels need "
                             "Python <= 3.11; env MINDSPORE_PYTHON)")
    parser.add_argument("--deepspeed-site", action="append", type=Path,
                        help="also check the ds_configs with the DeepSpeed in this folder "
                             "(pip install --no-deps --target DIR deepspeed==0.19.6)")
    options = parser.parse_args()
    sources = _sources(options.mirrors, options.cache)
    out = options.keep or Path(tempfile.mkdtemp(prefix="framework-parsers-"))
    out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], 0
    sites = [None, *(str(site) for site in options.deepspeed_site or ())]
    for target, case, kind, path, want, extra in _jobs(out, set(options.only or ()), sites):
        if kind == "emit":
            rows.append((target, case, "-", "no", 0, f"the emitter refused: {extra['error']}"))
            failed += 1
            continue
        job = {"kind": kind, "file": str(path), "want": want, **extra,
               "source": str(sources.get(kind, "")), "te_version": sources["te_version"]}
        python = options.mindspore_python if extra.get("python") == "mindspore" \
            else options.python
        if python is None:
            rows.append((target, case, "-", "-", 0, "not run: no --mindspore-python"))
            continue
        run = subprocess.run([python, __file__, "--check", json.dumps(job)],
                             capture_output=True, text=True, cwd=tempfile.gettempdir())
        result = next((json.loads(line[len("RESULT "):]) for line in run.stdout.splitlines()
                       if line.startswith("RESULT ")), None)
        if result is None:
            tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
            result = {"version": "?", "accepted": False, "checked": 0,
                      "mismatches": [" | ".join(tail)]}
        expected = _expected_rejection(case, result)
        bad = (not result["accepted"] or result["mismatches"]) and expected is None
        failed += bool(bad)
        accepted = "yes" if result["accepted"] else f"no ({expected})" if expected else "no"
        rows.append((target, case, result["version"], accepted, result["checked"],
                     "; ".join(result["mismatches"]) or "-"))
    widths = [max(len(str(r[i])) for r in rows + [_HEADER]) for i in range(5)]
    for row in [_HEADER] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + str(row[5]))
    print(f"\n{len(rows)} checks, {failed} rejected or with mismatches; files in {out}")
    return 1 if failed else 0


_HEADER = ("target", "case", "framework", "accepted", "checked", "mismatches")


def _expected_rejection(case: str, result: dict) -> str | None:
    """Why a rejection is the framework's own choice, said in the emitted file: DeepSpeed
    0.19.7 removed MiCS (issue 8489), which the HSDP config's _comment says (it runs on
    0.19.6, checked with --deepspeed-site)."""
    version = result["version"].removeprefix("DeepSpeed ")
    if (case == "mics-hsdp" and not result["accepted"] and version[:1].isdigit()
            and tuple(int(x) for x in version.split(".")[:3]) >= (0, 19, 7)
            and "MiCS ZeRO-3 sharding has been removed" in " ".join(result["mismatches"])):
        return "expected: MiCS removed in 0.19.7, as the file says"
    return None


# --------------------------------------------------------------------------------------------
# The checks (the side environment): no planner import from here on
# --------------------------------------------------------------------------------------------

def _lookup(root, dotted: str):
    value = root
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part)
    return value


def _compare(roots: dict, want: dict) -> tuple[int, list[str]]:
    """(settings checked, mismatches): each wanted 'root.path' (or bare path: the first root)
    against what the framework parsed."""
    mismatches = []
    first = next(iter(roots))
    for key, expected in want.items():
        head, _, rest = key.partition(".")
        root, path = (roots[head], rest) if head in roots and rest else (roots[first], key)
        try:
            got = _lookup(root, path)
        except (AttributeError, KeyError) as e:
            mismatches.append(f"{key}: not read ({e})")
            continue
        if hasattr(got, "value") and not isinstance(got, (int, float, str)):
            got = got.value                  # an enum member
        if isinstance(got, tuple):
            got = list(got)
        if got != expected and not (isinstance(got, float) and isinstance(expected, float)
                                    and abs(got - expected) < 1e-9):
            mismatches.append(f"{key}: {got!r}, planned {expected!r}")
    return len(want), mismatches


def _megatron_stubs(job) -> list[str]:
    """Stub what a CPU-only machine cannot import: Transformer Engine (its version only) and
    the GPU's architecture. Returns what was stubbed."""
    import megatron.core.utils as core_utils
    from packaging.version import Version

    core_utils._te_version = Version(job["te_version"])
    from megatron.core.models.common.embeddings import rope_utils

    def te_kernel(*_, **__):
        raise RuntimeError("a Transformer Engine kernel: not on this machine")

    rope_utils.fused_apply_rotary_pos_emb = te_kernel
    import megatron.training.arguments as arguments

    arguments.get_device_arch_version = lambda: job["gpu_arch"]
    import torch

    torch.cuda.get_device_capability = lambda device=None: (job["gpu_arch"], 0)
    return ["te_version", "fused_apply_rotary_pos_emb", "get_device_arch_version",
            "torch.cuda.get_device_capability"]


def check_megatron(job) -> dict:
    import contextlib
    import io

    sys.path.insert(0, job["source"])
    os.environ.update(job["environment"])       # what the script exports (CUDA_DEVICE_MAX_...)
    os.environ.update(WORLD_SIZE=str(job["world_size"]), RANK="0", LOCAL_RANK="0")
    _megatron_stubs(job)
    from megatron.core.package_info import __version__
    from megatron.training.argument_utils import (gpt_config_from_args,
                                                  pretrain_cfg_container_from_args)
    from megatron.training.arguments import parse_and_validate_args

    version = f"Megatron-Core {__version__} @{MEGATRON_COMMIT}"
    sys.argv = ["pretrain_gpt.py", *job["argv"]]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = parse_and_validate_args(args_defaults={"tokenizer_type": "GPT2BPETokenizer"})
            model = gpt_config_from_args(args)
            pretrain_cfg_container_from_args(args, model)
    except SystemExit:
        return {"version": version, "accepted": False, "checked": 0,
                "mismatches": [err.getvalue().strip().splitlines()[-1]]}
    except Exception as e:                      # validate_args asserts, __post_init__ raises
        return {"version": version, "accepted": False, "checked": 0,
                "mismatches": [f"{type(e).__name__}: {e}"]}
    checked, mismatches = _compare({"args": args, "config": model.transformer}, job["want"])
    return {"version": version, "accepted": True, "checked": checked, "mismatches": mismatches}


class _ModelParallelUnit:
    """What DeepSpeedConfig asks of an mpu: the data-parallel size (Megatron-DeepSpeed's
    mpu has get_data_parallel_world_size)."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def check_deepspeed(job) -> dict:
    import contextlib
    import io

    if job["site"]:
        sys.path.insert(0, job["site"])          # another DeepSpeed release, --target installed
    # One process, world size 1, over a file store (no network): DeepSpeedConfig only asks
    # deepspeed.comm for its rank; the data-parallel size comes from the mpu.
    import torch.distributed

    store = Path(tempfile.mkdtemp()) / "store"
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", world_size=1,
                                         rank=0)
    os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import deepspeed
        from deepspeed.module_inject import auto_ep_config
        from deepspeed.runtime.config import DeepSpeedConfig

        # Stub: the CPU accelerator JIT-compiles a shared-memory all-reduce op (a C++ build)
        # when deepspeed.comm starts; parsing a config never calls it.
        sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
        deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    version = f"DeepSpeed {deepspeed.__version__}"
    text = Path(job["file"]).read_text()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            config = DeepSpeedConfig(job["file"], mpu=_ModelParallelUnit(job["dp"]))
            raw = json.loads(text)
            if "expert_parallel" in raw:
                ep = auto_ep_config.parse_autoep_config(raw["expert_parallel"])
                auto_ep_config.validate_autoep_config(
                    ep, world_size=job["world_size"], pp_size=job["pp"], tp_size=job["tp"],
                    sp_size=job["cp"], zero_stage=config.zero_optimization_stage,
                    zero_offload_optimizer=config.zero_config.offload_optimizer is not None,
                    zero_offload_param=config.zero_config.offload_param is not None)
    except Exception as e:
        return {"version": version, "accepted": False, "checked": 0,
                "mismatches": [f"{type(e).__name__}: {e}"]}
    want = dict(job["want"])
    roots = {"config": config}
    mismatches = []
    # Keys that DeepSpeed does not read are dropped without a word: every top-level key of the
    # file must be one the installed package names somewhere.
    package = Path(deepspeed.__file__).parent
    names = "".join(p.read_text(errors="ignore") for p in package.rglob("*.py"))
    for key in raw:
        if key != "_comment" and f'"{key}"' not in names and f"'{key}'" not in names:
            mismatches.append(f"{key}: a key DeepSpeed never reads")
    if "expert_parallel_config.enabled" in want:
        got = ep.enabled, ep.autoep_size
        want_ep = (want.pop("expert_parallel_config.enabled"),
                   want.pop("expert_parallel_config.autoep_size"))
        if got != want_ep:
            mismatches.append(f"expert_parallel (enabled, autoep_size): {got}, planned {want_ep}")
    checked, more = _compare(roots, {k: v for k, v in want.items()
                                     if not k.startswith("zero_config.offload")})
    for device in ("offload_optimizer", "offload_param"):
        key = f"zero_config.{device}.device"
        if key in want:
            block = getattr(config.zero_config, device)
            got = None if block is None else getattr(block.device, "value", block.device)
            checked += 1
            if got != want[key]:
                mismatches.append(f"{key}: {got!r}, planned {want[key]!r}")
    if "zero_config.offload_optimizer.ratio" in want:
        checked += 1
        got = config.zero_config.offload_optimizer.ratio
        if abs(got - want["zero_config.offload_optimizer.ratio"]) > 1e-9:
            mismatches.append(f"offload_optimizer.ratio: {got}, planned "
                              f"{want['zero_config.offload_optimizer.ratio']}")
    return {"version": version, "accepted": True, "checked": checked + 2,
            "mismatches": mismatches + more}


def check_torchrun(job) -> dict:
    import torch
    from torch.distributed.run import get_args_parser

    version = f"torch {torch.__version__}"
    try:
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            args = get_args_parser().parse_args([*job["argv"], "train.py"])
    except SystemExit:
        return {"version": version, "accepted": False, "checked": 0,
                "mismatches": [err.getvalue().strip().splitlines()[-1]]}
    checked, mismatches = _compare({"args": args}, job["want"])
    return {"version": version, "accepted": True, "checked": checked, "mismatches": mismatches}


def _parallel_dims(parallelism, world_size: int):
    from torchtitan.distributed import ParallelDims

    fields = dict(dp_shard=parallelism.data_parallel_shard_degree,
                  dp_replicate=parallelism.data_parallel_replicate_degree,
                  cp=parallelism.context_parallel_degree, tp=parallelism.tensor_parallel_degree,
                  pp=parallelism.pipeline_parallel_degree,
                  ep=parallelism.expert_parallel_degree,
                  etp=getattr(parallelism, "expert_tensor_parallel_degree", 1),
                  world_size=world_size)
    import inspect

    accepted = inspect.signature(ParallelDims).parameters
    return ParallelDims(**{k: v for k, v in fields.items() if k in accepted})


def _toml_stages(parallelism, num_layers: int) -> int | str:
    """The virtual stages torchtitan 0.2.x's pipeline_llm builds (distributed/
    pipeline_parallel.py @v0.2.2, the model-free part of it, line for line), or why it stops:
    the parts named module by module, else ceil((layers + first_less + last_less) /
    layers_per_stage), which pp must divide, one per rank for a single-stage schedule and at
    least two for a looped one; without either, 1 or 2 stages per rank."""
    import math

    from torch.distributed.pipelining.schedules import (PipelineScheduleSingle,
                                                        get_schedule_class)

    pp = parallelism.pipeline_parallel_degree
    single = issubclass(get_schedule_class(parallelism.pipeline_parallel_schedule),
                        PipelineScheduleSingle)
    per = parallelism.pipeline_parallel_layers_per_stage
    if per is None:
        stages = pp * (1 if single else 2)
    else:
        stages = math.ceil((num_layers + parallelism.pipeline_parallel_first_stage_less_layers
                            + parallelism.pipeline_parallel_last_stage_less_layers) / per)
        if stages % pp:
            return f"stops: virtual stages ({stages}) not divisible by pp ({pp})"
        if (stages // pp != 1) if single else (stages // pp < 2):
            return f"stops: {stages // pp} stages per rank for this schedule"
    if parallelism.module_fqns_per_model_part:       # named parts win over the count
        return len(parallelism.module_fqns_per_model_part)
    return stages


def check_torchtitan_toml(job) -> dict:
    import contextlib
    import io

    sys.path.insert(0, job["source"])
    from torchtitan.config import ConfigManager

    version = f"torchtitan {TORCHTITAN_TOML_RELEASE}"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            config = ConfigManager().parse_args(["--job.config_file", job["file"]])
            want = dict(job["want"])
            world = want.pop("world_size")
            _parallel_dims(config.parallelism, world)
    except (SystemExit, Exception) as e:
        lines = err.getvalue().strip().splitlines()
        return {"version": version, "accepted": False, "checked": 0,
                "mismatches": [lines[-1] if lines else f"{type(e).__name__}: {e}"]}
    planned_stages = want.pop("pipeline_stages", None)
    checked, mismatches = _compare({"config": config}, want)
    if planned_stages is not None:
        checked += 1
        stages = _toml_stages(config.parallelism, job["num_layers"])
        if stages != planned_stages:
            mismatches.append(f"pipeline stages: {stages}, planned {planned_stages}")
    return {"version": version, "accepted": True, "checked": checked + 1,
            "mismatches": mismatches}


def check_torchtitan_recipe(job) -> dict:
    import contextlib
    import importlib.util
    import io

    sys.path.insert(0, job["source"])
    version = f"torchtitan @{TORCHTITAN_RECIPE_COMMIT}"
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            spec = importlib.util.spec_from_file_location("planner_recipe", job["file"])
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            if job["placeholder_base"]:
                # torchtitan ships no recipe for this model: the emitted module asks the user
                # for one (base_config raises). The plan's settings go over llama3's
                # debug-model recipe instead, to check they are read.
                from torchtitan.models.llama3.config_registry import llama3_debugmodel

                module.base_config = llama3_debugmodel
            config = module.planner_plan()
            want = dict(job["want"])
            world = want.pop("world_size")
            dims = _parallel_dims(config.parallelism, world)
            stages = None
            if config.parallelism.pipeline_parallel_degree > 1:
                # torchtitan's own count (and checks) of the virtual stages pipeline_llm builds
                from torchtitan.distributed.pipeline_parallel import _get_pipeline_metadata

                stages, layers, _, _ = _get_pipeline_metadata(dims, config.parallelism,
                                                              config.model_spec.model)
    except Exception as e:
        return {"version": version, "accepted": False, "checked": 0,
                "mismatches": [f"{type(e).__name__}: {e}"]}
    policy = want.pop("activation_checkpoint")
    got = config.activation_checkpoint
    name = None if got is None else type(got).__qualname__.split(".")[0]
    mismatches = [] if name == policy else [f"activation_checkpoint: {name}, planned {policy}"]
    planned_stages = want.pop("pipeline_stages", None)
    checked, more = _compare({"config": config}, want)
    if planned_stages is not None:
        checked += 1
        if stages != planned_stages:
            mismatches.append(f"pipeline stages: {stages} of {layers} layers, planned "
                              f"{planned_stages}")
    return {"version": version, "accepted": True, "checked": checked + 2,
            "mismatches": mismatches + more}


def _quiet_mindspore():
    os.environ.setdefault("GLOG_v", "3")           # MindSpore's C++ log: errors only


def check_mindspore(job) -> dict:
    """Run the emitted module as MindSpore runs it, on the CPU backend."""
    import contextlib
    import io

    _quiet_mindspore()
    text = Path(job["file"]).read_text()
    # Stub: the Ascend backend does not load here; the parallel context is the same on CPU.
    text = text.replace('device_target="Ascend"', 'device_target="CPU"')
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import mindspore as ms

            scope: dict = {"__name__": "planner_parallel"}
            exec(compile(text, job["file"], "exec"), scope)
    except Exception as e:
        return {"version": "MindSpore ?", "accepted": False, "checked": 0,
                "mismatches": [f"{type(e).__name__}: {e}"]}
    import mindformers

    version = f"MindSpore {ms.__version__}, MindFormers {mindformers.__version__}"
    context = {name: ms.get_auto_parallel_context(name) for name in (
        "device_num", "pipeline_stages", "parallel_mode", "enable_parallel_optimizer")}
    checked, mismatches = _compare({"context": context,
                                    "parallel_config": scope["parallel_config"]}, job["want"])
    return {"version": version, "accepted": True, "checked": checked, "mismatches": mismatches}


def check_mindformers(job) -> dict:
    """The run YAML as MindFormers' trainer reads it: MindFormerConfig, the context validators,
    build_parallel_config (TransformerOpParallelConfig from parallel_config), then the rules of
    tools/check_rules.py that concern parallelism (_check_full_batch, _check_parallel,
    _check_recompute; _check_mode reads the dataset and metric keys of the model's own YAML,
    which this file is merged into). The device count is the plan's: there is no cluster to ask
    (get_device_num, get_server_num stubbed)."""
    import contextlib
    import io

    _quiet_mindspore()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import mindformers
            import mindspore as ms
            from mindformers.core.context.validators import (validate_mf_ctx_run_mode,
                                                             validate_parallel_mode)
            from mindformers.core.parallel_config import build_parallel_config
            from mindformers.tools import check_rules
            from mindformers.tools.register import MindFormerConfig

            config = MindFormerConfig(job["file"])
            validate_mf_ctx_run_mode(config)
            validate_parallel_mode(config)
            ms.set_context(device_target="CPU")
            parallel = config.parallel
            ms.set_auto_parallel_context(
                parallel_mode=parallel.parallel_mode, device_num=job["world_size"],
                full_batch=parallel.full_batch, gradients_mean=parallel.gradients_mean,
                enable_parallel_optimizer=parallel.enable_parallel_optimizer)
            build_parallel_config(config)
            check_rules.get_device_num = lambda: job["world_size"]
            check_rules.get_server_num = lambda: max(1, job["world_size"] // 8)
            check_rules._check_full_batch()
            check_rules._check_parallel(config)
            check_rules._check_recompute(config)
    except Exception as e:
        return {"version": "MindFormers ?", "accepted": False, "checked": 0,
                "mismatches": [f"{type(e).__name__}: {e}"]}
    version = f"MindSpore {ms.__version__}, MindFormers {mindformers.__version__}"
    context = {name: ms.get_auto_parallel_context(name) for name in (
        "device_num", "parallel_mode", "enable_parallel_optimizer")}
    checked, mismatches = _compare({"context": context,
                                    "parallel_config": config.parallel_config}, job["want"])
    return {"version": version, "accepted": True, "checked": checked, "mismatches": mismatches}


CHECKS = {"megatron": check_megatron, "mindspore": check_mindspore,
          "mindformers": check_mindformers, "deepspeed": check_deepspeed, "torchrun": check_torchrun,
          "torchtitan_toml": check_torchtitan_toml,
          "torchtitan_recipe": check_torchtitan_recipe}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        job = json.loads(sys.argv[2])
        print("RESULT " + json.dumps(CHECKS[job["kind"]](job)))
        sys.exit(0)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
