"""torchtitan's loss on the last stage's peak memory: PyTorch's eager cross entropy holds two
more fp32 copies of the logits than the kept log-probabilities (12 bytes per logit, measured
by bench/torch_loss_memory.py); compiled, or in Megatron's fused loss, only those are kept.
A plain PyTorch script under torchrun (Hugging Face's loss) also holds the bf16 logits."""

from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.memory import eager_cross_entropy_working_bytes
from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem
from planner.schemas.strategy import Strategy

STRATEGY = Strategy(dp=8, tp=1, pp=1, micro_batch=2, global_batch=16, zero_stage=3,
                    recompute="full")


VOCAB = 128256    # Llama 3's


def _peak(framework, *, compile=None, compile_loss=None, **profile):
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8, framework=framework)
    run = {k: v for k, v in (("compile", compile), ("compile_loss", compile_loss))
           if v is not None}
    if run:
        problem = replace(problem, training=problem.training.model_copy(update=run))
    if profile:
        problem = replace(problem, framework=problem.framework.model_copy(update=profile))
    return evaluate_strategy(problem, STRATEGY).memory.peak_bytes, problem


def test_eager_torchtitan_loss_adds_two_fp32_copies_of_the_logits():
    compiled, problem = _peak("torchtitan", compile=True)
    eager, _ = _peak("torchtitan", compile=False)
    extra = eager_cross_entropy_working_bytes(seq_len=problem.training.seq_len, micro_batch=2,
                                              vocab_size=VOCAB, tp=1)
    assert extra == 8 * problem.training.seq_len * 2 * VOCAB
    # With full recompute the layers keep their inputs either way: the peak moves from a
    # layer's recompute working set (a few percent of the loss's copies) to the loss's.
    assert 0.85 * extra < eager - compiled <= extra


def test_a_loss_left_eager_in_a_compiled_run_peaks_as_eager():
    compiled, _ = _peak("torchtitan", compile=True)
    left_eager, _ = _peak("torchtitan", compile=True, compile_loss=False)
    eager, _ = _peak("torchtitan", compile=False)
    assert left_eager > compiled
    assert left_eager == pytest.approx(eager, rel=0.02)


def test_megatrons_fused_loss_has_no_eager_copies():
    fused, _ = _peak("megatron")
    flagged, _ = _peak("megatron", compile_loss=False, torch_cross_entropy=True)
    assert flagged > fused


def test_the_run_says_whether_its_loss_compiles():
    compiled, _ = _peak("torchtitan", compile=True)
    eager, _ = _peak("torchtitan", compile=False)
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8, framework="torchtitan")
    left = replace(problem, training=problem.training.model_copy(
        update={"compile": True, "compile_loss": False}))
    only_loss = replace(problem, training=problem.training.model_copy(
        update={"compile": False, "compile_loss": True}))
    assert left.eager_loss and not only_loss.eager_loss and not problem.eager_loss
    assert evaluate_strategy(left, STRATEGY).memory.peak_bytes == pytest.approx(eager, rel=0.02)
    assert evaluate_strategy(only_loss, STRATEGY).memory.peak_bytes < eager


def test_compile_loss_on_megatron_has_no_effect_and_says_so(tmp_path):
    zoo = Path(__file__).resolve().parents[2] / "model_zoo" / "llama3-8b.yaml"
    model = tmp_path / "model.yaml"
    model.write_text(zoo.read_text().replace("  optimizer: adam\n",
                                             "  optimizer: adam\n  compile_loss: false\n"))
    noted = make_problem(str(model), "dgx-h100", gpus=8, framework="megatron")
    assert any("compile_loss false has no effect" in n for n in noted.notes)
    assert not noted.eager_loss
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8, framework="megatron")
    flagged = replace(problem, training=problem.training.model_copy(
        update={"compile_loss": False}))
    assert not flagged.eager_loss
    assert evaluate_strategy(flagged, STRATEGY).memory.peak_bytes == \
        evaluate_strategy(problem, STRATEGY).memory.peak_bytes


def test_a_plan_with_an_eager_loss_says_what_it_costs():
    from planner import api
    eager = api.plan("llama3-8b", "dgx-h100", gpus=8, framework="torchtitan", compile=False,
                     top=1)
    best = eager.plans[0].strategy
    extra = eager_cross_entropy_working_bytes(seq_len=8192 / best.cp,
                                              micro_batch=best.micro_batch, vocab_size=VOCAB,
                                              tp=best.tp)
    assert any(n.startswith("the loss runs eager") and f"{extra / 2**30:.1f} GiB" in n
               for n in eager.notes)
    assert eager.eager_loss
    compiled = api.plan("llama3-8b", "dgx-h100", gpus=8, framework="torchtitan", top=1)
    assert not any(n.startswith("the loss runs eager") for n in compiled.notes)
    assert not compiled.eager_loss


def test_a_script_holding_its_logits_keeps_them_beside_the_eager_loss():
    # A PyTorch script under torchrun (Hugging Face's CausalLMOutputWithPast) holds the bf16
    # logits through the backward: 2 bytes per logit more than torchtitan, which deletes
    # them, beside the eager loss's 8 (bench/torch_loss_memory.py: 14.0 at the peak).
    from cost_models.memory import returned_logits_bytes
    held, problem = _peak("torchrun")
    dropped, _ = _peak("torchrun", loss_keeps_logits=False)
    assert problem.framework.loss_keeps_logits and problem.eager_loss
    logits = returned_logits_bytes(seq_len=problem.training.seq_len, micro_batch=2,
                                   vocab_size=VOCAB, tp=1)
    assert logits == 2 * problem.training.seq_len * 2 * VOCAB
    # The peak adds the allocator's fragmentation share of what it hands out.
    frag = problem.cluster.reserve.fragmentation_fraction
    assert held - dropped == pytest.approx(logits * (1 + frag), rel=1e-9)
