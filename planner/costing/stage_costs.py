"""The chain of one candidate strategy, as linear per-block costs for the layout balancer.

`costing.evaluate` adds block costs up per pipeline stage for a given layout; the balancer
(`planner.search.balance`) needs the same sums as linear functions of which blocks a stage holds.
This module writes them in that form from the same ingredients: the block costs of
`costing.block_costs`, the parameter counts and state bytes of `cost_models.memory`, the
in-flight counts of `cost_models.pipeline`. What does not depend on the layout for a chain
that starts with its embedding and ends with its output layer (pipeline sends, a tied
embedding's copy on the last stage, exposed data-parallel traffic) is taken per stage from an
evaluation of the candidate; the layout chosen is then evaluated again by `costing.evaluate`,
which stays the one truth (tests/search/test_balance.py checks that the two agree).
"""

from __future__ import annotations

import numpy as np

from cost_models.enums import ZeroStage
from cost_models.memory import (model_state_bytes,
                                zero3_gather_buffer_bytes)
from cost_models.pipeline import in_flight_per_chunk
from cost_models.units import GiB
from planner.search.balance import ChainCosts
from planner.costing.evaluate import (BlockCosts, Evaluation, chain_types, ep_exposed_s,
                                      fp8_weight_extra_bytes, framework_buffer_bytes,
                                      grad_copy_bytes_per_param, tp_exposed_s, type_fp8_params,
                                      type_params)
from planner.core.candidates import Candidates
from planner.costing.layout import Layout
from planner.core.problem import Problem
from planner.schemas.model import OutputBlock


def state_bytes_per_stored_param(problem: Problem, cands: Candidates, rows, *,
                                 experts: bool = False):
    """Bytes of weights, gradients and optimizer state per parameter a rank stores, after
    ZeRO sharding over its shard group (all of dp, or less under HSDP; for routed experts the
    expert data-parallel group): `memory.model_state_bytes` of one parameter."""
    per = problem.training.state_bytes
    shard = cands.expert_shard if experts else cands.shard
    return model_state_bytes(num_params=1.0, dp=shard[rows].astype(float),
                             zero_stage=cands.zero[rows], per_param=per).total


def chain_costs(problem: Problem, cands: Candidates, costs: BlockCosts, ev: Evaluation,
                layout: Layout, i: int) -> ChainCosts:
    """The linear costs of candidate `i` (evaluated as `ev` in `layout`) for the balancer."""
    model, cluster = problem.model, problem.cluster
    p, v = layout.pp, layout.vpp
    types = chain_types(model).type_of_position
    frag = 1 + cluster.reserve.fragmentation_fraction       # the reserve grows with allocation
    tp = float(cands.tp[i])
    sharded, replicated, expert = type_params(model)
    dense = sharded / tp + replicated                        # per block type, on one rank
    experts = expert / float(cands.ep[i] * cands.etp[i])
    params = dense + experts
    copy = float(grad_copy_bytes_per_param(problem, cands)[i])
    per_param = float(state_bytes_per_stored_param(problem, cands, i)) + copy
    per_expert_param = float(state_bytes_per_stored_param(problem, cands, i, experts=True)) + copy
    fp8 = type_fp8_params(model) / tp + experts          # FP8 linear weights' extra copies
    block_state = (dense * per_param + experts * per_expert_param
                   + fp8 * float(fp8_weight_extra_bytes(problem, cands)[i]))
    time = (costs.forward_s[i] + costs.backward_s[i] + costs.recompute_s[i]
            + tp_exposed_s(problem, cands, costs)[i] + ep_exposed_s(problem, costs)[i])
    m = float(cands.num_micro_batches[i])
    in_flight = in_flight_per_chunk(stage=np.arange(p)[:, None], pp=p, vpp=v,
                                    num_micro_batches=m, chunk=np.arange(v)[None, :])
    weights = problem.training.state_bytes.weights
    gathered = 0.0
    if int(cands.zero[i]) == ZeroStage.PARAMETERS:
        gathered = zero3_gather_buffer_bytes(
            largest_block_params_per_rank=params.max(), weight_bytes=weights,
            prefetch_blocks=cluster.reserve.zero3_prefetch_blocks)
    buffers = framework_buffer_bytes(problem, cands)[i]
    # The largest recomputed block's working set, on every stage (each holds a layer).
    working = float(costs.recompute_working_bytes[i].max())
    stage_bytes = (cluster.reserve.framework_gib * GiB
                   + frag * (gathered + buffers + working + ev.stage_pipe_buffers[i]))
    output = model.blocks[-1]
    if p > 1 and isinstance(output, OutputBlock) and output.tied:
        # The last stage keeps its own copy of a tied embedding (Megatron-LM).
        stage_bytes[-1] += frag * per_param * output.vocab_size * output.hidden / tp
    return ChainCosts(
        pp=p, vpp=v,
        block_time_s=tuple(float(time[u]) for u in types),
        block_state_bytes=tuple(float(frag * block_state[u]) for u in types),
        block_activation_bytes=tuple(float(frag * costs.activation_bytes[i, u]) for u in types),
        is_layer=tuple(b.kind in ("transformer", "evoformer") for b in model.blocks),
        stage_time_s=tuple(float(x) for x in ev.stage_pp_s[i] + ev.stage_dp_s[i]),
        stage_bytes=tuple(float(x) for x in stage_bytes),
        in_flight=tuple(tuple(int(x) for x in row) for row in in_flight),
        capacity_bytes=problem.usable_bytes)
