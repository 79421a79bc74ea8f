"""Samplers: how a token is drawn from the LLM's scores (as mlx-lm keeps `sample_utils.py`).

A `Sampler` maps scores (..., V) to token ids (...). Decoding, acceptance and the server
all take one; `DecodingOptions.sampler` builds it from the user's settings.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
from mlx_lm.sample_utils import apply_top_k, apply_top_p, make_sampler

Sampler = Callable[[mx.array], mx.array]  # log-probs (..., V) -> token ids (...)
NODE_KEYS = 1024  # a keyed draw splits its key into this many, one per scored row, whatever their count


def greedy(scores: mx.array) -> mx.array:
    """Argmax decoding (mlx-lm's sampler at temperature 0)."""
    return mx.argmax(scores, axis=-1)


def make_greedy_or_sampler(
    temp: float = 0.0, top_p: float = 0.0, top_k: int = 0, key: mx.array | None = None
) -> Sampler:
    """`greedy` at temp 0, otherwise mlx-lm's top-p/top-k then categorical sampler. With a
    PRNG `key` the draw uses it instead of MLX's global generator (mlx-lm's sampler has no
    key), so rows of a batch sample independently, each from its own request's seed. A keyed
    draw over several positions (a verified tree's nodes) gives position i the i-th of
    `NODE_KEYS` keys split from `key`: MLX's draws depend on the shape drawn, and a tree is
    padded to its batch's longest, so a seed would otherwise answer differently beside
    other requests."""
    if temp == 0:
        return greedy
    if key is None:
        return make_sampler(temp=temp, top_p=top_p, top_k=top_k)

    def sample(logprobs: mx.array) -> mx.array:
        if 0 < top_p < 1:  # mlx-lm's order: top-p, then top-k
            logprobs = apply_top_p(logprobs, top_p)
        if top_k > 0:
            logprobs = apply_top_k(logprobs, top_k)
        scaled = logprobs * (1 / temp)
        if scaled.ndim == 1:
            return mx.random.categorical(scaled, key=key)
        rows = scaled.reshape(-1, scaled.shape[-1])
        keys = mx.random.split(key, max(NODE_KEYS, rows.shape[0]))[: rows.shape[0]]
        return _keyed_categorical(keys, rows).reshape(scaled.shape[:-1])

    return sample


_keyed_categorical = mx.vmap(lambda key, scores: mx.random.categorical(scores, key=key))


class BiasedSampler:
    """`sampler` over the logits plus a per-token bias (OpenAI's `logit_bias`). The bias is part
    of the target distribution: plain decoding, the verify pass and acceptance all read it
    through `sampler_scores`, so speculative decoding stays exactly plain decoding's."""

    def __init__(self, sampler: Sampler, bias: dict[int, float]):
        self.inner = sampler
        self.ids = mx.array(list(bias), mx.int32)
        self.values = mx.array(list(bias.values()), mx.float32)

    def __call__(self, scores: mx.array) -> mx.array:
        return self.inner(scores)

    def apply(self, logits: mx.array) -> mx.array:
        """logits (..., V) with the bias added to its tokens' columns."""
        dense = mx.zeros((logits.shape[-1],), logits.dtype).at[self.ids].add(self.values.astype(logits.dtype))
        return logits + dense


def log_softmax(logits: mx.array) -> mx.array:
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def sampler_scores(sampler: Sampler, logits: mx.array) -> mx.array:
    """What `sampler` reads: log-probs, except raw logits for `greedy`.

    The argmax is the same, and the log-softmax over a 49k vocabulary costs about 2 ms per
    row on a CPU (transcendental ops run as scalar code there), i.e. about 10% of a
    12-token verify pass.
    """
    if isinstance(sampler, BiasedSampler):
        logits, sampler = sampler.apply(logits), sampler.inner
    return logits if sampler is greedy else log_softmax(logits)
