"""Invariants of the memory model, checked with hypothesis.

Stated exactly: model-state bytes of the largest stage do not increase when tp, pp or the ZeRO
stage increases; a layer's activation bytes do not increase with the recompute level, nor with tp
when sequence parallelism is on. Total memory is not monotone in pp under 1F1B (the first stage
holds pp micro-batches of the embedding's activations), so that is not claimed."""

from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.enums import AttentionKind, MlpKind, Recompute, ZeroStage
from cost_models.memory import transformer_layer_activation_bytes
from planner.core.candidates import Candidates
from planner.costing.evaluate import evaluate
from planner.costing.layout import uniform_layout
from planner.core.problem import Problem
from planner.inputs.loader import load_cluster, load_framework
from planner.schemas.model_file import TransformerShorthand

ORDER = (Recompute.FULL, Recompute.SELECTIVE, Recompute.NONE)


@settings(max_examples=200, deadline=None)
@given(s=st.integers(1, 8192), b=st.integers(1, 16), heads=st.sampled_from([4, 8, 16, 32]),
       head_dim=st.sampled_from([32, 64, 128]), ffn_mult=st.integers(1, 8),
       t=st.sampled_from([1, 2, 4]), sp=st.booleans(), swiglu=st.booleans(),
       flash=st.booleans(), dropout=st.booleans())
def test_more_recompute_never_increases_activations(s, b, heads, head_dim, ffn_mult, t, sp,
                                                    swiglu, flash, dropout):
    h = heads * head_dim
    values = [transformer_layer_activation_bytes(
        seq_len=s, micro_batch=b, hidden=h, num_heads=heads, num_kv_heads=heads,
        head_dim=head_dim, ffn_hidden=ffn_mult * h,
        mlp=MlpKind.SWIGLU if swiglu else MlpKind.GELU,
        attention=AttentionKind.FLASH if flash else AttentionKind.UNFUSED, dropout=dropout,
        tp=t, sequence_parallel=sp, recompute=rc) for rc in ORDER]
    assert values[0] <= values[1] <= values[2]


@settings(max_examples=200, deadline=None)
@given(s=st.integers(1, 8192), b=st.integers(1, 16), rc=st.sampled_from(ORDER),
       flash=st.booleans())
def test_tp_never_increases_activations_with_sequence_parallelism(s, b, rc, flash):
    values = [transformer_layer_activation_bytes(
        seq_len=s, micro_batch=b, hidden=1024, num_heads=16, num_kv_heads=16, head_dim=64,
        ffn_hidden=4096, mlp=MlpKind.GELU,
        attention=AttentionKind.FLASH if flash else AttentionKind.UNFUSED, dropout=True,
        tp=t, sequence_parallel=True, recompute=rc) for t in (1, 2, 4, 8, 16)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def _problem():
    model = TransformerShorthand(name="p", num_layers=16, hidden=256, num_heads=16,
                                 vocab_size=1000, training={"seq_len": 256, "global_batch": 64})
    return Problem(model=model.to_model(), training=model.training,
                   cluster=load_cluster("dgx-a100-80gb"), num_gpus=64,
                   framework=load_framework("megatron"))


PROBLEM = _problem()


def _peak_states(tp, pp, zero, dp=4, mb=1):
    c = Candidates(tp=[tp], pp=[pp], vpp=[1], dp=[dp], mb=[mb], global_batch=[64], sp=[False],
                   recompute=[0], zero=[int(zero)], shard=[dp], overlap=[True], param_gather=[True],
                   tp_overlap=[False], dp_comm=[0],
                   num_servers=[dp])
    c = Candidates(**{k: __import__("numpy").array(v) for k, v in c.__dict__.items()})
    ev = evaluate(PROBLEM, uniform_layout(PROBLEM.model, pp, 1), c)
    return float((ev.stage_weights + ev.stage_gradients + ev.stage_optimizer).max())


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 8]),
       zero=st.sampled_from(list(ZeroStage)))
def test_model_states_do_not_increase_with_tp_pp_or_zero(tp, pp, zero):
    base = _peak_states(tp, pp, zero)
    if tp < 16:
        assert _peak_states(tp * 2, pp, zero) <= base
    if pp < 16:
        assert _peak_states(tp, pp * 2, zero) <= base
    if zero < ZeroStage.PARAMETERS:
        assert _peak_states(tp, pp, ZeroStage(zero + 1)) <= base
