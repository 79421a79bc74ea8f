"""Scaled dot-product attention that stays fast on a CPU wherever there is work to do.

MLX's CPU `scaled_dot_product_attention` spends most of its time in the softmax's `exp`,
which is scalar code on x86 (about 12 ns an element). So from `WRITTEN_OUT` scores (query-key
pairs times heads: one decoding token over a short context has fewer), on a CPU, attention
is written out here: grouped queries share one matmul with their keys, and the softmax uses
`runtime.fastmath.exp` (range reduction and a polynomial, fused by `mx.compile`). It runs in
blocks of at most `BLOCK` scores, which stay in the cache (unblocked, a long prefill chunk was
slower than the kernel). A batch is cut into blocks of rows, each over its rows' own keys: up
to the longest of their lengths, so one long conversation in a batch does not make every row
attend over its keys. A long prompt is cut into blocks of queries (a causal block skips the
keys after its last query). Timings: docs/architecture.md, "Fast CPU path".
Results equal the kernel's within 1e-6. Fewer scores, and GPUs, keep the kernel bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
from mlx_lm.models.base import create_causal_mask

from ..runtime import device, fastmath
from .llm import Mask

WRITTEN_OUT = 8192  # scores (rows x heads x queries x keys) from which the CPU writes attention out
BLOCK = 1 << 17  # scores per block (of rows, or of queries): 512 KiB of float32, which stays in the cache


def attention(
    q: mx.array, k: mx.array, v: mx.array, scale: float, mask: Mask, extents: Sequence[int] | None = None
) -> mx.array:
    """Attention of queries (B, H, T, D) over keys/values (B, H_kv, S, D), H a multiple of
    H_kv (grouped queries); `mask`: None, "causal" (the T queries are the last T of the S
    positions) or bool/additive, broadcastable to (B, 1, T, S). `extents`: per row, how many
    of the S keys it may see at most (a batch row's own length: later columns are masked),
    so that in a batch with one long conversation the short rows do not pay for its keys.
    A GPU attends over all S (the cache's `span`: few shapes); a CPU, where shapes cost
    nothing, only up to the longest extent."""
    B, H, T, _ = q.shape
    if device.on_gpu():
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    if extents and len(extents) == 1 < B:  # a `KVCache` holding a batch: its one length is each row's
        extents = [extents[0]] * B
    if extents and max(extents) < k.shape[2]:
        S = max(extents)
        k, v = k[:, :, :S], v[:, :, :S]
        mask = mask[..., :S] if isinstance(mask, mx.array) else mask
    if B * H * T * k.shape[2] < WRITTEN_OUT:
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    return _in_blocks(q, k, v, scale, mask, None if isinstance(mask, str) else extents)


def additive(mask: Mask, dtype: mx.Dtype) -> Mask:
    """A bool mask as the one attention adds to its scores (0, or the dtype's lowest value),
    built once per forward pass: a bool mask would be converted again by every layer."""
    if not isinstance(mask, mx.array) or mask.dtype != mx.bool_:
        return mask
    return mx.where(mask, mx.array(0, dtype), mx.array(mx.finfo(dtype).min, dtype))


def _in_blocks(
    q: mx.array, k: mx.array, v: mx.array, scale: float, mask: Mask, extents: Sequence[int] | None
) -> mx.array:
    """Blocks of whole rows while one row's scores fit in `BLOCK` (each block reads only its
    rows' keys, up to the longest of their extents), else blocks of one row's queries."""
    B, H, T, _ = q.shape
    S = k.shape[2]
    if B > 1 and B * H * T * S > BLOCK:
        per_row = isinstance(mask, mx.array) and mask.ndim == 4 and mask.shape[0] == B
        blocks = []
        for i, j, keys in _row_blocks(extents or [S] * B, H * T):
            rows = mask[i:j] if per_row else mask
            rows = rows[..., :keys] if isinstance(rows, mx.array) else rows
            blocks.append(_in_blocks(q[i:j], k[i:j, :, :keys], v[i:j, :, :keys], scale, rows, None))
        return mx.concatenate(blocks)
    rows = max(1, BLOCK // (B * H * S))
    blocks = []
    for start in range(0, T, rows):
        end = min(start + rows, T)
        keys = S - T + end if isinstance(mask, str) else S  # causal: later keys are all masked
        blocks.append(
            _written_out(q[:, :, start:end], k[:, :, :keys], v[:, :, :keys], scale, _rows(mask, start, end, T, keys))
        )
    return blocks[0] if len(blocks) == 1 else mx.concatenate(blocks, axis=2)


def _row_blocks(extents: Sequence[int], scores_per_key: int) -> list[tuple[int, int, int]]:
    """Consecutive rows [i, j) and the keys they need (their longest extent), as many rows a
    block as keep its scores within `BLOCK` (one at least)."""
    blocks, i = [], 0
    while i < len(extents):
        j, keys = i + 1, extents[i]
        while j < len(extents) and (j - i + 1) * scores_per_key * max(keys, extents[j]) <= BLOCK:
            keys, j = max(keys, extents[j]), j + 1
        blocks.append((i, j, keys))
        i = j
    return blocks


def _rows(mask: Mask, start: int, end: int, queries: int, keys: int) -> mx.array | None:
    """The mask of queries [start, end) of `queries`, over the first `keys` keys, as an array."""
    if mask is None:
        return None
    if isinstance(mask, str):  # the block's queries are the last end - start of the `keys` positions
        return create_causal_mask(end - start, keys - (end - start))
    rows = mask[..., start:end, :] if mask.shape[-2] == queries else mask
    return rows[..., :keys]


def _written_out(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array | None) -> mx.array:
    B, H, T, D = q.shape
    groups, S = k.shape[1], k.shape[2]
    scores = (q * scale).reshape(B, groups, H // groups * T, D) @ k.swapaxes(-1, -2)
    scores = scores.reshape(B, groups, -1, T, S).astype(mx.float32)
    if mask is not None:
        mask = mask[:, :, None] if mask.ndim == 4 else mask  # (B, 1, T, S) -> (B, 1, 1, T, S)
        scores = mx.where(mask, scores, -mx.inf) if mask.dtype == mx.bool_ else scores + mask
    weights = fastmath.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return (weights.astype(v.dtype).reshape(B, groups, -1, S) @ v).reshape(B, H, T, D)
