"""The CPU's written-out attention equals MLX's fused kernel for every mask the model passes,
whole and in blocks, and calls with few scores keep the kernel exactly."""

from __future__ import annotations

import mlx.core as mx
import pytest

from redrafter_mlx.models import attention as attention_module
from redrafter_mlx.models.attention import WRITTEN_OUT, attention
from redrafter_mlx.runtime import fastmath


def inputs(rows: int, queries: int, keys: int, mask: str | None, seed: int):
    mx.random.seed(seed)
    q = mx.random.normal((rows, 9, queries, 64))
    k, v = mx.random.normal((2, rows, 3, keys, 64))
    if mask in ("bool", "additive"):
        allowed = mx.random.uniform(shape=(rows, 1, queries, keys)) > 0.3
        mask = allowed if mask == "bool" else mx.where(allowed, 0.0, -1e9)
    return q, k, v, mask


def kernel(q, k, v, mask):
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)


@pytest.mark.parametrize("rows, queries, keys", [(1, 1, 1900), (1, 8, 1900), (3, 5, 700), (1, 64, 1200), (16, 4, 60)])
@pytest.mark.parametrize("mask", ["causal", "bool", "additive", None])
def test_written_out_attention_equals_mlx_kernel(rows, queries, keys, mask):
    q, k, v, mask = inputs(rows, queries, keys, mask, rows * keys + queries)
    assert rows * 9 * queries * keys >= WRITTEN_OUT
    assert mx.allclose(attention(q, k, v, 0.125, mask), kernel(q, k, v, mask), atol=1e-5).item()


@pytest.mark.parametrize("rows, queries, keys", [(5, 3, 100), (1, 40, 90), (3, 20, 100)])
@pytest.mark.parametrize("mask", ["causal", "bool", "additive", None])
def test_blocks_of_rows_and_of_queries_equal_mlx_kernel(monkeypatch, rows, queries, keys, mask):
    """With blocks of 6,000 scores: (5, 3, 100) splits into blocks of 2 rows, (1, 40, 90)
    into blocks of 7 queries (a causal block over fewer keys), (3, 20, 100) into single rows
    and then their queries."""
    monkeypatch.setattr(attention_module, "BLOCK", 6000)
    q, k, v, mask = inputs(rows, queries, keys, mask, rows + queries + keys)
    assert mx.allclose(attention(q, k, v, 0.125, mask), kernel(q, k, v, mask), atol=1e-5).item()


def test_few_scores_keep_mlx_kernel_exactly():
    q, k, v, _ = inputs(1, 1, WRITTEN_OUT // 9 - 1, None, 0)
    assert mx.array_equal(attention(q, k, v, 0.125, "causal"), kernel(q, k, v, "causal")).item()


def test_softmax_exp_traces_once_however_the_context_grows(monkeypatch):
    """MLX keeps every trace of a compiled function (about 50 KB) and each costs time: the
    softmax's exp is compiled shapeless, so 300 context lengths trace it once at most."""
    traces, real = [], fastmath._exp_parts

    def recording(x: mx.array) -> tuple[mx.array, mx.array]:
        traces.append(x.shape)
        return real(x)

    monkeypatch.setattr(fastmath, "_exp_parts", recording)
    for keys in range(1000, 1300):
        q, k, v, _ = inputs(1, 1, keys, None, keys)
        assert mx.allclose(attention(q, k, v, 0.125, None), kernel(q, k, v, None), atol=1e-5).item()
    assert len(traces) <= 1, traces


def test_rows_read_only_the_keys_within_their_extents(monkeypatch):
    """A batch with one long row: the others' keys past their own lengths are never read (they
    hold NaN here, which any read would spread), and the result is the kernel's over the
    masked batch."""
    monkeypatch.setattr(attention_module, "BLOCK", 9 * 4 * 300)  # one row a block, each over its own keys
    extents = [200, 300, 160, 250, 180]
    q, k, v, _ = inputs(5, 4, 300, None, 5)
    visible = mx.arange(300)[None, :] < mx.array(extents)[:, None]  # (B, S)
    mask = mx.broadcast_to(visible[:, None, None, :], (5, 1, 4, 300))
    expected = kernel(q, k, v, mask)
    poisoned = [mx.where(visible[:, None, :, None], a, mx.nan) for a in (k, v)]
    out = attention(q, *poisoned, 0.125, mask, extents)
    assert mx.allclose(out, expected, atol=1e-5).item()
    assert not mx.allclose(attention(q, *poisoned, 0.125, mask), expected, atol=1e-5).item()  # without extents


def test_one_extent_for_a_batch_covers_every_row(monkeypatch):
    """A `KVCache` holding a batch of one length (the distillation loop's prefill) gives one
    extent for all its rows: blocks of rows must still cover every row, not row 0 alone
    (whose output would then be broadcast to the others)."""
    monkeypatch.setattr(attention_module, "BLOCK", 9 * 20 * 60)  # one row a block
    q, k, v, mask = inputs(4, 20, 60, "bool", 7)
    assert mx.allclose(attention(q, k, v, 0.125, mask, [60]), kernel(q, k, v, mask), atol=1e-5).item()
