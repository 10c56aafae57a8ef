"""The Python API (`planner.plan`, `validate`, `evaluate`): the objects the CLI prints as
JSON, the planner's own errors, and an import that stays light."""

import json
import subprocess
import sys

import pytest

import planner
from planner.schemas.output import PlanOutput, ValidateOutput
from planner.schemas.report import PlanReport
from planner.schemas.strategy import Strategy
from tests.cli.test_inputs_commands import conforms

MODEL, CLUSTER = "llama2-7b", "dgx-h100"
STRATEGY = "tp: 2\npp: 2\nmicro_batch: 1\n"


def test_import_planner_loads_no_heavy_package():
    code = ("import sys, planner; print(' '.join(sorted({m.split('.')[0] "
            "for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert not {"numpy", "pydantic", "ortools", "click", "rich"} & set(out.stdout.split())
    assert callable(planner.plan) and planner.__version__


def test_plan_returns_what_plan_json_prints(cli):
    result = planner.plan(MODEL, CLUSTER, gpus=16, tokens=1e12, top=2, zero=(1,),
                          seq_len=2048)
    assert isinstance(result, PlanOutput) and isinstance(result.best, PlanReport)
    code, out, _ = cli("plan", MODEL, CLUSTER, "--gpus", "16", "--tokens", "1T", "--top", "2",
                       "--zero", "1", "--seq-len", "2048", "--json")
    assert code == 0
    assert json.loads(out) == result.model_dump(
        mode="json", exclude={"search": {"seconds"}, "targets": True, "dp_comm": True})
    assert result.search.seconds is None                 # same input, same object


def test_validate_takes_a_file_or_an_object(cli, write):
    path = write("strategy.yaml", STRATEGY)
    by_file = planner.validate(MODEL, CLUSTER, path, gpus=16, compare=False)
    assert isinstance(by_file, ValidateOutput) and by_file.valid
    code, out, _ = cli("validate", MODEL, CLUSTER, path, "--gpus", "16", "--no-compare",
                       "--json")
    assert code == 0 and json.loads(out) == by_file.model_dump(mode="json")
    by_dict = planner.validate(MODEL, CLUSTER, {"tp": 2, "pp": 2, "micro_batch": 1}, gpus=16,
                               compare=False)
    by_object = planner.validate(MODEL, CLUSTER, Strategy(tp=2, pp=2, micro_batch=1),
                                 gpus=16, compare=False)
    assert by_dict.file == by_object.file == "<strategy>"
    assert by_dict.model_dump(exclude={"file"}) == by_file.model_dump(exclude={"file"})
    assert by_object == by_dict


def test_validate_reports_broken_rules_without_raising():
    report = planner.validate(MODEL, CLUSTER, {"tp": 3}, gpus=12, compare=False)
    assert not report.valid
    assert any(v.rule == "tp_divides_heads" for v in report.violations)


def test_evaluate_is_the_memory_commands_report(cli, write):
    path = write("strategy.yaml", STRATEGY)
    report = planner.evaluate(MODEL, CLUSTER, path, gpus=16)
    code, out, _ = cli("memory", MODEL, CLUSTER, path, "--gpus", "16", "--json")
    printed = json.loads(out)
    assert code == 0 and printed["stages"] == report.model_dump(mode="json")["memory"]["stages"]
    assert printed["strategy"] == report.model_dump(mode="json")["strategy"]
    assert planner.evaluate(MODEL, CLUSTER, {"tp": 2, "pp": 2, "micro_batch": 1},
                            gpus=16) == report
    with_tokens = planner.evaluate(MODEL, CLUSTER, path, gpus=16, tokens=1e12)
    assert with_tokens.throughput.time_to_train_s == pytest.approx(
        1e12 / report.throughput.tokens_per_s)


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: planner.plan("llama2-70", CLUSTER), planner.InputError, "did you mean 'llama2-70b'"),
    (lambda: planner.plan(MODEL, CLUSTER, seq_len=0), planner.InputError,
     "--seq-len: must be at least 1 (got 0)"),
    (lambda: planner.plan(MODEL, CLUSTER, gpu_hour_price=2), planner.InputError,
     "--gpu-hour-price: give --tokens too"),
    (lambda: planner.plan(MODEL, CLUSTER, recompute_modules=["bogus"]), planner.InputError,
     "--recompute-modules: 'bogus' is not one of"),
    (lambda: planner.plan("llama3-405b", CLUSTER, gpus=8), planner.InfeasibleError,
     "satisfies memory_fits"),
    (lambda: planner.evaluate(MODEL, CLUSTER, {"tp": "two"}, gpus=8), planner.InputError,
     "<strategy>: tp"),
    (lambda: planner.validate(MODEL, CLUSTER, {"tp": 2}, gpus=8, tpp=2), TypeError, "tpp"),
])
def test_errors_are_the_planners(call, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def _schema():
    from planner.inputs.file_schema import file_schema

    schema = file_schema("report")
    return schema, schema["$defs"]


def test_report_schema_describes_plan_and_validate_json(cli, write):
    schema, defs = _schema()
    code, out, _ = cli("schema", "report")
    assert code == 0 and json.loads(out) == schema
    code, plan_json, _ = cli("plan", MODEL, CLUSTER, "--gpus", "16", "--top", "1",
                             "--dp-comm", "both", "--json")
    assert code == 0 and conforms(schema, json.loads(plan_json), defs)
    path = write("strategy.yaml", STRATEGY)
    code, validate_json, _ = cli("validate", MODEL, CLUSTER, path, "--gpus", "16", "--json")
    assert code == 0 and conforms(schema, json.loads(validate_json), defs)
    plan_output = defs["PlanOutput"]
    assert {"plans", "search", "notes", "params"} <= set(plan_output["required"])
    assert not conforms(schema, {"model": MODEL}, defs)
