"""Time the plan search from 8 to 16,384 GPUs (not a unit test; run it by hand).

    python bench/bench_search.py [--models gpt3-175b,llama3-405b,gpt-1t] [--cluster dgx-a100-80gb]
    python bench/bench_search.py --models deepseek-v3 --cluster dgx-h100 --gpus 1024,2048
    python bench/bench_search.py --models llama3-8b --cluster dgx-h100 --gpus 1000000 --repeat 1

Targets, on a 2-core machine, excluding interpreter start-up: under 1 s for gpt-1t on 3,072
GPUs and under 2 s on 16,384 GPUs (step-time issue); under 2 s for DeepSeek-V3 on 2,048 H100
with ep and etp in the space (MoE issue); under 10 s to refuse llama3-8b on a million GPUs
(its batch of 512 cannot split over them) with the counts and batches that would work. Each line is one `search` call: the
candidates in the space, those passing the rules, those priced (whose step bound can reach
the plans: `pool.evaluate_promising`), those left in the CP-SAT model, wall seconds, and the best plan (or why nothing fits, which takes longer: every
candidate is evaluated and larger GPU counts are tried).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.errors import InfeasibleError  # noqa: E402
from planner.inputs.loader import make_problem  # noqa: E402
from planner.search.solver import search  # noqa: E402

GPU_COUNTS = (8, 64, 512, 1024, 3072, 8192, 16384)
TARGETS_S = {("gpt-1t", 3072): 1.0, ("gpt-1t", 16384): 2.0, ("deepseek-v3", 2048): 2.0,
             ("llama3-8b", 1_000_000): 10.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt3-175b,llama3-405b,gpt-1t")
    parser.add_argument("--cluster", default="dgx-a100-80gb")
    parser.add_argument("--gpus", default=",".join(map(str, GPU_COUNTS)),
                        help="comma-separated GPU counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best counts")
    args = parser.parse_args()
    missed = []
    print(f"{'model':12s} {'GPUs':>6s} {'space':>7s} {'valid':>7s} {'priced':>7s} "
          f"{'model':>6s} {'seconds':>8s}  best plan")
    for name in args.models.split(","):
        for gpus in (int(g) for g in args.gpus.split(",")):
            problem = make_problem(name, args.cluster, gpus=gpus, nodes=max(1, gpus // 8))
            times, outcome = [], ""
            for _ in range(args.repeat):
                start = time.perf_counter()
                try:
                    result = search(problem)
                    s, plan = result.search, result.plans[0]
                    outcome = (f"{s.num_candidates:7d} {s.num_valid:7d} {s.num_evaluated:7d} "
                               f"{s.num_in_model:6d}",
                               f"{plan.strategy.dp}x{plan.strategy.tp}x{plan.strategy.pp} "
                               f"vpp {plan.strategy.vpp} ep {plan.strategy.ep} "
                               f"mb {plan.strategy.micro_batch} "
                               f"{plan.time.step_s:.2f} s/step MFU {plan.throughput.mfu:.1%}")
                except InfeasibleError as e:
                    outcome = (f"{'':7s} {'':7s} {'':7s} {'':6s}",
                               f"nothing fits ({e.details[-1].strip()})")
                times.append(time.perf_counter() - start)
            best = min(times)
            target = TARGETS_S.get((name, gpus))
            flag = "" if target is None else (f"  [target {target:g} s: "
                                              f"{'met' if best < target else 'MISSED'}]")
            if target is not None and best >= target:
                missed.append((name, gpus, best))
            print(f"{name:12s} {gpus:6d} {outcome[0]} {best:8.3f}  {outcome[1]}{flag}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
