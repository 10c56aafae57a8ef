"""Per-stage costs as functions of what a pipeline stage holds: the one description that
`evaluate` sums for a given layout and the layout balancer optimises over.

A layout cuts the model chain into K = pp * vpp chunks; chunk k runs on stage r = k % pp as
that stage's chunk c = k // pp and holds in_flight[r, c] micro-batches at the stage's peak.
Every per-stage time and memory of `evaluate` is a sum of three kinds of term:

- `Linear`: a constant per stage, plus a value per block the stage holds, plus a value per block
  times its chunk's micro-batches in flight, plus a value for the block that ends each chunk
  (what crosses a stage boundary), plus one for the block that ends the second-to-last chunk
  on the last chunk's stage (what the last chunk receives).
- `Term`: the least over options of the largest over pieces, each piece `Linear` (a collective
  run by the fastest of NCCL's protocols, then hidden behind compute as far as it goes); zero
  on a stage holding no block of its `gate` (expert traffic on a stage without experts); scaled
  by min(cap, layers) / layers (a fixed number of a stage's layers offloaded, priced at the
  stage's average layer).
- `Peak`: the largest of a per-block value over the blocks a stage holds (the working set of
  the largest recomputed block).

Arrays are per candidate (N rows) and per block type (U columns): `evaluate` takes the distinct
blocks of the chain as types; the balancer takes one candidate and every chain position as its
own type. `Occupancy` says what each chunk holds; `stage_values` is the one interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


def _col(x):
    """A per-candidate (N,) array as a column (N, 1); scalars stay scalars."""
    x = np.asarray(x, dtype=float)
    return x[:, None] if x.ndim == 1 else x


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _scale(a, factor):
    return None if a is None else a * factor


_PARTS = ("block", "in_flight", "end", "end_in_flight", "final")


@dataclass(frozen=True)
class Linear:
    """A per-stage quantity linear in what the stage holds (see the module docstring).

    const: (N, p), (N, 1) or a scalar; the rest (N, U) or None (zero): `block` per block the
    stage holds; `in_flight` per block times its chunk's micro-batches in flight; `end` of the
    block ending each chunk but the last (a stage boundary; `end_in_flight` times the chunk's
    micro-batches in flight); `final` of the block ending chunk K - 2, on the stage of chunk
    K - 1 (its receive).
    """

    const: object = 0.0
    block: np.ndarray | None = None
    in_flight: np.ndarray | None = None
    end: np.ndarray | None = None
    end_in_flight: np.ndarray | None = None
    final: np.ndarray | None = None

    __array_ufunc__ = None       # numpy arrays times a Linear defer to Linear.__rmul__

    def __add__(self, other) -> Linear:
        """Plus another `Linear`, or a constant (a scalar or an (N, 1) or (N, p) array)."""
        if not isinstance(other, Linear):
            other = Linear(const=np.asarray(other, dtype=float))
        return Linear(_add(self.const, other.const),
                      *(_add(getattr(self, f), getattr(other, f)) for f in _PARTS))

    __radd__ = __add__

    def __mul__(self, factor) -> Linear:
        """Times a scalar or a per-candidate (N,) array."""
        f = _col(factor)
        return Linear(self.const * f, *(_scale(getattr(self, name), f) for name in _PARTS))

    __rmul__ = __mul__

    def __truediv__(self, divisor) -> Linear:
        return self * (1.0 / np.asarray(divisor, dtype=float))

    def __neg__(self) -> Linear:
        return self * -1.0

    def __sub__(self, other: Linear) -> Linear:
        return self + (-other)

    def take(self, rows) -> Linear:
        const = self.const
        if np.ndim(const) == 2:
            const = const[rows]
        return Linear(const, *(None if getattr(self, f) is None else getattr(self, f)[rows]
                               for f in _PARTS))

    def columns(self, index) -> Linear:
        """The same quantity over other columns: column j is column index[j] of this one
        (block types -> chain positions)."""
        return Linear(self.const, *(None if getattr(self, f) is None else getattr(self, f)[:, index]
                                    for f in _PARTS))


@dataclass(frozen=True)
class Term:
    """`scale` x the least over `options` of the largest of each option's pieces; zero on a
    stage that holds no block where `gate` is true; times min(cap, layers) / layers with
    `cap` (N,) layers."""

    options: tuple[tuple[Linear, ...], ...]
    gate: np.ndarray | None = None
    """(U,) bool, or None: no gate."""
    cap: np.ndarray | None = None
    """(N,) layers of the stage the term prices (the rest of its layers cost nothing), or
    None: no scaling."""
    scale: object = 1.0
    """A scalar or (N,) factor on the whole term (negative: a term that is subtracted)."""

    __array_ufunc__ = None

    def __mul__(self, factor) -> Term:
        """Times a scalar or (N,) array."""
        return replace(self, scale=self.scale * np.asarray(factor, dtype=float))

    __rmul__ = __mul__

    def take(self, rows) -> Term:
        return Term(tuple(tuple(p.take(rows) for p in o) for o in self.options), self.gate,
                    None if self.cap is None else self.cap[rows],
                    self.scale[rows] if np.ndim(self.scale) else self.scale)

    def columns(self, index) -> Term:
        return replace(self, options=tuple(tuple(p.columns(index) for p in o)
                                           for o in self.options),
                       gate=None if self.gate is None else self.gate[index])


@dataclass(frozen=True)
class Peak:
    """The largest `value` (N, U) over the blocks a stage holds (0 for a stage holding none)."""

    value: np.ndarray

    __array_ufunc__ = None

    def __mul__(self, factor) -> Peak:
        """Times a non-negative scalar or (N,) array (the largest stays the largest)."""
        return Peak(self.value * _col(factor))

    __rmul__ = __mul__

    def take(self, rows) -> Peak:
        return Peak(self.value[rows])

    def columns(self, index) -> Peak:
        return Peak(self.value[:, index])


@dataclass(frozen=True)
class Occupancy:
    """What each chunk of a layout holds."""

    pp: int
    vpp: int
    counts: np.ndarray
    """(K, U): blocks of each type in chunk k; or (R, K, U), R occupancies at once (one per
    row of a one-row term: the balancer's tables)."""
    last: np.ndarray
    """(K,) or (R, K): the type of each chunk's last block."""
    is_layer: np.ndarray
    """(U,): the type is a repeated layer."""

    @property
    def stage_counts(self) -> np.ndarray:
        """(p, U) or (R, p, U): blocks of each type on each stage."""
        shape = self.counts.shape[:-2] + (self.vpp, self.pp, self.counts.shape[-1])
        return self.counts.reshape(shape).sum(-3)

    @property
    def rows(self) -> int | None:
        return self.counts.shape[0] if self.counts.ndim == 3 else None

    @classmethod
    def of_bounds(cls, pp: int, vpp: int, bounds, types: np.ndarray,
                  is_layer: np.ndarray) -> Occupancy:
        """The occupancy of chain cuts `bounds` (chunk k holds positions bounds[k]:bounds[k+1]),
        with position i of type types[i] over len(is_layer) types."""
        k = pp * vpp
        counts = np.zeros((k, len(is_layer)))
        for c in range(k):
            np.add.at(counts[c], types[bounds[c]:bounds[c + 1]], 1)
        last = np.array([types[max(bounds[c + 1] - 1, bounds[c])] for c in range(k)])
        return cls(pp, vpp, counts, last, np.asarray(is_layer, dtype=bool))


def by_stage(chunk_values: np.ndarray, pp: int, vpp: int) -> np.ndarray:
    """(N, K) per-chunk values -> (N, pp, vpp): chunk k = c * pp + r sits on stage r."""
    n = chunk_values.shape[0]
    return chunk_values.reshape(n, vpp, pp).transpose(0, 2, 1)


def _chunk_sums(part: np.ndarray, occ: Occupancy) -> np.ndarray:
    """(N, K) (or (R, K)): a per-type part summed over each chunk's blocks."""
    if occ.rows is None:
        return part @ occ.counts.T
    return np.einsum("ru,rku->rk", np.broadcast_to(part, (occ.rows, part.shape[1])), occ.counts)


def _at_last(part: np.ndarray, occ: Occupancy) -> np.ndarray:
    """(N, K) (or (R, K)): a per-type part at each chunk's last block."""
    if occ.rows is None:
        return part[:, occ.last]
    return np.take_along_axis(np.broadcast_to(part, (occ.rows, part.shape[1])), occ.last, 1)


def linear_values(x: Linear, occ: Occupancy, in_flight: np.ndarray) -> np.ndarray:
    """(N, p) values of a `Linear` in an occupancy ((R, p) for R occupancies and a one-row
    `Linear`); in_flight (N, p, v)."""
    p, v, k = occ.pp, occ.vpp, occ.pp * occ.vpp
    n = occ.rows or in_flight.shape[0]
    out = np.zeros((n, p)) + x.const
    if x.block is not None:
        out = out + by_stage(_chunk_sums(x.block, occ), p, v).sum(2)
    if x.in_flight is not None:
        out = out + (by_stage(_chunk_sums(x.in_flight, occ), p, v) * in_flight).sum(2)
    for ends, weighted in ((x.end, False), (x.end_in_flight, True)):
        if ends is None:
            continue
        sent = _at_last(ends, occ).copy()                            # (N, K)
        sent[:, -1] = 0.0                                            # the last chunk sends nothing
        sent = by_stage(sent, p, v)
        out = out + (sent * in_flight if weighted else sent).sum(2)
    if x.final is not None and k > 1:
        out[:, (k - 1) % p] += _at_last(x.final, occ)[:, k - 2]
    return out


def stage_values(x, occ: Occupancy, in_flight: np.ndarray) -> np.ndarray:
    """(N, p) values of a `Linear`, `Term` or `Peak` in an occupancy (or (R, p))."""
    if isinstance(x, Linear):
        return linear_values(x, occ, in_flight)
    held = occ.stage_counts                                          # (p, U) or (R, p, U)
    if isinstance(x, Peak):
        present = held > 0 if occ.rows is not None else (held > 0)[None]
        return (x.value[:, None, :] * present).max(2, initial=0.0)
    best = None
    for option in x.options:
        value = None
        for piece in option:
            v = linear_values(piece, occ, in_flight)
            value = v if value is None else np.maximum(value, v)
        best = value if best is None else np.minimum(best, value)
    if x.gate is not None:
        best = np.where(held[..., x.gate].sum(-1) > 0, best, 0.0)
    if x.cap is not None:
        layers = held[..., occ.is_layer].sum(-1)                      # (p,) or (R, p)
        best = best * np.minimum(_col(x.cap), layers) / np.maximum(layers, 1)
    return best * _col(x.scale)


def total_values(items, occ: Occupancy, in_flight: np.ndarray) -> np.ndarray:
    """(N, p) (or (R, p)): the sum of `stage_values` over items."""
    n = occ.rows or in_flight.shape[0]
    out = np.zeros((n, occ.pp))
    for x in items:
        out = out + stage_values(x, occ, in_flight)
    return out


def _nonnegative(piece: Linear) -> bool:
    return all(getattr(piece, f) is None or np.all(getattr(piece, f) >= 0) for f in _PARTS)


def min_parts(pieces: list[Linear]) -> Linear:
    """The elementwise least of the pieces' parts (absent parts are zero)."""
    def least(values):
        present = [x for x in values if x is not None]
        if not present:
            return None
        if len(present) < len(values):
            present.append(np.zeros_like(present[0]))
        out = present[0]
        for x in present[1:]:
            out = np.minimum(out, x)
        return out

    const = pieces[0].const
    for p in pieces[1:]:
        const = np.minimum(const, p.const)
    return Linear(const, *(least([getattr(p, f) for p in pieces]) for f in _PARTS))


def _pick(pieces: tuple[Linear, ...], index: np.ndarray) -> Linear:
    """Row i of piece index[i], for every row (absent parts are zero)."""
    rows = np.arange(len(index))

    def part(values):
        if all(v is None for v in values):
            return None
        like = next(v for v in values if v is not None)
        stacked = np.stack([np.zeros_like(like) if v is None else np.broadcast_to(v, like.shape)
                            for v in values])
        return stacked[index, rows]

    width = max(np.shape(p.const)[1] if np.ndim(p.const) == 2 else 1 for p in pieces)
    const = np.stack([np.broadcast_to(np.asarray(p.const, dtype=float), (len(index), width))
                      for p in pieces])
    return Linear(const[index, rows], *(part([getattr(p, f) for p in pieces]) for f in _PARTS))


def lower_linear(x, active=None) -> Linear:
    """A `Linear` no greater than the `Linear` or `Term` x on any stage (every part of a
    `Linear` multiplies a non-negative count, so an elementwise least of linear functions stays
    below their least): the term itself; for a term, the least over its options of one piece
    of each (a piece is below the largest): `active[o]` (N,) the piece of option o per row, else
    the first with no negative part. A gated term keeps that bound's parts for gated blocks
    and only the negative ones for the others, and drops its (non-negative) constant: on a
    stage without a gated block it is then at most the term's zero. Zero for a non-negative
    capped term (zero on some stage); for a subtracted capped term (an offloaded share of
    activations), the whole of its one piece."""
    if isinstance(x, Linear):
        return x
    if not isinstance(x, Term):
        raise TypeError(f"no linear lower bound for {type(x).__name__}")
    scale = np.asarray(x.scale, dtype=float)
    if np.all(scale <= 0):
        assert len(x.options) == 1 and len(x.options[0]) == 1 and _nonnegative(x.options[0][0])
        return x.options[0][0] * scale            # min(cap, layers) / layers is at most 1
    assert np.all(scale >= 0)
    if x.cap is not None:
        return Linear()
    if x.gate is not None:
        bound = lower_linear(replace(x, gate=None), active)
        if np.any(np.asarray(bound.const) < 0):
            return Linear()

        def gated(part):
            return None if part is None else np.where(x.gate, part, np.minimum(part, 0.0))

        return Linear(0.0, *(gated(getattr(bound, f)) for f in _PARTS))
    chosen = []
    for o, option in enumerate(x.options):
        if active is not None:
            chosen.append(_pick(option, active[o]))
        else:
            chosen.append(next(p for p in option if _nonnegative(p)))
    return min_parts(chosen) * scale


def active_pieces(x: Term, occ: Occupancy, in_flight: np.ndarray,
                  stage: np.ndarray) -> list[np.ndarray]:
    """Per option of a term, (N,) the index of its largest piece on each row's `stage` in an
    occupancy (where a linear lower bound of the term is best taken tight)."""
    rows = np.arange(in_flight.shape[0])
    return [np.argmax(np.stack([linear_values(p, occ, in_flight)[rows, stage] for p in option]),
                      axis=0) for option in x.options]
