"""The chain of one candidate strategy as the layout balancer sees it: `evaluate`'s own
per-stage terms (`stage_model`), for that candidate, over chain positions instead of block
types.

`evaluate` sums the terms of `stage_model` over what each stage holds in its layout; the
balancer (`planner.search.balance`) chooses the layout. `ChainCosts` carries the same terms,
split into their linear part (per block, per block times the micro-batches its chunk holds in
flight, per stage: what CP-SAT sums through prefix sums) and the rest (`time_terms`,
`memory_terms`: what a chunk's last block sends, data-parallel traffic hidden behind compute,
host copies, the recompute working set, offloaded activations). `ChainCosts.stage_totals` of a
layout is `evaluate`'s per-stage time and memory for that layout, to float rounding
(tests/search/test_chain_costs.py). The one exception is a block needing the word embedding (a
tied output layer, an MTP module) whose embedding could share its stage (a `layers:` file that
puts the embedding after the first layer or the block before the last): the balancer then
charges the embedding's copy on every layout, more than `evaluate` where the two share a stage,
never less.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models.pipeline import in_flight_per_chunk
from planner.costing.layout import Layout
from planner.core.problem import Problem
from planner.costing.stage_model import chain_types, stage_model
from planner.costing.stage_terms import Linear, Occupancy, Peak, stage_values
from planner.schemas.model import REPEATED_KINDS, EmbeddingBlock


@dataclass(frozen=True)
class ChainCosts:
    """The costs of one candidate strategy's chain of n blocks, in seconds and bytes.

    A stage's time per micro-batch is `stage_time_s` plus `block_time_s` of its blocks plus
    `time_terms`; its memory is `stage_bytes` plus `block_state_bytes` of its blocks plus, per
    chunk, its micro-batches in flight times `block_activation_bytes` of the chunk's blocks,
    plus `memory_terms` (`stage_terms` over chain positions: arrays of one row, n columns).
    """

    pp: int
    vpp: int
    block_time_s: tuple[float, ...]
    """Per block: compute and the collectives it runs per micro-batch (linear part)."""
    block_state_bytes: tuple[float, ...]
    """Per block: bytes of model states and buffers (with their share of fragmentation)."""
    block_activation_bytes: tuple[float, ...]
    """Per block: bytes of activations per micro-batch in flight (with fragmentation)."""
    is_layer: tuple[bool, ...]
    """Per block: a repeated layer (every chunk needs one)."""
    stage_time_s: tuple[float, ...]
    """Per stage: time that does not depend on the layout."""
    stage_bytes: tuple[float, ...]
    """Per stage: memory that does not depend on the layout."""
    in_flight: tuple[tuple[int, ...], ...]
    """[stage][chunk of that stage]: micro-batches whose activations it holds at its peak."""
    capacity_bytes: float
    time_terms: tuple = ()
    """`stage_terms.Linear`, `Term` or `Peak` over chain positions, added to each stage's time."""
    memory_terms: tuple = ()
    """The same, added to each stage's memory."""

    @property
    def num_chunks(self) -> int:
        return self.pp * self.vpp

    def occupancy(self, bounds) -> Occupancy:
        """What each chunk holds when chunk k is blocks[bounds[k]:bounds[k + 1]] (every chain
        position its own type)."""
        n = len(self.block_time_s)
        return Occupancy.of_bounds(self.pp, self.vpp, bounds, np.arange(n),
                                   np.array(self.is_layer, dtype=bool))

    @property
    def linear_time(self) -> Linear:
        return Linear(const=np.array(self.stage_time_s)[None, :],
                      block=np.array(self.block_time_s)[None, :])

    @property
    def linear_memory(self) -> Linear:
        return Linear(const=np.array(self.stage_bytes)[None, :],
                      block=np.array(self.block_state_bytes)[None, :],
                      in_flight=np.array(self.block_activation_bytes)[None, :])

    def totals(self, occ: Occupancy, columns=None, *,
               linear: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(time per stage, memory per stage) of an occupancy: (R, p) arrays, R = 1 or the
        occupancy's rows. `columns`: the chain position each of the occupancy's types stands
        for (None: every position its own type); `linear` False: the terms alone."""
        flight = np.array(self.in_flight, dtype=float)[None]
        rows = occ.rows or 1

        def on(x):
            return x if columns is None else x.columns(columns)

        time, memory = np.zeros((rows, self.pp)), np.zeros((rows, self.pp))
        if linear:
            time = time + stage_values(on(self.linear_time), occ, flight)
            memory = memory + stage_values(on(self.linear_memory), occ, flight)
        for term in self.time_terms:
            time = time + stage_values(on(term), occ, flight)
        for term in self.memory_terms:
            memory = memory + stage_values(on(term), occ, flight)
        return time, memory

    def stage_totals(self, bounds) -> tuple[list[float], list[float]]:
        """(time per stage, memory per stage) of a layout, in seconds and bytes."""
        time, memory = self.totals(self.occupancy(bounds))
        return [float(x) for x in time[0]], [float(x) for x in memory[0]]

    def position_keys(self) -> list[tuple]:
        """Per chain position, everything the costs say about it: positions with equal keys
        are interchangeable blocks."""
        columns = [self.block_time_s, self.block_state_bytes, self.block_activation_bytes,
                   self.is_layer]
        for term in (*self.time_terms, *self.memory_terms):
            columns.extend(_columns_of(term))
        return list(zip(*columns))


def _columns_of(x) -> list:
    """The per-position arrays of a one-row `Linear`, `Term` or `Peak`."""
    if isinstance(x, Peak):
        return [x.value[0]]
    if isinstance(x, Linear):
        return [getattr(x, f)[0] for f in ("block", "in_flight", "end", "end_in_flight", "final")
                if getattr(x, f) is not None]
    out = [] if x.gate is None else [x.gate]
    for option in x.options:
        for piece in option:
            out.extend(_columns_of(piece))
    return out


def chain_embedding_copy(model, pp: int) -> np.ndarray:
    """(U,) per block type: the TP-sharded parameters of the word-embedding copy a tied output
    layer or an MTP module needs (`embedding_copy`), charged to the first such block on every
    layout of pp > 1 stages, once (the blocks after the last layer share the last stage and
    its copy). `evaluate` charges it where the embedding sits on another stage: on every such
    layout when the embedding comes before the first layer and these blocks after the last
    (chunk boundaries fall after layers, so they land in the first and the last chunk, on
    stages 0 and pp - 1)."""
    types = chain_types(model)
    extra = np.zeros(len(types.unique_blocks))
    if pp == 1 or not any(isinstance(b, EmbeddingBlock) for b in model.blocks):
        return extra
    copies = [getattr(b, "embedding_copy", 0) for b in types.unique_blocks]
    if max(copies, default=0) > 0:
        extra[next(u for u, c in enumerate(copies) if c > 0)] = max(copies)
    return extra


def _linear_part(x: Linear) -> tuple[Linear, Linear | None]:
    """(const, block and in-flight parts; the chunk-end parts or None)."""
    ends = Linear(end=x.end, end_in_flight=x.end_in_flight, final=x.final)
    has_ends = any(part is not None for part in (x.end, x.end_in_flight, x.final))
    return Linear(x.const, x.block, x.in_flight), (ends if has_ends else None)


def _sum_linear(items) -> tuple[Linear, list]:
    """The `Linear` items summed, and the others."""
    total, rest = Linear(), []
    for item in items:
        if isinstance(item, Linear):
            total = total + item
        else:
            rest.append(item)
    return total, rest


def chain_costs(problem: Problem, cands, costs, layout: Layout, i: int) -> ChainCosts:
    """The costs of candidate `i` of `cands` (block costs `costs`) over the chain, for
    layouts of `layout`'s pp and vpp."""
    model = problem.model
    p, v = layout.pp, layout.vpp
    one = cands.take([i])
    sm = stage_model(problem, one, costs.take([i]), pp=p,
                     embedding_copy=Linear(block=chain_embedding_copy(model, p)[None, :]),
                     reachable_only=True)
    positions = chain_types(model).type_of_position

    def over_chain(x):
        return x.columns(positions)

    scale = 1 + sm.fragmentation                     # the reserve grows with what is allocated
    memory, memory_rest = _sum_linear(sm.allocated)
    memory_linear, memory_ends = _linear_part(over_chain(memory))
    time, time_rest = _sum_linear(sm.time_terms)
    time_linear, time_ends = _linear_part(over_chain(time))
    time_terms = [over_chain(t) for t in time_rest]
    time_terms += [over_chain(traffic.term(problem, one, sm)) for traffic in sm.dp]
    if time_ends is not None:
        time_terms.append(time_ends)
    memory_terms = [over_chain(t) * scale for t in memory_rest]
    if memory_ends is not None:
        memory_terms.append(memory_ends * scale)
    m = float(cands.num_micro_batches[i])
    group = int(cands.schedule_group(problem.framework.micro_batch_groups)[i])
    in_flight = in_flight_per_chunk(stage=np.arange(p)[:, None], pp=p, vpp=v,
                                    num_micro_batches=m, chunk=np.arange(v)[None, :],
                                    group=group)

    def per_stage(const) -> tuple[float, ...]:
        return tuple(float(x) for x in np.broadcast_to(np.asarray(const, dtype=float)
                                                       .reshape(-1), (p,)))

    def per_block(values) -> tuple[float, ...]:
        n = len(positions)
        return tuple(float(x) for x in (values[0] if values is not None else np.zeros(n)))

    return ChainCosts(
        pp=p, vpp=v,
        block_time_s=per_block(time_linear.block),
        block_state_bytes=per_block(None if memory_linear.block is None
                                    else memory_linear.block * scale),
        block_activation_bytes=per_block(None if memory_linear.in_flight is None
                                         else memory_linear.in_flight * scale),
        is_layer=tuple(b.kind in REPEATED_KINDS for b in model.blocks),
        stage_time_s=per_stage(time_linear.const),
        stage_bytes=per_stage(sm.framework_bytes + np.asarray(memory_linear.const) * scale),
        in_flight=tuple(tuple(int(x) for x in row) for row in in_flight),
        capacity_bytes=problem.usable_bytes,
        time_terms=tuple(time_terms), memory_terms=tuple(memory_terms))



def embedding_copy_is_certain(model) -> bool:
    """Every layout of more than one stage puts the word-embedding copy of a tied output layer
    or an MTP module on its stage: the embedding comes before the first layer and the blocks
    needing it after the last."""
    layers = model.layer_indices
    embeddings = [i for i, b in enumerate(model.blocks) if isinstance(b, EmbeddingBlock)]
    copies = [i for i, b in enumerate(model.blocks) if getattr(b, "embedding_copy", 0) > 0]
    return (bool(embeddings) and bool(copies) and max(embeddings) < layers[0]
            and min(copies) > layers[-1])
