"""The long-context CPU attention equals MLX's fused kernel for every mask the model passes."""

from __future__ import annotations

import mlx.core as mx
import pytest

from redrafter_mlx.models.attention import LONG_CONTEXT, attention


@pytest.mark.parametrize("rows, queries, keys", [(1, 1, LONG_CONTEXT), (1, 8, 1900), (3, 5, 700), (1, 64, 1200)])
@pytest.mark.parametrize("mask", ["causal", "bool", "additive", None])
def test_long_context_attention_equals_mlx_kernel(rows, queries, keys, mask):
    mx.random.seed(rows * keys + queries)
    q = mx.random.normal((rows, 9, queries, 64))
    k, v = mx.random.normal((2, rows, 3, keys, 64))
    if mask in ("bool", "additive"):
        allowed = mx.random.uniform(shape=(rows, 1, queries, keys)) > 0.3
        mask = allowed if mask == "bool" else mx.where(allowed, 0.0, -1e9)
    expected = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
    assert mx.allclose(attention(q, k, v, 0.125, mask), expected, atol=1e-5).item()


def test_short_contexts_keep_mlx_kernel_exactly():
    q = mx.random.normal((2, 9, 4, 64))
    k, v = mx.random.normal((2, 2, 3, LONG_CONTEXT - 1, 64))
    expected = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask="causal")
    assert mx.array_equal(attention(q, k, v, 0.125, "causal"), expected).item()
