"""Settings that have no effect where they are set: each is a `note:` (JSON `notes`), never
passed over in silence.

A setting that cannot run is a rule (planner.rules.gate); one that runs but changes
nothing (parameter servers under all-reduce, sequence parallelism without tensor parallelism)
is a note here. `validate`, `memory`, `diff` and `calibrate` judge the strategy a file gives;
`plan` and `sweep` judge the user's pins on each plan the search ranks
(`planner.search.pin_notes`).
"""

from __future__ import annotations

from cost_models.enums import (CpComm, CudaGraphs, PipelineSchedule, Precision, RankOrder,
                               RecomputeModule)
from cost_models.expert_parallel import token_path_graphed
from cost_models.tensor_parallel import tp_overlap_reaches
from planner.core.problem import Problem
from planner.costing.placement import tp_placement
from planner.schemas.strategy import DpComm, Strategy


def ineffective_settings(problem: Problem, strategy: Strategy) -> list[str]:
    """One note per setting of `strategy` that changes nothing in its context: the model,
    the precision, the framework and the strategy's own degrees."""
    s, fw = strategy, problem.framework
    notes = []
    if s.num_servers is not None and s.dp_comm is DpComm.ALL_REDUCE:
        notes.append(f"num_servers {s.num_servers} has no effect with dp_comm all_reduce: only "
                     f"a parameter server has servers")
    if s.microbatch_group is not None and s.vpp == 1:
        notes.append(f"microbatch_group {s.microbatch_group} has no effect at vpp 1: only the "
                     f"interleaved schedule runs its micro-batches in groups")
    if s.cp == 1 and s.cp_comm is not CpComm.P2P:
        notes.append(f"cp_comm {s.cp_comm.value} has no effect at cp 1: no context-parallel "
                     f"ranks exchange keys and values")
    if s.cp_a2a is not None and s.cp_comm is not CpComm.A2A_P2P:
        notes.append(f"cp_a2a {s.cp_a2a} has no effect with cp_comm {s.cp_comm.value}: only "
                     f"a2a+p2p runs an inner all-to-all group")
    if s.sequence_parallel and s.tp == 1:
        notes.append("sequence_parallel has no effect at tp 1: it splits activations over the "
                     "tensor-parallel ranks (Megatron-LM turns it off, with a warning)")
    if s.tp_comm_overlap:
        if s.tp == 1:
            notes.append("tp_comm_overlap has no effect at tp 1: there are no tensor-parallel "
                         "collectives to overlap")
        elif not s.sequence_parallel:
            notes.append("tp_comm_overlap has no effect without sequence_parallel: what it "
                         "overlaps are sequence parallelism's all-gathers and reduce-scatters")
        elif not fw.tp_comm_overlap:
            notes.append(f"tp_comm_overlap has no effect on {fw.description}: it does not "
                         f"overlap tensor-parallel collectives with the GEMMs")
        elif not problem.tp_overlap_runs:
            notes.append(f"tp_comm_overlap has no effect without torch.compile on "
                         f"{fw.description}: its async TP runs only in a compiled model "
                         f"(training.compile)")
        elif not tp_overlap_reaches(tp_placement(s.tp, problem.cluster.nvlink_gpus).num_nodes):
            notes.append(f"tp_comm_overlap has no effect at tp {s.tp} across NVLink domains of "
                         f"{problem.cluster.nvlink_gpus} GPUs: the overlap writes into the peers' "
                         f"memory over NVLink, so collectives over the network stay exposed")
    if (s.moe_dispatcher is not None and s.moe_dispatcher is not fw.defaults.moe_dispatcher
            and (not problem.model.is_moe or s.ep == 1)):
        where = "a dense model" if not problem.model.is_moe else "ep 1"
        notes.append(f"moe_dispatcher {s.moe_dispatcher.value} has no effect on {where}: no "
                     f"tokens are dispatched to expert-parallel ranks")
    if s.fp8_param_gather and problem.training.precision is not Precision.FP8:
        notes.append(f"fp8_param_gather has no effect in {problem.training.precision.value}: "
                     f"only FP8 linear weights are gathered in FP8")
    if s.cuda_graphs is not None:
        fw = problem.framework
        host_priced = (fw.moe_token_path_host_s or fw.moe_gemm_launch_host_s
                       or fw.moe_quantize_launch_host_s)
        if fw.name != "megatron":
            notes.append(f"cuda_graphs {s.cuda_graphs.value} has no effect on {fw.description}: "
                         f"it has no such setting and nothing is written")
        elif not (problem.model.is_moe and host_priced):
            notes.append(f"cuda_graphs {s.cuda_graphs.value} changes no price here: only an MoE "
                         f"layer's eager token path is priced as host time (the per-step host "
                         f"time was fitted on runs with CUDA graphs, MLPerf v5.1, "
                         f"bench/calibrate_step_sync.py; a dense layer's kernel launches are not "
                         f"modelled)")
        elif s.cuda_graphs is CudaGraphs.LAYER and not token_path_graphed(
                layer_graphs=True, full_graph=False,
                drop_padded=all(b.capacity_factor is not None for b in problem.model.blocks
                                if getattr(b, "moe", None) is not None)):
            notes.append("cuda_graphs layer changes no price for a dropless MoE: Megatron-Core "
                         "graphs an MoE layer's token path only with drop-padding (\"moe cuda "
                         "graph is only supported with drop-padding MoE\", transformer_config.py;"
                         " capacity_factor in the model file), so its launches stay eager; "
                         "full_iteration captures them")
    if s.pipeline_schedule not in (None, PipelineSchedule.ONE_F_ONE_B) and s.pp == 1:
        offered = s.pipeline_schedule in problem.framework.pipeline_schedules
        notes.append(f"pipeline_schedule {s.pipeline_schedule.value} has no effect at pp 1: "
                     f"there is no pipeline to schedule"
                     + ("" if offered else f" ({problem.framework.description} runs 1f1b "
                        f"only, so no plan with a pipeline may use it)"))
    if s.pipeline_schedule is not None and s.pipeline_schedule.v_shaped and s.pp > 1 \
            and s.vpp == 2:
        notes.append(f"pipeline_schedule {s.pipeline_schedule.value} places each rank's two "
                     f"stages in a V (rank r holds stages r and 2 pp - 1 - r, so the first "
                     f"rank holds the embedding and the output layer); the planner prices the "
                     f"looped placement (r and pp + r) with this schedule's bubble and held "
                     f"activations"
                     + ("; its forward and backward pairs run one after the other (torch "
                        "overlaps them only where the model registers an overlapped pair)"
                        if s.pipeline_schedule is PipelineSchedule.DUALPIPEV else ""))
    if not s.nvls and problem.cluster.efficiency.nvls_bus_fraction is None:
        notes.append(f"nvls false has no effect on {problem.cluster.name}: its NVLink switch "
                     f"has no NVLS (no efficiency.nvls_bus_fraction), so NCCL runs ring and "
                     f"tree anyway")
    if s.rank_order is RankOrder.TP_CP_EP_PP_DP and (s.pp == 1 or s.dp == 1):
        notes.append(f"rank_order {s.rank_order.value} has no effect at "
                     f"{'pp 1' if s.pp == 1 else 'dp 1'}: the order of the pipeline and "
                     f"data-parallel axes only matters when both have more than one rank")
    if s.etp is not None and s.etp != s.tp and not problem.model.is_moe:
        notes.append(f"etp {s.etp} has no effect on {problem.model.name}: a dense model has no "
                     f"routed experts to split")
    notes += _ineffective_recompute_modules(problem, s)
    return notes


def _ineffective_recompute_modules(problem: Problem, s: Strategy) -> list[str]:
    """Recompute modules with nothing to re-run in this model (Megatron-Core accepts them and
    does nothing: transformer_layer.py, moe/experts.py, moe/moe_layer.py @d98e8a64)."""
    M = RecomputeModule
    layers = list(problem.model.attention_layers())
    moe = any(layer.moe is not None for layer in layers)
    missing = {M.MOE: not moe, M.MOE_ACT: not moe,
               M.SHARED_EXPERTS: not any(layer.moe is not None and layer.tp_ffn
                                         for layer in layers),
               M.MLP: not any(layer.moe is None for layer in layers)}
    what = {M.MOE: "no MoE layers", M.MOE_ACT: "no MoE layers",
            M.SHARED_EXPERTS: "no shared experts", M.MLP: "no dense MLP layers"}
    return [f"recompute_modules {m.value} has no effect on {problem.model.name}: it has "
            f"{what[m]}" for m in s.recompute_modules or () if missing.get(m)]
