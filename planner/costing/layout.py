"""Pipeline layouts: which contiguous blocks of the model chain each pipeline chunk holds.

A plan with pp stages and vpp chunks per stage has K = pp * vpp chunks in pipeline order;
chunk k runs on stage k % pp as that stage's chunk k // pp (Megatron-LM's interleaved
assignment: virtual stage k lives on rank k mod p).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cost_models.pipeline import partition_placements
from planner.schemas.framework import FrameworkProfile
from planner.schemas.model import ModelSpec


@dataclass(frozen=True)
class Layout:
    pp: int
    vpp: int
    bounds: tuple[int, ...]
    """Chain indices: chunk k holds blocks[bounds[k]:bounds[k + 1]]."""

    @property
    def num_chunks(self) -> int:
        return self.pp * self.vpp

    def chunk_range(self, k: int) -> range:
        return range(self.bounds[k], self.bounds[k + 1])

    def stage_of_chunk(self, k: int) -> int:
        return k % self.pp

    def layers_per_chunk(self, model: ModelSpec) -> list[int]:
        layers = set(model.layer_indices)
        return [sum(1 for i in self.chunk_range(k) if i in layers)
                for k in range(self.num_chunks)]


def layout_from_layer_counts(model: ModelSpec, pp: int, vpp: int,
                             layers_per_chunk: list[int] | tuple[int, ...]) -> Layout:
    """The layout that gives chunk k `layers_per_chunk[k]` repeated layers; blocks before the
    first layer (the embedding) join chunk 0 and blocks after the last (final norm, output)
    join the last chunk. Assumes sum(layers_per_chunk) == model.num_layers."""
    layer_positions = model.layer_indices
    bounds = [0]
    taken = 0
    for count in layers_per_chunk[:-1]:
        taken += count
        bounds.append(layer_positions[taken - 1] + 1 if taken else 0)
    bounds.append(len(model.blocks))
    return Layout(pp=pp, vpp=vpp, bounds=tuple(bounds))


def even_layer_counts(num_layers: int, num_chunks: int) -> list[int]:
    """Megatron-LM's even split; a remainder (which its rules refuse) goes to the middle
    chunks first, away from the embedding and output layer at the ends."""
    base, extra = divmod(num_layers, num_chunks)
    counts = [base] * num_chunks
    order = sorted(range(num_chunks), key=lambda k: (k in (0, num_chunks - 1), k))
    for k in order[:extra]:
        counts[k] += 1
    return counts


def explicit_counts(layers_per_chunk) -> tuple[int, ...] | None:
    """The layer counts a launch config must spell out: None when every chunk holds the same
    number of layers (every framework's default split)."""
    counts = tuple(int(c) for c in layers_per_chunk)
    return None if len(set(counts)) == 1 else counts


def uniform_layout(model: ModelSpec, pp: int, vpp: int) -> Layout:
    return layout_from_layer_counts(model, pp, vpp,
                                    even_layer_counts(model.num_layers, pp * vpp))


def framework_layer_counts(profile: FrameworkProfile, num_layers: int, pp: int,
                           vpp: int) -> list[list[int]]:
    """The layer counts per chunk a framework's pipeline runs by itself with pp stages: the
    placements of its own partitioner (`FrameworkProfile.pipeline_partitions`, one chunk per
    stage), distinct, each stage holding a layer; else the even split."""
    found = (partition_placements(num_layers, pp, profile.pipeline_partitions)
             if vpp == 1 else [])
    return found or [even_layer_counts(num_layers, pp * vpp)]


def framework_layouts(model: ModelSpec, profile: FrameworkProfile, pp: int,
                      vpp: int) -> list[Layout]:
    """The layouts a plan with no layer counts of its own runs on (`framework_layer_counts`);
    the first is the framework's default."""
    return [layout_from_layer_counts(model, pp, vpp, counts)
            for counts in framework_layer_counts(profile, model.num_layers, pp, vpp)]


@dataclass(frozen=True)
class ChainTypes:
    """The distinct blocks of a model chain, and each chain position's type index."""

    model: ModelSpec

    @cached_property
    def unique_blocks(self) -> list:
        seen: dict = {}
        for b in self.model.blocks:
            seen.setdefault(b, len(seen))
        return list(seen)

    @cached_property
    def type_of_position(self) -> np.ndarray:
        index = {b: i for i, b in enumerate(self.unique_blocks)}
        return np.array([index[b] for b in self.model.blocks])

    def chunk_counts(self, layout: Layout) -> np.ndarray:
        """(K, U) matrix: how many blocks of each type chunk k holds."""
        counts = np.zeros((layout.num_chunks, len(self.unique_blocks)))
        for k in range(layout.num_chunks):
            r = layout.chunk_range(k)
            np.add.at(counts[k], self.type_of_position[r.start:r.stop], 1)
        return counts

    def last_type_of_chunk(self, layout: Layout) -> np.ndarray:
        """Type index of each chunk's last block (what it sends to the next chunk)."""
        return np.array([self.type_of_position[max(layout.bounds[k + 1] - 1, layout.bounds[k])]
                         for k in range(layout.num_chunks)])
