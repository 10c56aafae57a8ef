"""CP-SAT encodings of the per-stage terms a `ChainCosts` carries beyond its linear part.

The balancer's model (`balance.balance`) has cut variables cut[0..K] (chunk k holds blocks
cut[k]:cut[k + 1]) and per-cut prefix sums of per-block weights. Each term becomes an integer
expression per stage, added to that stage's time or memory constraint:

- `Linear`: prefix sums for its per-block parts; an element constraint on the cut after a
  chunk for its chunk-end parts (constant where every block a chunk may end with has the same).
- `Term`: a variable z >= every piece of the option chosen (one Boolean per option), so that
  at the optimum z is the least over options of the largest piece, as `stage_terms` defines
  it; a gate is a Boolean forced on where a chunk of the stage meets a gated block.
- `Peak`: z >= the value of every run of blocks a chunk of the stage meets.
- A term scaled by min(cap, layers) / layers (offloaded layers priced at the stage's average
  layer) is not linear: time takes the lesser of two upper bounds (the unscaled term, cap times
  the dearest layer), memory the least share a stage can offload (cap layers at the cheapest
  layer and chunk). Both are exact for identical layers (memory: with one chunk per stage) and
  otherwise on the safe side; `exact` then turns false.

Times are integer nanoseconds (rounded to nearest), memory KiB rounded up, as the linear part.
"""

from __future__ import annotations

import math

import numpy as np
from ortools.sat.python import cp_model

from planner.costing.stage_costs import ChainCosts
from planner.costing.stage_terms import Linear, Peak, Term, min_parts

_PARTS = ("block", "in_flight", "end", "end_in_flight", "final")


def _int(value: float, unit: float, up: bool) -> int:
    return math.ceil(value / unit) if up else int(round(value / unit))


def _row(part) -> np.ndarray | None:
    return None if part is None else np.asarray(part, dtype=float)[0]


class TermEncoder:
    """Adds the terms of one chain to a CP-SAT model over its cuts."""

    def __init__(self, model: cp_model.CpModel, costs: ChainCosts, cuts: list,
                 runs: list[tuple[int, int]], prefix, layers_at: list, allowed: list[int]) -> None:
        self.model, self.costs, self.cuts, self.runs, self.prefix = model, costs, cuts, runs, prefix
        self.layers_at, self.allowed = layers_at, allowed
        self.p, self.v = costs.pp, costs.vpp
        self.num_chunks = self.p * self.v
        self.n = len(costs.block_time_s)
        self.is_layer = np.array(costs.is_layer, dtype=bool)
        self.exact = True
        """The encoding equals `ChainCosts.stage_totals` (up to the integer units)."""
        self._sums: dict = {}
        self._elements: dict = {}
        self._below: dict = {}
        self._above: dict = {}
        self._names = 0

    def _name(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}[{self._names}]"

    # ---- building blocks
    def _chunks(self, r: int) -> list[tuple[int, int]]:
        """(chunk of stage r, global chunk index k)."""
        return [(c, c * self.p + r) for c in range(self.v)]

    def _prefix_sums(self, per_block: np.ndarray, unit: float, up: bool) -> list:
        weights = [_int(per_block[start], unit, up) for start, _ in self.runs]
        key = tuple(weights)
        if key not in self._sums:
            self._sums[key] = self.prefix.sums(weights, self._name("sum"))
        return self._sums[key]

    def _at_cut(self, cut: int, per_block: np.ndarray, unit: float, up: bool):
        """The value of the block just before cut `cut` (the one ending the chunk before it):
        a constant where all allowed cut positions give the same, else an element."""
        values = {x: _int(per_block[x - 1], unit, up) for x in self.allowed}
        if len(set(values.values())) == 1:
            return next(iter(values.values()))
        table = [values.get(x, 0) for x in range(self.n + 1)]
        key = (cut, tuple(table))
        if key not in self._elements:
            var = self.model.new_int_var(min(table), max(table), self._name("end"))
            self.model.add_element(self.cuts[cut], table, var)
            self._elements[key] = var
        return self._elements[key]

    def _meets(self, k: int, start: int, length: int) -> list:
        """Literals whose conjunction holds whenever chunk k meets blocks [start, start +
        length): cut[k] < start + length and cut[k + 1] > start (each literal is forced true
        when its condition holds; the model may only lose by setting one otherwise)."""
        lits = []
        end = start + length
        if k > 0:
            key = (k, end)
            if key not in self._below:
                lit = self.model.new_bool_var(self._name("below"))
                self.model.add(self.cuts[k] >= end).only_enforce_if(lit.Not())
                self._below[key] = lit
            lits.append(self._below[key])
        if k + 1 < self.num_chunks:
            key = (k + 1, start)
            if key not in self._above:
                lit = self.model.new_bool_var(self._name("above"))
                self.model.add(self.cuts[k + 1] <= start).only_enforce_if(lit.Not())
                self._above[key] = lit
            lits.append(self._above[key])
        return lits

    def _layers_on(self, r: int):
        return sum(self.layers_at[k + 1] - self.layers_at[k] for _, k in self._chunks(r))

    # ---- terms
    def linear(self, x: Linear, r: int, unit: float, up: bool):
        """Stage r's value of a one-row `Linear`, as an integer expression."""
        const = np.broadcast_to(np.asarray(x.const, dtype=float).reshape(1, -1), (1, self.p))
        expr = _int(float(const[0, r]), unit, up)
        flight = self.costs.in_flight[r]
        for part, weighted in ((_row(x.block), False), (_row(x.in_flight), True)):
            if part is None:
                continue
            sums = self._prefix_sums(part, unit, up)
            expr += sum((flight[c] if weighted else 1) * (sums[k + 1] - sums[k])
                        for c, k in self._chunks(r))
        for part, weighted in ((_row(x.end), False), (_row(x.end_in_flight), True)):
            if part is None:
                continue
            expr += sum((flight[c] if weighted else 1) * self._at_cut(k + 1, part, unit, up)
                        for c, k in self._chunks(r) if k < self.num_chunks - 1)
        final = _row(x.final)
        if final is not None and self.num_chunks > 1 and r == (self.num_chunks - 1) % self.p:
            expr += self._at_cut(self.num_chunks - 1, final, unit, up)
        return expr

    def bound(self, x, unit: float) -> int:
        """An integer no stage's value of x exceeds in absolute value."""
        if isinstance(x, Peak):
            return math.ceil(float(np.abs(x.value).max(initial=0.0)) / unit) + 1
        if isinstance(x, Term):
            scale = float(np.max(np.abs(np.asarray(x.scale, dtype=float))))
            return max(self.bound(piece * scale, unit) for option in x.options
                       for piece in option)
        flight = max(max(row) for row in self.costs.in_flight)
        total = float(np.max(np.abs(np.asarray(x.const, dtype=float)), initial=0.0))
        for f, factor in (("block", 1), ("in_flight", flight), ("end", self.num_chunks),
                          ("end_in_flight", self.num_chunks * flight), ("final", 1)):
            part = _row(getattr(x, f))
            if part is not None:
                total += factor * (np.abs(part).sum() if f in ("block", "in_flight")
                                   else np.abs(part).max(initial=0.0))
        return math.ceil(total / unit) + self.n + 1

    def encode(self, x, r: int, unit: float, up: bool):
        """Stage r's value of a term, as an integer expression."""
        if isinstance(x, Linear):
            return self.linear(x, r, unit, up)
        if isinstance(x, Peak):
            return self._peak(x, r, unit, up)
        if x.cap is not None:
            return self._capped(x, r, unit, up)
        return self._options(x, r, unit, up)

    def _options(self, x: Term, r: int, unit: float, up: bool):
        scale = float(np.asarray(x.scale, dtype=float).reshape(-1)[0])
        assert scale >= 0 or (len(x.options) == 1 and len(x.options[0]) == 1)
        options = []
        for option in x.options:
            pieces = {}
            for piece in option:
                expr = self.linear(piece * scale, r, unit, up)
                pieces[str(expr)] = expr
            key = tuple(sorted(pieces))
            if key not in [k for k, _ in options]:
                options.append((key, list(pieces.values())))
        hi = self.bound(x, unit)
        z = self.model.new_int_var(-hi, hi, self._name("term"))
        gate = []
        if x.gate is not None:
            # Zero on a stage without a gated block: a Boolean forced on by any chunk that
            # meets one (gated terms are non-negative).
            on = self.model.new_bool_var(self._name("gate"))
            gated = [(s, length) for s, length in self.runs if x.gate[s]]
            for _, k in self._chunks(r):
                for start, length in gated:
                    lits = self._meets(k, start, length)
                    self.model.add_bool_or([on] + [lit.Not() for lit in lits])
            self.model.add(z >= 0)
            gate = [on]
        if len(options) == 1:
            for expr in options[0][1]:
                self.model.add(z >= expr).only_enforce_if(gate)
            return z
        # Redundant, for the linear relaxation: each piece's least over the options, taken
        # part by part (every part multiplies a non-negative count), is below the term.
        if len({len(option) for option in x.options}) == 1:
            for q in range(len(x.options[0])):
                least = min_parts([option[q] for option in x.options]) * scale
                self.model.add(z >= self.linear(least, r, unit, up)).only_enforce_if(gate)
        chosen = [self.model.new_bool_var(self._name("option")) for _ in options]
        self.model.add_exactly_one(chosen)
        for lit, (_, pieces) in zip(chosen, options):
            for expr in pieces:
                self.model.add(z >= expr).only_enforce_if([lit] + gate)
        return z

    def _peak(self, x: Peak, r: int, unit: float, up: bool):
        value = x.value[0]
        runs = [(start, length, _int(value[start], unit, up)) for start, length in self.runs]
        # Every stage holds a layer: the least layer's value is there in any layout.
        base = min(w for start, _, w in runs if self.is_layer[start])
        z = self.model.new_int_var(base, max(w for _, _, w in runs), self._name("peak"))
        for _, k in self._chunks(r):
            for start, length, w in runs:
                if w > base:
                    self.model.add(z >= w).only_enforce_if(self._meets(k, start, length))
        return z

    def _capped(self, x: Term, r: int, unit: float, up: bool):
        cap = float(np.asarray(x.cap).reshape(-1)[0])
        scale = float(np.asarray(x.scale, dtype=float).reshape(-1)[0])
        assert len(x.options) == 1 and x.gate is None
        pieces = x.options[0]
        layers = self.is_layer
        if scale < 0:
            # Memory less the offloaded activations: min(cap, n_r) / n_r of the stage's layers'
            # in-flight bytes are at least min(cap, n_r) layers at the cheapest layer and chunk.
            (piece,) = pieces
            assert all(getattr(piece, f) is None for f in ("block", "end", "end_in_flight",
                                                          "final"))
            act = _row(piece.in_flight) * -scale
            flight = self.costs.in_flight[r]
            least = float(act[layers].min()) * min(flight)
            per_layer = math.floor(least / unit)
            count = self.model.new_int_var(0, int(cap), self._name("offloaded"))
            self.model.add_min_equality(count, [int(cap), self._layers_on(r)])
            if len(set(act[layers])) > 1 or len(set(flight)) > 1:
                self.exact = False
            z = self.model.new_int_var(-int(cap) * per_layer, 0, self._name("to_host"))
            self.model.add(z >= -per_layer * count)
            return z
        # Time: at most the unscaled term (the share is at most 1), and at most cap layers at
        # the dearest layer's largest piece.
        assert scale >= 0
        exact = True
        dearest = 0.0
        for piece in pieces:
            block = _row(piece.block)
            assert block is not None and not np.any(block[~layers]) and all(
                getattr(piece, f) is None for f in ("in_flight", "end", "end_in_flight", "final"))
            assert np.all(np.asarray(piece.const) == 0)
            dearest = max(dearest, float(block[layers].max()) * scale)
            exact &= len(set(block[layers])) == 1
        self.exact &= exact
        hi = self.bound(x, unit)
        z = self.model.new_int_var(0, hi, self._name("offload"))
        whole = self.model.new_bool_var(self._name("whole"))
        for piece in pieces:
            self.model.add(z >= self.linear(piece * scale, r, unit, up)).only_enforce_if(whole)
        self.model.add(z >= _int(cap * dearest, unit, up)).only_enforce_if(whole.Not())
        return z
