"""The planner: choose data, tensor and pipeline parallelism for large-model training.

As a library::

    import planner

    result = planner.plan("llama2-7b", "dgx-h100", gpus=64, tokens=1e12)
    best = result.plans[0]                       # a PlanReport, as `planner plan --json`
    print(best.strategy.tp, best.strategy.pp, best.time.step_s)

    report = planner.validate("llama2-7b", "dgx-h100", {"tp": 2, "pp": 2}, gpus=16)
    print(report.valid, [v.message for v in report.violations])

    plan = planner.evaluate("llama2-7b", "dgx-h100", {"tp": 2, "pp": 2}, gpus=16)
    print(plan.memory.peak_bytes / 2**30, "GiB")

Each returns the pydantic objects whose JSON `planner plan|validate --json` print
(`planner.schemas.output.PlanOutput`, `ValidateOutput`; `planner.schemas.report.PlanReport`)
and takes the command line's options as keyword arguments (`--seq-len` is `seq_len`). Bad
input raises `InputError`, a search where nothing fits `InfeasibleError`. Importing this
package loads nothing else (no numpy, pydantic or OR-Tools): the functions import
`planner.api` when first called.
"""

import os as _os

# One BLAS thread, set before numpy loads. The cost models multiply small matrices (thousands
# of candidates by tens of block types), where OpenBLAS's threads cost far more than they give
# (3,204 x 6 by 6 x 32: 0.1 ms on one thread, 1.7 ms on two of a busy 2-core machine; the
# deepseek-v3 search on 1,024 H100 took 20.6 s instead of 13.5 s), and a threaded BLAS may sum
# in an order that depends on the machine's core count: same input, same bytes, anywhere.
for _name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ[_name] = "1"

__version__ = "0.1.0"

__all__ = ["InfeasibleError", "InputError", "__version__", "evaluate", "plan", "validate"]


def __getattr__(name: str):
    """planner.InputError and planner.InfeasibleError, from `planner.errors` when first asked
    for (so that importing a subpackage loads nothing beside it)."""
    if name in ("InputError", "InfeasibleError"):
        from planner import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'planner' has no attribute {name!r}")


def plan(model, cluster, *, gpus=None, **options):
    """The fastest strategies that fit `model` on `cluster`, ranked: a `PlanOutput`
    (`planner plan --json`). See `planner.api.plan` for the options."""
    from planner import api

    return api.plan(model, cluster, gpus=gpus, **options)


def validate(model, cluster, strategy, *, gpus=None, **options):
    """Every rule `strategy` (a config file path, a `Strategy` or a mapping of
    strategy.yaml's keys) breaks, its memory, time and throughput, and how far it is from the
    best plan: a `ValidateOutput` (`planner validate --json`). See `planner.api.validate`."""
    from planner import api

    return api.validate(model, cluster, strategy, gpus=gpus, **options)


def evaluate(model, cluster, strategy, *, gpus=None, **options):
    """Memory per stage, step time and throughput of one strategy (a strategy.yaml path, a
    `Strategy` or a mapping), without the rules: a `PlanReport`. See `planner.api.evaluate`."""
    from planner import api

    return api.evaluate(model, cluster, strategy, gpus=gpus, **options)
