"""Time the CP-SAT stage-layout balancer (not a unit test; run it by hand).

    python bench/bench_balance.py

Target (uneven-stages issue): a 1,000-block chain split into 64 stages in under a second.
The chains: a transformer stack (embedding, identical layers, norm, a heavy output layer)
under 1F1B and interleaved schedules, with and without a binding memory limit, and chains of
unlike blocks (dense and mixture-of-experts layers alternating; all blocks different), where
CP-SAT works on cut positions and proves optimality far more slowly.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.search.balance import ChainCosts, balance, stage_totals  # noqa: E402

US, KIB = 1e-6, 1024.0


def chain(times, states, acts, layers, *, pp: int, vpp: int, capacity=None) -> ChainCosts:
    in_flight = tuple(tuple(max(1, pp - r) + (vpp - 1 - c) for c in range(vpp))
                      for r in range(pp))
    return ChainCosts(pp, vpp, tuple(t * US for t in times), tuple(s * KIB for s in states),
                      tuple(a * KIB for a in acts), tuple(layers), (0.0,) * pp, (0.0,) * pp,
                      in_flight, capacity or 1e18)


def cases():
    n = 1000
    stack = ([20] + [100] * n + [5, 300], [400] + [120] * n + [1, 400],
             [10] + [30] * n + [5, 90], [False] + [True] * n + [False, False])
    yield "transformer, 1F1B", chain(*stack, pp=64, vpp=1)
    yield "transformer, vpp 4", chain(*stack, pp=64, vpp=4)
    free = chain(*stack, pp=64, vpp=1)
    _, memory = stage_totals(free, balance(free).bounds)
    yield "transformer, memory-bound", chain(*stack, pp=64, vpp=1,
                                             capacity=0.6 * max(memory))
    alternating = ([100 if i % 2 else 170 for i in range(n)],
                   [100 if i % 2 else 600 for i in range(n)],
                   [20 if i % 2 else 45 for i in range(n)], [True] * n)
    yield "dense/MoE alternating", chain(*alternating, pp=64, vpp=1)
    rng = random.Random(0)
    unlike = ([rng.randint(50, 200) for _ in range(n)], [rng.randint(10, 400) for _ in range(n)],
              [rng.randint(5, 60) for _ in range(n)], [True] * n)
    yield "all blocks different", chain(*unlike, pp=64, vpp=1)


def main() -> int:
    missed = False
    for name, costs in cases():
        start = time.perf_counter()
        result = balance(costs, work_limit=30)
        seconds = time.perf_counter() - start
        status = result.status if result else "no layout"
        target = "  [target 1 s: " + ("met]" if seconds < 1 else "MISSED]") \
            if name.startswith("transformer") else ""
        missed |= name.startswith("transformer") and seconds >= 1
        slowest = f"{result.max_stage_time_s * 1e3:.2f} ms" if result else "-"
        print(f"{name:28s} {len(costs.block_time_s):5d} blocks {costs.pp:3d} stages "
              f"x {costs.vpp}  {seconds:7.3f} s  {status:9s} slowest stage {slowest}{target}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
