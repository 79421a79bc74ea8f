"""Scaled dot-product attention that stays fast over long contexts on a CPU.

MLX's CPU `scaled_dot_product_attention` spends most of its time in the softmax's `exp`,
which is scalar code on x86 (about 12 ns an element): over 1,900 keys, 8 queries of SmolLM2's
9 heads take 2.2 ms a layer, 66 ms a pass, more than the rest of a decoding step. Over long
contexts (`LONG_CONTEXT` keys and more) on a CPU, the same attention is written out here with
`runtime.fastmath.exp` (range reduction and a polynomial, fused by `mx.compile`): 0.95 ms
there, equal to within 1e-7. Shorter contexts and GPUs keep MLX's kernel, which is as fast
or faster there, so short answers are computed exactly as before.
"""

from __future__ import annotations

import mlx.core as mx

from ..runtime import device, fastmath
from .llm import Mask

LONG_CONTEXT = 512  # keys from which the CPU path writes the softmax out


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: Mask) -> mx.array:
    """Attention of queries (B, H, T, D) over keys/values (B, H_kv, S, D), H a multiple of
    H_kv (grouped queries); `mask`: None, "causal" (the T queries are the last T of the S
    positions) or bool/additive, broadcastable to (B, 1, T, S)."""
    if k.shape[2] < LONG_CONTEXT or device.on_gpu():
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    B, H, T, D = q.shape
    groups, S = k.shape[1], k.shape[2]
    scores = (q * scale).reshape(B, groups, H // groups * T, D) @ k.swapaxes(-1, -2)
    scores = scores.reshape(B, groups, -1, T, S).astype(mx.float32)
    if isinstance(mask, str):
        mask = mx.arange(S)[None] <= (S - T + mx.arange(T))[:, None]
    if isinstance(mask, mx.array):
        mask = mask[:, :, None] if mask.ndim == 4 else mask  # (B, 1, T, S) -> (B, 1, 1, T, S)
        scores = mx.where(mask, scores, -mx.inf) if mask.dtype == mx.bool_ else scores + mask
    weights = fastmath.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return (weights.astype(v.dtype).reshape(B, groups, -1, S) @ v).reshape(B, H, T, D)
