"""Upper bounds on the counts an input may give, each far above any real training run.

They keep a typo (a million layers, a batch of 2^62) from turning into an hour of search, an
out-of-memory or an integer overflow in numpy: such a value is refused with the field, the bound
and why. Each bound is at least ten times the largest value published for a real run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import core_schema

MAX_LAYERS = 10_000
"""Repeated layers: 80x the deepest production LLMs (Llama 3 405B: 126 layers, Dubey et al.
2024 Table 3; Megatron-LM's 1T GPT: 128, Narayanan et al. 2021 Table 1) and 10x the deepest
research transformer (DeepNet, 1,000 layers, arXiv:2203.00555)."""

MAX_SEQ_LEN = 2**24
"""Tokens per sequence (16,777,216): 16x the 1M-token contexts models are trained at today
(Qwen2.5-1M, arXiv:2501.15383)."""

MAX_GLOBAL_BATCH = 2**24
"""Sequences per optimizer step (16,777,216): over 1,000x the largest published batches
(Llama 3 405B: 16M tokens of 8,192 = 2,048 sequences, Dubey et al. 2024 Sec. 3.4.1)."""

MAX_GPUS = 2**20
"""GPUs in a cluster, and any parallel degree (1,048,576): 5x the largest clusters announced
(xAI Colossus, 200,000 GPUs)."""

MAX_COUNT = 2**24
"""Any other count or width of a model or cluster (hidden, heads, vocabulary, experts,
16,777,216): 64x the largest vocabulary (Gemma 3: 262,144) and 600x the widest hidden size
(Megatron-LM's 1T GPT: 25,600); it keeps every product of them within float64 and int64."""


def _compact(value: int) -> str:
    return f"{value:,}" if value < 10**15 else f"{float(value):.3g}"


def at_most(limit: int, why: str) -> "_AtMost":
    """A pydantic check: the value is at most `limit`, else a one-line message with `why`.
    The JSON Schema (`planner schema`) shows the bound as `maximum`."""
    return _AtMost(limit, why)


@dataclass(frozen=True)
class _AtMost:
    limit: int
    why: str

    def check(self, value: int | None) -> int | None:
        if value is not None and value > self.limit:
            raise ValueError(f"{_compact(value)} exceeds the largest accepted, {self.limit:,} "
                             f"({self.why})")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler):
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: GetJsonSchemaHandler):
        return {**handler(schema), "maximum": self.limit}


Layers = Annotated[int, Field(gt=0), at_most(MAX_LAYERS, "80x the deepest models trained")]
SeqLen = Annotated[int, Field(gt=0), at_most(MAX_SEQ_LEN, "16x the longest contexts trained")]
GlobalBatch = Annotated[int, Field(gt=0),
                        at_most(MAX_GLOBAL_BATCH, "1,000x the largest batches published")]
Gpus = Annotated[int, Field(gt=0), at_most(MAX_GPUS, "5x the largest clusters built")]
PositiveInt = Annotated[int, Field(gt=0), at_most(MAX_COUNT, "far above any real model")]
"""pydantic's PositiveInt, bounded by MAX_COUNT."""
NonNegativeInt = Annotated[int, Field(ge=0), at_most(MAX_COUNT, "far above any real model")]
"""pydantic's NonNegativeInt, bounded by MAX_COUNT."""
