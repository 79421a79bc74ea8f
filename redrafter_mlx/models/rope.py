"""RoPE at per-token positions, which a packed token tree needs (its tokens sit at their depth,
not in a row) and `mx.fast.rope` does not take: it has one offset per batch row."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


class PositionedRoPE(nn.Module):
    """A layer's RoPE that also takes per-token positions (B, T) as its offset.

    `mx.fast.rope` takes one offset per batch row, so per-token positions are applied by
    moving every token into its own row; an int or (B,) offset goes straight through.
    """

    def __init__(self, rope: nn.Module):
        super().__init__()
        self.inner = rope

    def __call__(self, x: mx.array, offset: int | mx.array = 0) -> mx.array:
        if not isinstance(offset, mx.array) or offset.ndim < 2:
            return self.inner(x, offset=offset)
        B, H, T, D = x.shape
        rows = x.transpose(0, 2, 1, 3).reshape(B * T, H, 1, D)
        rows = self.inner(rows, offset=offset.reshape(-1))
        return rows.reshape(B, T, H, D).transpose(0, 2, 1, 3)
