"""The log-probabilities of the tokens an answer emits, and the likeliest alternatives, as
OpenAI's `logprobs`/`top_logprobs` report them.

The verify pass already computed the LLM's logits at every emitted token's position (the
accepted path, then the position the next token was drawn at), so reporting them costs a
log-softmax and a top-k over those rows only. They are the target distribution's own: the
logits plus any `logit_bias`, before temperature and top-k/top-p (as mlx-lm's server
reports them).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from ..sampling import BiasedSampler, Sampler, log_softmax

MAX_TOP_LOGPROBS = 20  # OpenAI's limit


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # the likeliest tokens at that position, likeliest first


def logprob_rows(sampler: Sampler, logits: mx.array, tokens: mx.array, top: int) -> mx.array:
    """(n, 1 + 2 top) float32 for logits (n, V) at the positions that emitted `tokens` (n,):
    each token's log-probability, then the top ids (exact in float32 below 2^24), then their
    log-probabilities (lazy: read with the step)."""
    if isinstance(sampler, BiasedSampler):
        logits = sampler.apply(logits)
    logprobs = log_softmax(logits.astype(mx.float32))
    chosen = mx.take_along_axis(logprobs, tokens.astype(mx.int32)[:, None], axis=-1)
    if top == 0:
        return chosen
    ids = mx.argpartition(-logprobs, kth=top - 1, axis=-1)[:, :top]
    values = mx.take_along_axis(logprobs, ids, axis=-1)
    order = mx.argsort(-values, axis=-1)
    ids, values = mx.take_along_axis(ids, order, axis=-1), mx.take_along_axis(values, order, axis=-1)
    return mx.concatenate([chosen, ids.astype(mx.float32), values], axis=-1)


def read_logprobs(rows: list[list[float]], tokens: list[int]) -> list[TokenLogprob]:
    """`logprob_rows`, read on the host, for the emitted `tokens`."""
    out = []
    for token, row in zip(tokens, rows):
        top = (len(row) - 1) // 2
        pairs = tuple((int(i), v) for i, v in zip(row[1 : 1 + top], row[1 + top :]))
        out.append(TokenLogprob(token, row[0], pairs))
    return out
