"""Unit constants: the one place where 2**30 and 1e9 are written."""

from __future__ import annotations

from cost_models.enums import Precision

KiB = 2**10
MiB = 2**20
GiB = 2**30
"""Memory sizes are reported in GiB (2**30 bytes), as nvidia-smi and the Korthikanti Fig. 1 do."""

GB = 10**9
"""Bandwidths (GB/s) and the ZeRO paper's model-state sizes are decimal."""

TFLOPS = 10**12
US = 1e-6
"""One microsecond in seconds."""

SECONDS_PER_DAY = 86_400

BYTES_16BIT = 2
BYTES_FP32 = 4
BYTES_MASK = 1
"""Dropout masks are stored as one byte per element (Korthikanti et al. 2022, Sec. 4.1)."""
BYTES_TOKEN_ID = 8
"""Input token ids are int64 (Megatron-LM theoretical_memory_usage.py: 8 * s * b)."""


def bytes_per_value(precision: Precision) -> int:
    """Bytes of one weight or activation value at a training precision."""
    return BYTES_FP32 if precision is Precision.FP32 else BYTES_16BIT
