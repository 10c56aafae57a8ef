"""Model states per GPU by framework: where the fp32 master weights live (profile
`master_weights`, `memory.model_state_bytes`)."""

import pytest

from cost_models.enums import MasterWeights
from cost_models.units import GiB
from planner.costing.evaluate import evaluate_strategy
from planner.inputs import profiles
from planner.inputs.loader import make_problem
from planner.schemas.strategy import Strategy


@pytest.mark.parametrize(("framework", "master"), [
    ("megatron", MasterWeights.OPTIMIZER), ("deepspeed", MasterWeights.OPTIMIZER),
    ("torchtitan", MasterWeights.PARAMETERS), ("torchrun", MasterWeights.PARAMETERS)])
def test_profiles_say_where_the_master_weights_live(framework, master):
    assert profiles.load(framework).master_weights is master


def _states_bytes(framework):
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8, framework=framework)
    strategy = Strategy(dp=8, tp=1, pp=1, micro_batch=1, zero_stage=3,
                        global_batch=problem.training.global_batch)
    stage = evaluate_strategy(problem, strategy).memory.stages[0]
    num_params = sum(b.params().total for b in problem.model.blocks)
    return stage.weights_bytes + stage.gradients_bytes + stage.optimizer_bytes, num_params


@pytest.mark.parametrize(("framework", "bytes_per_param"), [
    ("torchtitan", 16),      # FSDP2: fp32 param + fp32 grad + 2 fp32 moments, all sharded
    ("deepspeed", 18),       # ZeRO-3: bf16 param + fp32 grad + fp32 master + 2 moments
])
def test_zero3_model_states_of_llama3_8b_on_8_gpus(framework, bytes_per_param):
    states, num_params = _states_bytes(framework)
    assert states == pytest.approx(bytes_per_param * num_params / 8, rel=1e-9)


def test_torchtitan_no_longer_charges_a_bf16_shard():
    # The brief's 1.87 GiB per GPU: 2 bytes x 8.03e9 parameters / 8 GPUs.
    fsdp2, num_params = _states_bytes("torchtitan")
    zero3, _ = _states_bytes("deepspeed")
    assert (zero3 - fsdp2) / GiB == pytest.approx(2 * num_params / 8 / GiB, rel=1e-9)
    assert (zero3 - fsdp2) / GiB == pytest.approx(1.87, abs=0.005)


def test_torchtitan_pipeline_keeps_gradients_unsharded_and_weights_gathered():
    # torch.distributed.pipelining turns FSDP's gradient sync and resharding off for every
    # backward but the last (stage.py backward_maybe_with_nosync): per bf16-Adam parameter of
    # a stage, the fp32 shard and moments stay sharded (4 + 8 over d), the fp32 gradient is
    # whole (4) and the bf16 weight gathered (2).
    from cost_models.enums import Optimizer, Precision, ZeroStage
    from cost_models.memory import model_state_bytes, state_bytes_per_param

    per = state_bytes_per_param(Precision.BF16, Optimizer.ADAM)
    for zero in (ZeroStage.GRADIENTS, ZeroStage.PARAMETERS):
        kept = model_state_bytes(num_params=1.0, dp=8, zero_stage=zero, per_param=per,
                                 master_weights=MasterWeights.PARAMETERS,
                                 unsharded_accumulation=True)
        assert (kept.weights, kept.gradients, kept.optimizer) == pytest.approx(
            (2 + 4 / 8, 4, 8 / 8))
    plain = model_state_bytes(num_params=1.0, dp=8, zero_stage=ZeroStage.PARAMETERS,
                              per_param=per, master_weights=MasterWeights.PARAMETERS)
    assert plain.total == pytest.approx(16 / 8)
    # ... where the framework's pipeline does that: torchtitan's, with pp > 1.
    problem = make_problem("llama3-8b", "dgx-h100", gpus=16, framework="torchtitan")
    stages = [evaluate_strategy(problem, Strategy(dp=8, tp=1, pp=pp, micro_batch=1,
                                                  zero_stage=3, global_batch=64))
              .memory.stages[0] for pp in (1, 2)]
    # Half the parameters on a stage, each gradient whole instead of an eighth: 4x.
    assert stages[1].gradients_bytes == pytest.approx(4 * stages[0].gradients_bytes, rel=0.01)
