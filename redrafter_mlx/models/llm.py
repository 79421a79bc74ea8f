"""What the decoding loop needs of an LLM, whichever forward implements it, and the prefill
that every path shares.

Two forwards implement `LLM`: `llama.Model`, this project's compiled Llama (the embedded
model and every plain Llama/Mistral folder: measured 5-13% faster per verify pass on a CPU),
and `adapter.TreeModel`, any other mlx-lm architecture through mlx-lm's own classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
import mlx.nn as nn

from .cache import BatchKVCache, KVCache

Mask = mx.array | str | None  # bool/additive (B|1, 1, T, S), "causal", or None (attend all)
PREFILL_CHUNK = 512


@dataclass
class Segment:
    """One of several sequences a pass runs together (`runs_together`): its tokens (B, T),
    the cache they attend over and are written to, their RoPE positions (B, T), their mask."""

    tokens: mx.array
    cache: KVCache | BatchKVCache
    positions: mx.array
    mask: Mask = "causal"


def runs_together(model: LLM) -> bool:
    """Whether `model` runs several segments in one pass (`run_together(segments, taps)`):
    our Llama forward does, on one process or split by tensors; mlx-lm's classes behind the
    adapter and a Llama split by layers do not."""
    return callable(getattr(model, "run_together", None)) and getattr(model, "stage", None) is None


class LLM(Protocol):
    args: Any  # model_type, num_hidden_layers, hidden_size, vocab_size, max_position_embeddings

    def __call__(
        self,
        tokens: mx.array,
        cache: KVCache | BatchKVCache | None = None,
        positions: mx.array | None = None,
        mask: Mask = "causal",
        taps: tuple[int, ...] = (),
    ) -> mx.array:
        """Final-norm hidden states (B, T, D) for `tokens` (B, T) at RoPE `positions` (B, T;
        default: the cache's length onwards) under `mask` over [committed cache, this block];
        the block's keys/values are written to `cache` but not committed. With `taps`, the
        inputs of those decoder layers follow, concatenated: (B, T, D * (1 + len(taps)))."""

    def logits(self, hidden: mx.array) -> mx.array:
        """Vocabulary logits (..., V) for hidden states (..., D)."""

    @property
    def embedding(self) -> nn.Embedding: ...

    @property
    def layers(self) -> list[Any]: ...

    def make_cache(self) -> KVCache: ...


def prefill(model: LLM, prompt: mx.array, cache: KVCache, taps: tuple[int, ...] = ()) -> mx.array:
    """Run the prompt (T,) through the model in chunks; commit it; return the hidden states
    of the last chunk (t, D), t >= 1 (lazy: a caller that reads only the last row pays for
    no other final norm), with the `taps` layers' inputs after them."""
    for start in range(0, prompt.shape[0], PREFILL_CHUNK):
        chunk = prompt[start : start + PREFILL_CHUNK][None]
        hidden = model(chunk, cache, taps=taps)
        cache.commit(chunk.shape[1])
        if start + PREFILL_CHUNK < prompt.shape[0]:
            mx.eval(cache.state())
    return hidden[0]


def prefill_together(
    model: LLM, prompts: list[list[int]], taps: tuple[int, ...] = (), every_state: bool = False
) -> list[tuple[KVCache, mx.array]]:
    """Prefill several prompts in shared passes (one per `PREFILL_CHUNK` columns, rows padded
    on the right, which no real token attends to): one pass streams the weights once for every
    prompt, where `prefill` would stream them once per prompt. Returns each prompt's cache and
    hidden states (its last token's, or with `every_state` all of them, as `prefill`'s)."""
    cache = BatchKVCache.empty_rows(len(model.layers), len(prompts))
    longest = max(map(len, prompts))
    states: list[list[mx.array]] = [[] for _ in prompts]
    for start in range(0, longest, PREFILL_CHUNK):
        counts = [max(0, min(PREFILL_CHUNK, len(p) - start)) for p in prompts]
        width = -(-max(counts) // 16) * 16  # a few block lengths, each traced once by compiled layers
        tokens = mx.array([p[start : start + n] + [0] * (width - n) for p, n in zip(prompts, counts)], mx.uint32)
        positions = cache.offsets()[:, None] + mx.arange(width, dtype=mx.int32)[None]
        causal = mx.broadcast_to(mx.tril(mx.ones((width, width), mx.bool_)), (len(prompts), width, width))
        hidden = model(tokens, cache, positions, cache.attention_mask(causal), taps)
        for b, n in enumerate(counts):
            if n:
                states[b] = [*states[b], hidden[b, :n]] if every_state else [hidden[b, n - 1 : n]]
        cache.commit(counts)
        mx.eval(cache.state(), [s[-1] for s in states])
    return [(cache.row(b), mx.concatenate(s) if len(s) > 1 else s[0]) for b, s in enumerate(states)]
