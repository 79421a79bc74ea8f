"""What the decoding loop needs of an LLM, whichever forward implements it, and the prefill
that every path shares.

Two forwards implement `LLM`: `llama.Model`, this project's compiled Llama (the embedded
model and every plain Llama/Mistral folder: measured 5-13% faster per verify pass on a CPU),
and `adapter.TreeModel`, any other mlx-lm architecture through mlx-lm's own classes.
"""

from __future__ import annotations

from typing import Any, Protocol

import mlx.core as mx
import mlx.nn as nn

from .cache import BatchKVCache, KVCache

Mask = mx.array | str | None  # bool/additive (B|1, 1, T, S), "causal", or None (attend all)
PREFILL_CHUNK = 512


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
