"""Per-stage time and memory of a batch of candidates, as `stage_terms` over block types.

`evaluate` sums these terms for its layout; the layout balancer (`stage_costs.chain_costs`)
takes the same terms for one candidate and optimises the layout over them, so both see one
cost model. ZeRO-2/3 traffic per micro-batch is the one term `evaluate` does not interpret
option by option: it runs the same formulas on its layout's stage sums
(`MicroBatchTraffic.values`), each collective on its fastest protocol, which is the term's
least over its options (tests/search/test_chain_costs.py holds the two equal). Every quantity
is a `cost_models` formula; this module says which blocks and candidates each applies to.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cost_models.enums import MasterWeights, MoeDispatcher, Precision, Recompute, ZeroStage
from cost_models.data_parallel import fp8_gather_bytes_saved
from cost_models.expert_parallel import (a2a_overlap_share, deepep_buffer_bytes,
                                         hybridep_buffer_bytes, paired_a2a_exposed_s)
from cost_models.fp8 import fp8_value_bytes, fp8_weight_bytes_per_param
from cost_models.memory import (StateBytes, bf16_grad_copy_bytes_per_param, framework_buffer_bytes,
                                model_state_bytes, zero3_gather_buffer_bytes)
from cost_models.offload import activation_copies_pieces, exposed_copy_pieces, host_copy_s
from cost_models.pipeline import (pipeline_boundary_exposed_s, pipeline_boundary_s,
                                    pipeline_kept_output_bytes)
from cost_models.tensor_parallel import tp_exposed_s, tp_overlap_reaches
from cost_models.communication import Group, exposed_time_s
from cost_models.units import BYTES_16BIT, bytes_per_value
from planner.costing.data_parallel import micro_batch_s, micro_batch_term
from planner.costing.layout import ChainTypes
from planner.costing.placement import (data_parallel_gap, pipeline_placement, strided_placement,
                                      tp_placement)
from planner.costing.stage_terms import Linear, Peak, Term
from planner.core.candidates import MOE_DISPATCHER_ORDER, RECOMPUTE_ORDER
from planner.core.problem import Problem
from planner.inputs.loader import fp8_param_gather_allowed
from planner.schemas.model import REPEATED_KINDS, OutputBlock, TransformerBlock


# --------------------------------------------------------------------------- block types

@lru_cache(maxsize=32)
def chain_types(model) -> ChainTypes:
    return ChainTypes(model)


@lru_cache(maxsize=32)
def type_params(model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per block type: parameters TP shards, those it replicates, and routed-expert ones."""
    types = chain_types(model)
    counts = [b.params() for b in types.unique_blocks]
    return tuple(np.array([getattr(c, name) for c in counts], dtype=float)
                 for name in ("sharded", "replicated", "expert"))


@lru_cache(maxsize=32)
def type_fp8_mask(model, output_layer: bool = False) -> np.ndarray:
    """Per block type: 1 where its linear layers run in FP8 under precision fp8 (a transformer
    layer's QKV, output and MLP matrices and its routed experts, unless the run keeps the layer
    in bf16: `TransformerBlock.keep_bf16`; the output layer where the run puts it in FP8,
    `output_layer`), else 0. Embedding, norms, router and Evoformer blocks stay bf16."""
    return np.array([(isinstance(b, TransformerBlock) and not b.keep_bf16)
                     or (output_layer and isinstance(b, OutputBlock))
                     for b in chain_types(model).unique_blocks], dtype=float)


@lru_cache(maxsize=32)
def type_fp8_experts(model) -> np.ndarray:
    """Per block type: the routed-expert parameters that run in FP8 under precision fp8 (all,
    those of multi-token-prediction modules too, but in layers the run keeps in bf16)."""
    _, _, expert = type_params(model)
    return np.array([not getattr(b, "keep_bf16", False)
                     for b in chain_types(model).unique_blocks], dtype=float) * expert


def type_fp8_params(model, output_layer: bool = False) -> np.ndarray:
    """Per block type: the TP-sharded parameters of its FP8 linear layers (`type_fp8_mask`)."""
    sharded, _, _ = type_params(model)
    return type_fp8_mask(model, output_layer) * sharded


def fp8_output_layer(problem: Problem) -> bool:
    """The run puts the output layer in FP8 (precision fp8 and training.fp8_output_layer)."""
    t = problem.training
    return t.precision is Precision.FP8 and t.fp8_output_layer


@lru_cache(maxsize=32)
def type_is_layer(model) -> np.ndarray:
    """Per block type: a repeated layer (what a pipeline splits)."""
    return np.array([b.kind in REPEATED_KINDS for b in chain_types(model).unique_blocks])


# --------------------------------------------------------------------------- model states

def fp8_params_gathered(problem: Problem, cands) -> np.ndarray:
    """(N,) bool: the candidate keeps and gathers FP8 parameters (asked and allowed)."""
    return cands.fp8_gather & fp8_param_gather_allowed(problem, cands.zero)


def tp_overlap_applies(problem: Problem, cands) -> np.ndarray:
    """Whether each candidate's TP collectives overlap its GEMMs: asked for, with sequence
    parallelism, on a framework that has it (compiled, where its overlap needs it), and the TP
    group inside one NVLink domain."""
    place = tp_placement(cands.tp, problem.cluster.nvlink_gpus)
    return (cands.tp_overlap & cands.sp & problem.tp_overlap_runs
            & tp_overlap_reaches(place.num_nodes))


def moe_overlap_applies(problem: Problem, cands) -> np.ndarray:
    """Whether each candidate hides its expert all-to-all behind another micro-batch's compute:
    asked for, on a framework that has it, where Megatron-Core allows it (TransformerConfig
    __post_init__: expert parallelism, no full recomputation, and with a pipeline the
    interleaved schedule)."""
    full = cands.recompute == RECOMPUTE_ORDER.index(Recompute.FULL)
    return (cands.moe_overlap & problem.framework.moe_a2a_overlap & problem.model.is_moe
            & (cands.ep > 1) & ~full & ((cands.pp == 1) | (cands.vpp > 1)))


def dispatcher_buffer_bytes(problem: Problem, cands) -> np.ndarray:
    """(N,) bytes the MoE flex dispatcher's communication buffers hold on each rank, once for
    the run: DeepEP's (`expert_parallel.deepep_buffer_bytes`) or HybridEP's, sized by the
    tokens one rank dispatches per micro-batch (`expert_parallel.hybridep_buffer_bytes`; the
    EP group's ranks per NVLink domain as `block_costs` places them); none with the
    all-to-all dispatcher or without MoE."""
    block = next((b for b in problem.model.blocks
                  if isinstance(b, TransformerBlock) and b.moe is not None), None)
    zero = np.zeros(len(cands.tp))
    if block is None:
        return zero
    dispatcher = np.asarray(cands.dispatcher)
    deepep = dispatcher == MOE_DISPATCHER_ORDER.index(MoeDispatcher.FLEX_DEEPEP)
    hybrid = dispatcher == MOE_DISPATCHER_ORDER.index(MoeDispatcher.FLEX_HYBRIDEP)
    if not (deepep.any() or hybrid.any()):
        return zero
    # The dispatcher takes each rank's sequence-parallel shard: s / cp x b / tp tokens.
    tokens = problem.training.seq_len / cands.cp * cands.mb / np.where(cands.sp, cands.tp, 1)
    domain = strided_placement(cands.ep, cands.etp, problem.cluster.nvlink_gpus)
    return (np.where(deepep, deepep_buffer_bytes(hidden=block.hidden, ep=cands.ep), 0.0)
            + np.where(hybrid, hybridep_buffer_bytes(
                hidden=block.hidden, tokens_per_rank=tokens, ep=cands.ep,
                experts_per_rank=block.moe.num_experts / cands.ep,
                ranks_per_domain=domain.ranks_per_node), 0.0))


def fp8_weight_extra_bytes(problem: Problem, cands) -> np.ndarray:
    """(N,) bytes per FP8 linear parameter a rank keeps beyond the bf16 weight
    `state_bytes_per_param` counts (`fp8.fp8_weight_bytes_per_param` less 2; negative where
    FP8 parameters replace the bf16 weight). ZeRO-3 keeps no persistent copies: each block's
    weights are gathered, quantized and freed."""
    t = problem.training
    if t.precision is not Precision.FP8 or t.fp8_recipe is None:
        return np.zeros(len(cands))
    fp8 = problem.framework.fp8
    kw = dict(transpose_free=problem.cluster.gpu.fp8_transpose_free,
              caches=fp8 is not None and fp8.caches_weights)
    extra = np.where(fp8_params_gathered(problem, cands),
                     fp8_weight_bytes_per_param(t.fp8_recipe, fp8_params=True, **kw),
                     fp8_weight_bytes_per_param(t.fp8_recipe, fp8_params=False, **kw))
    return np.where(cands.zero >= ZeroStage.PARAMETERS, 0.0, extra - BYTES_16BIT)


def shards_to_host(cands) -> np.ndarray:
    """(N,) ZeRO-3 weight and gradient shards kept in host memory (param_offload)."""
    return cands.param_offload & (cands.zero == ZeroStage.PARAMETERS)


def _per_candidate(values, like):
    """(N,) per-candidate values shaped to multiply `like`: an (N, ...) array, or a term."""
    if isinstance(like, np.ndarray) and like.ndim > 1:
        return values.reshape((-1,) + (1,) * (like.ndim - 1))
    return values


def unsharded_under_pipeline(problem: Problem, cands) -> np.ndarray:
    """(N,) where FSDP keeps a stage's gradients unsharded and its weights gathered through
    the step: the framework's pipeline does (profile pipeline_unsharded_accumulation), pp > 1
    (`memory.model_state_bytes` unsharded_accumulation)."""
    return problem.framework.pipeline_unsharded_accumulation & (cands.pp > 1)


def rank_states(problem: Problem, cands, dense, experts, fp8=0.0) -> StateBytes:
    """Model states a rank holds for `dense` parameters (ZeRO over its shard group) and
    routed-expert ones (ZeRO over the expert data-parallel shard group, Megatron-Core's
    distributed optimizer over the expert-DP group): (N,) or (N, p) arrays of parameters, or
    `Linear` terms. `fp8`: of those, the FP8 linear-layer parameters, whose weights take
    `fp8_weight_extra_bytes` more each."""
    per, master = problem.training.state_bytes, problem.framework.master_weights
    whole = unsharded_under_pipeline(problem, cands)
    # Bytes per parameter after ZeRO (`memory.model_state_bytes` of one parameter), per candidate.
    d = model_state_bytes(num_params=1.0, dp=cands.grad_shard.astype(float),
                          zero_stage=cands.zero, per_param=per, master_weights=master,
                          unsharded_accumulation=whole)
    e = model_state_bytes(num_params=1.0, dp=cands.expert_shard.astype(float),
                          zero_stage=cands.zero, per_param=per, master_weights=master,
                          unsharded_accumulation=whole)
    extra = fp8_weight_extra_bytes(problem, cands)
    at = lambda x: _per_candidate(np.asarray(x, dtype=float), dense)  # noqa: E731
    return StateBytes(dense * at(d.weights) + experts * at(e.weights) + fp8 * at(extra),
                      dense * at(d.gradients) + experts * at(e.gradients),
                      dense * at(d.optimizer) + experts * at(e.optimizer))


def gpu_states(states: StateBytes, cands) -> StateBytes:
    """The model states left on the GPU under CPU offload: the optimizer states but the
    offloaded share, no weight or gradient shards where ZeRO-3 keeps them on the host."""
    keep = _per_candidate(1.0 - shards_to_host(cands), states.weights)
    return StateBytes(states.weights * keep, states.gradients * keep,
                      states.optimizer * _per_candidate(1 - cands.opt_offload, states.weights))


def state_floor_bytes(problem: Problem, cands) -> np.ndarray:
    """(N,) the model states of the average pipeline stage: a floor under the fullest stage of
    any layout (the states of all blocks, after TP, EP and ZeRO sharding, over pp stages)."""
    counts = np.bincount(chain_types(problem.model).type_of_position,
                         minlength=len(chain_types(problem.model).unique_blocks))
    sharded, replicated, expert = (x @ counts for x in type_params(problem.model))
    dense = (sharded / cands.tp + replicated) / cands.pp
    experts = expert / (cands.ep * cands.etp) / cands.pp
    fp8 = ((type_fp8_params(problem.model, fp8_output_layer(problem)) @ counts / cands.tp
            + type_fp8_experts(problem.model) @ counts / (cands.ep * cands.etp)) / cands.pp)
    return gpu_states(rank_states(problem, cands, dense, experts, fp8), cands).total


def host_rates(problem: Problem) -> tuple[float, float]:
    """(host link bytes/s per GPU, host memory bytes/s per GPU); infinite without a host
    block, where the offload rule refuses every offload."""
    cluster = problem.cluster
    if cluster.host is None:
        return np.inf, np.inf
    return cluster.host_link_bytes_per_s, cluster.host_memory_bytes_per_s_per_gpu


# --------------------------------------------------------------------------- the stage model

@dataclass(frozen=True)
class MicroBatchTraffic:
    """Data-parallel traffic per micro-batch of the candidates at `rows` (ZeRO 2-3) over one
    group of ranks (`data_parallel.micro_batch_term`)."""

    rows: np.ndarray
    experts: bool
    """The routed experts' traffic (over the expert data-parallel group), else the dense."""
    params: Linear
    gather: Linear
    group: dict
    """dp, shard, stride, inner, gap and nvls of the group (`data_parallel_groups`), at `rows`."""
    gate: np.ndarray | None
    """Types that carry the traffic (an MoE model's experts), or None: every stage."""
    message_ranges: tuple | None

    def term(self, problem: Problem, cands, sm: StageModel) -> Term:
        """As a term, for the layout balancer (`cands` all the model's rows)."""
        rows = self.rows
        return micro_batch_term(problem, cands.take(rows), **self.group,
                                params=self.params.take(rows), gather=self.gather.take(rows),
                                forward=sm.forward.take(rows), backward=sm.backward.take(rows),
                                gate=self.gate, message_ranges=self.message_ranges)

    def values(self, problem: Problem, cands, *, params: np.ndarray, gather: np.ndarray,
               forward: np.ndarray, backward: np.ndarray, held: np.ndarray) -> np.ndarray:
        """(rows, p) seconds in a layout, from its (N, p) stage sums and `held` (p, U), the
        blocks of each type each stage holds."""
        rows = self.rows
        seconds = micro_batch_s(problem, cands.take(rows), **self.group, params=params[rows],
                                gather=gather[rows], blocks=held.sum(1)[None, :],
                                forward=forward[rows], backward=backward[rows])
        if self.gate is not None:
            seconds = np.where(held[:, self.gate].sum(1)[None, :] > 0, seconds, 0.0)
        return seconds


@dataclass(frozen=True)
class StageModel:
    """Per-stage quantities of N candidates over U block types (`stage_terms`)."""

    dense_params: Linear
    """Parameters a rank holds that TP shards or replicates (a tied output layer's copy too)."""
    expert_params: Linear
    """Routed-expert parameters a rank holds (split over ep x etp)."""
    fp8_dense: Linear
    """Of the dense parameters, the FP8 linear-layer ones."""
    dense_gather: Linear
    """Bytes of the dense weights' all-gather (FP8 parameters in FP8)."""
    expert_gather: Linear
    updated: Linear
    """Parameters whose optimizer step this rank runs (its ZeRO shard with sharded states)."""
    offloaded: Linear
    """Of those, the ones the CPU updates (optimizer offload)."""
    weights: Linear
    gradients: Linear
    optimizer: Linear
    """Model-state bytes left on the GPU."""
    host_states: Linear
    """Model-state bytes in host memory."""
    activations: Linear
    """Activation bytes of the micro-batches in flight."""
    activations_to_host: Term | None
    """Of those, the bytes of offloaded layers (in host memory)."""
    working: Peak
    """The largest recomputed block's working set."""
    pipe_buffers: Linear | None
    """Stage outputs the pipeline engine keeps (framework profile)."""
    gathered: np.ndarray
    """(N,) ZeRO-3's gathered weights of the blocks in flight."""
    buffers: Linear
    """Framework communication buffers and second gradient copies."""
    forward: Linear
    backward: Linear
    weight_grad: Linear
    """Of `backward`, the weight-gradient GEMMs (what a zero-bubble schedule runs apart)."""
    recompute: Linear
    tp: Linear
    ep: Linear
    cp: Linear
    host: Linear
    """The GPU waiting on the host's launches of eager MoE token paths, per micro-batch."""
    pp: Linear | None
    """Pipeline sends and receives per micro-batch (None without a pipeline)."""
    engine: Linear | None
    """The pipeline engine's own time per micro-batch, per layer the stage holds (None where
    the model does not run in one, or the framework states none: `_pipeline_engine`)."""
    dp: tuple[MicroBatchTraffic, ...]
    """Data-parallel traffic per micro-batch of some candidates (ZeRO 2-3)."""
    offload: tuple[Term, ...]
    """Host copies per micro-batch not hidden by compute."""
    framework_bytes: float
    fragmentation: float

    @property
    def compute(self) -> Linear:
        return self.forward + self.backward + self.recompute

    @property
    def allocated(self) -> tuple:
        """Terms of the bytes the allocator hands out (the reserve grows with them)."""
        items = [self.weights, self.gradients, self.optimizer, self.activations, self.working,
                 self.buffers, Linear(const=self.gathered[:, None])]
        if self.activations_to_host is not None:
            items.append(self.activations_to_host * -1.0)
        if self.pipe_buffers is not None:
            items.append(self.pipe_buffers)
        return tuple(items)

    @property
    def time_terms(self) -> tuple:
        """Terms of a stage's time per micro-batch (all rows; `dp` holds its own rows)."""
        items = [self.compute, self.tp, self.ep, self.cp, self.host, *self.offload]
        items += [term for term in (self.pp, self.engine) if term is not None]
        return tuple(items)


@dataclass(frozen=True)
class BlockTimes:
    """(N, U) seconds per micro-batch of each block type that a stage adds for every block of
    that type it holds, whatever the layout: its compute and its exposed TP, EP, CP and host
    waits. (Pipeline sends, ZeRO traffic and host copies depend on the layout.)"""

    forward: np.ndarray
    backward: np.ndarray
    recompute: np.ndarray
    tp: np.ndarray
    ep: np.ndarray
    cp: np.ndarray
    host: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return (self.forward + self.backward + self.recompute + self.tp + self.ep + self.cp
                + self.host)


def block_times(problem: Problem, cands, costs) -> BlockTimes:
    """The per-block time terms of `stage_model` (block costs `costs`)."""
    fw = problem.framework
    k = problem.cluster.efficiency.overlap_interference
    block_compute = costs.forward_s + costs.backward_s + costs.recompute_s
    tp_share = np.where(tp_overlap_applies(problem, cands), fw.tp_comm_overlap_fraction,
                        0.0)[:, None]
    tp_comm = tp_exposed_s(costs.tp_comm_s, block_compute, overlap_share=tp_share,
                           interference=k)
    # Expert dispatch and combine: with moe_a2a_overlap, on the paired chunk passes of the
    # combined 1F1B schedule (`a2a_overlap_share`) each all-to-all runs beside one piece of
    # the other micro-batch's layer (`paired_a2a_exposed_s`), the unpaired ones in line;
    # otherwise the framework's share, if any, overlaps the layer's compute.
    paired = a2a_overlap_share(num_micro_batches=cands.num_micro_batches, pp=cands.pp,
                               vpp=cands.vpp)[:, None]
    overlapped = (paired * paired_a2a_exposed_s(
        costs.ep_comm_s, forward_s=costs.forward_s,
        backward_s=costs.backward_s + costs.recompute_s,
        expert_forward_s=costs.expert_forward_s,
        interference=k if fw.moe_a2a_overlap_interference is None
        else fw.moe_a2a_overlap_interference)
        + (1 - paired) * costs.ep_comm_s)
    plain = exposed_time_s(costs.ep_comm_s, block_compute, interference=k,
                           share=fw.ep_comm_overlap_fraction)
    overlaps = moe_overlap_applies(problem, cands)[:, None]
    ep_comm = np.where(overlaps, overlapped, plain)
    # The host's launch work likewise: on the paired passes one host sequence issues both
    # micro-batches' token paths beside both passes' compute.
    host = np.where(overlaps, paired * costs.paired_host_wait_s
                    + (1 - paired) * costs.host_wait_s, costs.host_wait_s)
    return BlockTimes(forward=costs.forward_s, backward=costs.backward_s,
                      recompute=costs.recompute_s, tp=tp_comm, ep=ep_comm, cp=costs.cp_comm_s,
                      host=host)


def stage_model(problem: Problem, cands, costs, *, pp: int, embedding_copy: Linear,
                reachable_only: bool = False) -> StageModel:
    """The per-stage terms of `cands` (block costs `costs`) in a pipeline of `pp` stages.
    `embedding_copy`: TP-sharded parameters of the word-embedding copy a stage keeps for a tied
    output layer or an MTP module when the embedding lives on another (Megatron-LM, which
    all-reduces its gradient). `reachable_only` (one candidate): terms without the options no
    layout can reach (`data_parallel.micro_batch_term`)."""
    model, cluster, training, fw = problem.model, problem.cluster, problem.training, problem.framework
    tp = cands.tp.astype(float)
    sharded, replicated, expert = type_params(model)
    is_layer = type_is_layer(model).astype(float)
    per = training.state_bytes

    # ---- parameters a rank holds: TP shards and replicates, EP x ETP splits the experts.
    dense = (Linear(block=sharded[None, :] / tp[:, None] + replicated[None, :])
             + embedding_copy * (1 / tp))
    experts = Linear(block=expert[None, :] / (cands.ep * cands.etp)[:, None])
    fp8_dense = Linear(block=type_fp8_params(model, fp8_output_layer(problem))[None, :]
                       / tp[:, None])
    fp8_experts = Linear(block=type_fp8_experts(model)[None, :] / (cands.ep * cands.etp)[:, None])
    states = rank_states(problem, cands, dense, experts, fp8_dense + fp8_experts)
    # CPU offload (cost_models/offload.py): the optimizer's share of each rank's states, with a
    # pinned copy of their gradients to update from (hybrid_optimizer.py cpu_copy_map_grad);
    # under ZeRO-3 with param_offload the weight and gradient shards too.
    sharded_optimizer = cands.zero >= ZeroStage.OPTIMIZER_STATES
    updated = (dense * (1 / np.where(sharded_optimizer, cands.grad_shard, 1))
               + experts * (1 / np.where(sharded_optimizer, cands.expert_shard, 1)))
    offloaded = updated * cands.opt_offload
    on_host = shards_to_host(cands)
    # Where the parameters are the fp32 master (FSDP), it moves with the weight shards.
    beside_params = per.master if fw.master_weights is MasterWeights.PARAMETERS else 0.0
    host_states = (offloaded * (per.optimizer - beside_params + per.gradients)
                   + (states.weights + states.gradients) * on_host.astype(float))
    states = gpu_states(states, cands)

    # ---- activations: each chunk's blocks times the micro-batches it holds in flight.
    activations = Linear(in_flight=costs.activation_bytes)
    to_host = None
    if cands.act_offload.any():
        # The saved tensors of `act_offload` layers per stage wait in host memory; per layer,
        # the stage's average.
        to_host = Term(((Linear(in_flight=costs.activation_bytes * is_layer),),),
                       cap=cands.act_offload.astype(float))
    pipe_buffers = None
    value_bytes = bytes_per_value(training.precision)
    if pp > 1 and fw.pipeline_keeps_outputs:
        # One kept output per in-flight micro-batch of every chunk but the last (DeepSpeed
        # runtime/pipe/engine.py pipe_buffers['outputs']).
        pipe_buffers = Linear(end_in_flight=pipeline_kept_output_bytes(
            costs.output_elements, value_bytes=value_bytes))
    largest_block = (sharded[None, :] / tp[:, None] + replicated[None, :]
                     + expert[None, :] / (cands.ep * cands.etp)[:, None]).max(1)
    # ZeRO-3 gathers one block at a time, unless the weights stay gathered through the step
    # (FSDP under a pipeline: `rank_states` counts them whole then).
    gathers = (cands.zero == ZeroStage.PARAMETERS) & ~unsharded_under_pipeline(problem, cands)
    gathered = np.where(gathers, zero3_gather_buffer_bytes(
        largest_block_params_per_rank=largest_block, weight_bytes=per.weights,
        prefetch_blocks=cluster.reserve.zero3_prefetch_blocks), 0.0)
    b = fw.buffers
    framework_buffers = framework_buffer_bytes(
        data_parallel=cands.dp * cands.cp > 1, zero_stage=cands.zero, tp=cands.tp, pp=cands.pp,
        cp=cands.cp, grad_bucket_elements=b.grad_bucket_elements,
        grad_bucket_copies=b.grad_bucket_copies, gather_bucket_elements=b.gather_bucket_elements,
        per_communicator_bytes=b.per_communicator_bytes, value_bytes=value_bytes)
    grad_copy = bf16_grad_copy_bytes_per_param(
        bf16=training.precision is Precision.BF16, zero_stage=cands.zero, pp=cands.pp,
        copy_bytes_per_param=b.bf16_grad_copy_bytes_per_param)
    framework_buffers = framework_buffers + dispatcher_buffer_bytes(problem, cands)
    buffers = Linear(const=framework_buffers[:, None]) + (dense + experts) * grad_copy

    # ---- time per micro-batch
    t = block_times(problem, cands, costs)
    forward, backward = Linear(block=t.forward), Linear(block=t.backward)
    recompute = Linear(block=t.recompute)
    tp_comm, ep_comm, cp_comm = Linear(block=t.tp), Linear(block=t.ep), Linear(block=t.cp)
    host_wait = Linear(block=t.host)
    pp_comm = _pipeline_comm(problem, cands, costs, pp) if pp > 1 else None
    engine = (_pipeline_engine(problem, costs)
              if pp > 1 or problem.framework.pipeline_engine_single_stage else None)

    gathered_fp8 = fp8_params_gathered(problem, cands)
    wire = fp8_value_bytes(training.fp8_recipe) if training.fp8_recipe else per.weights
    saved = fp8_gather_bytes_saved(weight_bytes=per.weights, fp8_value_bytes=wire,
                                   gathered=gathered_fp8)
    dense_gather = dense * per.weights - fp8_dense * saved
    expert_gather = experts * (per.weights - saved)
    dp_traffic = []
    per_micro_batch = cands.zero >= ZeroStage.GRADIENTS
    groups = [(per_micro_batch & (cands.dp * cands.cp > 1), dense, dense_gather,
               dict(dp=cands.dp * cands.cp, shard=cands.grad_shard, stride=cands.tp,
                    inner=cands.cp, gap=data_parallel_gap(cands), nvls=cands.nvls), None)]
    if model.is_moe:   # expert gradients and weights travel over the expert data-parallel group
        groups.append((per_micro_batch & (cands.edp > 1), experts, expert_gather,
                       dict(dp=cands.edp, shard=cands.expert_shard, stride=cands.etp * cands.ep,
                            inner=np.ones_like(cands.ep), gap=data_parallel_gap(cands),
                            nvls=cands.nvls),
                       expert > 0))
    for need, params, gather, group, gate in groups:
        rows = np.flatnonzero(need)
        if len(rows):
            ranges = None
            if reachable_only:
                ranges = _message_ranges(model, params.block[0] * per.gradients,
                                         gather.block[0], gate=gate, pp=pp,
                                         fetches_per_block=fw.zero3.fetches_per_block)
            dp_traffic.append(MicroBatchTraffic(
                rows, gate is not None, params, gather,
                {name: value[rows] for name, value in group.items()}, gate, ranges))

    offload = []
    link_bytes_per_s, _ = host_rates(problem)
    if cands.act_offload.any():
        # Each offloaded layer's saved tensors go down while the next layer runs forward and
        # come back while the one after it runs backward, or in line with the compute where
        # the framework's copies block (`offload.activation_copies_s`); per layer, the
        # stage's average.
        copy = Linear(block=host_copy_s(costs.activation_bytes * is_layer,
                                        link_bytes_per_s=link_bytes_per_s))
        groups = activation_copies_pieces(
            copy, forward_s=Linear(block=costs.forward_s * is_layer),
            backward_s=Linear(block=(costs.backward_s + costs.recompute_s) * is_layer),
            overlapped=fw.offload is not None and fw.offload.activation_copies_overlap)
        for group in groups:
            offload.append(Term((tuple(group),), cap=cands.act_offload.astype(float)))
    if on_host.any():
        # ZeRO-3 shards come up before each of the two gathers and their gradients go down,
        # behind the stage's compute like the gathers they feed.
        shard_params = (dense * (1 / cands.grad_shard) + experts * (1 / cands.expert_shard))
        shard_copy = host_copy_s(shard_params * (2 * per.weights + per.gradients),
                                 link_bytes_per_s=link_bytes_per_s)
        pieces = exposed_copy_pieces(shard_copy, forward + backward + recompute)
        offload.append(Term((tuple(piece * on_host.astype(float) for piece in pieces),)))

    return StageModel(
        dense_params=dense, expert_params=experts, fp8_dense=fp8_dense, dense_gather=dense_gather,
        expert_gather=expert_gather, updated=updated, offloaded=offloaded,
        weights=states.weights, gradients=states.gradients, optimizer=states.optimizer,
        host_states=host_states, activations=activations, activations_to_host=to_host,
        working=Peak(costs.recompute_working_bytes), pipe_buffers=pipe_buffers,
        gathered=gathered, buffers=buffers, forward=forward, backward=backward,
        weight_grad=Linear(block=costs.weight_grad_s), recompute=recompute, tp=tp_comm,
        ep=ep_comm, cp=cp_comm, host=host_wait, pp=pp_comm,
        engine=engine, dp=tuple(dp_traffic), offload=tuple(offload),
        framework_bytes=cluster.reserve.framework_gib * 2**30,
        fragmentation=cluster.reserve.fragmentation_fraction)


def _message_ranges(model, grads: np.ndarray, gather: np.ndarray, *, gate, pp: int,
                    fetches_per_block: int) -> tuple:
    """(least, most) bytes, over every layout of at least pp chunks, of a stage's gradient
    reduce-scatter and of one ZeRO-3 gather and reduction (a stage's bytes over its fetches),
    from per-type `grads` and `gather` bytes. A layout holds a layer on every stage; a gated
    term counts only on stages holding a gated type. A stage's bytes per fetch lie between
    its blocks' least and most (fewer where blocks without bytes add fetches)."""
    types = chain_types(model)
    counts = np.bincount(types.type_of_position, minlength=len(types.unique_blocks))
    whole = float(grads @ counts)
    if gate is not None:
        # A stage with a gated block may hold every other block of the chain but one per
        # other stage, each adding a fetch and no expert bytes.
        most_blocks = len(model.blocks) - (pp - 1)
        per = fetches_per_block * most_blocks
        return ((float(grads[gate].min()), whole),
                (float(gather[gate].min()) / per, float(gather.max()) / fetches_per_block),
                (float(grads[gate].min()) / per, float(grads.max()) / fetches_per_block))
    layer = type_is_layer(model)
    others = int(counts[~layer].sum())

    def least_average(values: np.ndarray) -> float:
        # At least one layer; at most every non-layer block of the chain beside it.
        low_layer = float(values[layer].min())
        if not others:
            return low_layer
        low_other = float(values[~layer].min())
        return min(low_layer, (low_layer + others * low_other) / (1 + others))

    return ((float(grads[layer].min()), whole),
            (least_average(gather) / fetches_per_block, float(gather.max()) / fetches_per_block),
            (least_average(grads) / fetches_per_block, float(grads.max()) / fetches_per_block))


def _pipeline_comm(problem: Problem, cands, costs, pp: int) -> Linear:
    """Seconds per micro-batch each stage spends in pipeline sends and receives: every chunk
    boundary costs the sending stage the transfer of the chunk's last block's output
    (`pipeline.pipeline_boundary_s`); the final chunk only receives (its input: the output of
    the block ending chunk K - 2). Where the framework overlaps the transfers in the
    interleaved schedule (`pipeline_boundary_exposed_s`) they cost nothing."""
    cluster, fw = problem.cluster, problem.framework
    tp = cands.tp.astype(float)[:, None]
    pipe = pipeline_placement(cands, cluster.nvlink_gpus)
    place = tp_placement(cands.tp, cluster.nvlink_gpus)
    tp_group = Group(size=tp, ranks_per_node=place.ranks_per_node[:, None],
                           num_nodes=place.num_nodes[:, None])
    boundary = pipeline_boundary_s(
        elements=costs.output_elements, value_bytes=bytes_per_value(problem.training.precision),
        tp=tp, sequence_parallel=cands.sp[:, None], scatter_gather=fw.pipeline_scatter_gather,
        across_nodes=(pipe.num_nodes > 1)[:, None], tp_group=tp_group, net=cluster.network)
    boundary = pipeline_boundary_exposed_s(
        boundary, overlapped=(fw.pipeline_p2p_overlap_interleaved & (cands.vpp > 1))[:, None])
    return Linear(end=boundary, final=boundary)


def _pipeline_engine(problem: Problem, costs) -> Linear | None:
    """Seconds per micro-batch the framework's pipeline engine adds on a stage beyond compute
    and transfers: the profile's pipeline_layer_overhead_s for every layer the stage holds
    (fitted, see the profile); None where it states none. With a pipeline, or with one stage
    where the model runs in the engine anyway (`pipeline_engine_single_stage`)."""
    per_layer = problem.framework.pipeline_layer_overhead_s
    if not per_layer:
        return None
    is_layer = type_is_layer(problem.model)[None, :]
    return Linear(block=np.where(is_layer, per_layer, 0.0) + 0 * costs.forward_s)
