"""Context lookup: a draft copied from where the text's last tokens occurred before.

Answers repeat their prompt and themselves (names, code identifiers, list markup, a phrase
restated), and a copy of what followed the last occurrence of the current n-gram predicts
those stretches better than a small drafter does (prompt lookup decoding; RASD, in
`related-papers`, merges such retrieved drafts into the drafter's tree). `lookup_draft`
finds, for the longest n in [min_ngram, max_ngram] that matches, the most recent earlier
occurrence of the context's last n tokens and returns the `width` tokens that followed
it. Where the copy runs into the end of the context it continues periodically
(LZ77-style), which is what a repetition that is still going on predicts.

Lazy and fixed-shape like the beam search: the context is a padded (B, N) buffer with
per-row lengths that may themselves be lazy, so decoding needs no extra host read.
"""

from __future__ import annotations

import mlx.core as mx

from .ngrams import NgramTable, ngram_draft

MAX_NGRAM = 3  # longest n-gram matched; longer matches are rarer and gained nothing measured
MIN_NGRAM = 1


def lookup_draft(
    context: mx.array,
    length: mx.array,
    width: int,
    max_ngram: int = MAX_NGRAM,
    min_ngram: int = MIN_NGRAM,
) -> tuple[mx.array, mx.array]:
    """context: (B, N) int token buffer, valid up to length (B,) (>= 1); width: tokens to draft.

    Returns (draft (B, width) int32, found (B,) bool): draft[b] continues context[b, :length[b]]
    by copying, found[b] says whether any n-gram matched (draft is meaningless otherwise).
    """
    context = context.astype(mx.int32)
    batch, size = context.shape
    length = length.astype(mx.int32).reshape(batch, 1)
    offsets = mx.arange(width, dtype=mx.int32)[None]
    draft = mx.zeros((batch, width), dtype=mx.int32)
    found = mx.zeros((batch,), dtype=mx.bool_)
    for n in range(min_ngram, max_ngram + 1):  # longer n last, so it overrides
        if size <= n:
            break
        starts = mx.arange(size - n, dtype=mx.int32)[None]  # (1, N - n) window starts j
        tail = mx.take_along_axis(context, mx.maximum(length - n + mx.arange(n)[None], 0), axis=1)
        match = starts + n < length  # a token of the text follows the window
        for i in range(n):
            match = match & (context[:, i : size - n + i] == tail[:, i : i + 1])
        hit = match.any(axis=1)
        latest = mx.argmax(mx.where(match, starts, -1), axis=1, keepdims=True)  # (B, 1)
        source = latest + n  # first copied token; the copy repeats with period length - source
        period = mx.maximum(length - source, 1)
        copied = mx.take_along_axis(context, source + offsets % period, axis=1)
        draft = mx.where(hit[:, None], copied, draft)
        found = found | hit
    return draft, found


def with_lookup_beam(
    beams: mx.array, context: mx.array, length: mx.array, ngrams: NgramTable | None = None
) -> tuple[mx.array, mx.array]:
    """beams (B, W, L) with the last (least valuable) beam replaced by the guaranteed token
    and the lookup's draft where the context's last n-gram occurred before, or else, with
    `ngrams` and W >= 2, the table's continuation of it (`ngrams.py`).

    context[b, length[b] - 1] is the guaranteed token beams[b, :, 0]. The beam search
    returns its beams best first (or in `choose_candidates` order), so the lookup displaces
    the one the drafter valued least; with W = 1 it takes the only beam when it matches,
    which was measured to accept more than the drafter's beam alone (README). The table's
    guess does not: at W = 1 it lowered tokens/step from 1.917 to 1.862 (docs/benchmarks.md).
    Returns the beams and found (B,) bool: whether the last beam is a copy.
    """
    draft, found = lookup_draft(context, length, beams.shape[-1] - 1)
    if ngrams is not None and beams.shape[1] > 1:
        usual, known = ngram_draft(ngrams, context, length, beams.shape[-1] - 1)
        draft, found = mx.where(found[:, None], draft, usual), found | known
    copied = mx.concatenate([beams[:, -1, :1], draft.astype(beams.dtype)], axis=-1)
    last = mx.where(found[:, None], copied, beams[:, -1])
    return mx.concatenate([beams[:, :-1], last[:, None]], axis=1), found


TEXT_BLOCK = 1024


class TextBuffer:
    """The decoded text as a (1, N) token buffer that decoding writes without reading it.

    A step's emitted tokens are `stage`d (lazily, at the end of the committed text) before
    the host knows how many were accepted, so the next step's lookup can use them with a
    lazy length; `commit` then moves the committed length past the accepted ones. The
    buffer holds `room` tokens after `tokens` at least, padded to a multiple of `TEXT_BLOCK`
    so that the compiled draft phase, which traces once per buffer size, traces rarely.
    """

    def __init__(self, tokens: list[int], room: int):
        size = -(-(len(tokens) + room) // TEXT_BLOCK) * TEXT_BLOCK
        self.tokens = mx.array(tokens + [0] * (size - len(tokens)), mx.int32)[None]
        self.length = len(tokens)

    def stage(self, tokens: mx.array) -> None:
        self.tokens[0, self.length : self.length + tokens.size] = tokens

    def commit(self, count: int) -> None:
        self.length += count
