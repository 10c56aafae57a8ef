"""Keys a query attends to, averaged over the sequence (`compute.attended_keys`), against the
attention masks themselves, enumerated."""

import numpy as np
import pytest

from cost_models.compute import attended_keys


def _mask(s, *, causal, window=None, chunk=None):
    """The boolean s x s mask as transformers builds it: causal (key <= query), a sliding
    window (query - key < window), a chunk (same block of `chunk` positions; Llama 4's
    chunked_attention_mask in transformers masking_utils)."""
    q, k = np.meshgrid(np.arange(s), np.arange(s), indexing="ij")
    allowed = np.ones((s, s), dtype=bool)
    if causal:
        allowed &= k <= q
    if window is not None:
        allowed &= q - k < window
    if chunk is not None:
        allowed &= q // chunk == k // chunk
    return allowed


@pytest.mark.parametrize("s", [1, 7, 64, 100, 257])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("window", "chunk"), [(None, None), (16, None), (None, 16),
                                               (None, 64), (300, None), (None, 300)])
def test_attended_keys_count_the_mask(s, causal, window, chunk):
    if window is not None and not causal:
        pytest.skip("a sliding window is a causal mask here")
    expected = _mask(s, causal=causal, window=window, chunk=chunk).sum() / s
    if causal and window is None and chunk is None:
        expected -= 0.5     # the plain causal count is s / 2, not the mask's (s + 1) / 2
    assert attended_keys(s, causal=causal, window=window, chunk=chunk) == pytest.approx(expected)


def test_chunks_attend_about_half_a_window_of_the_same_size():
    # Llama 4 at 128K tokens: 8192-token chunks see (c + 1) / 2 keys on average, a sliding
    # window of 8192 nearly all 8192.
    s = 131072
    assert attended_keys(s, causal=True, chunk=8192) == pytest.approx(4096.5)
    assert attended_keys(s, causal=True, window=8192) == pytest.approx(8192 - 8192 * 8191
                                                                       / (2 * s))
