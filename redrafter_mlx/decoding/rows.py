"""What goes in and out of a `BatchDecoder`: a `Request`, the `Update`s its row produces, and
the `Row` that decodes it in the batch."""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass, field

import mlx.core as mx

from ..drafting import DraftFn, TreeDrafter
from ..drafting.lookup import TextBuffer
from ..options import DecodingOptions
from .logprobs import TokenLogprob
from .steps import GenerationStats


@dataclass
class Request:
    """One answer to decode: prompt token ids and how to decode them (the tree fields of
    `options` are the batch's, not the request's)."""

    prompt: list[int]
    options: DecodingOptions = DecodingOptions()
    logprobs: int | None = None  # report each token's log-probability and this many alternatives


@dataclass
class Update:
    """What a row produced since the last update: tokens (never an EOS) and, once its answer
    ended, why ("stop": EOS; "length": max_tokens or the context; "cancelled": removed)."""

    handle: Hashable
    tokens: list[int]
    stats: GenerationStats
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] | None = None  # one per token, when the request asked
    drafted: int = 0  # the first `drafted` tokens were accepted drafts (depths 1, 2, ...)
    copied: bool = False  # those drafts were the context lookup's copy, not the drafter's
    plain_ms: float | None = None  # a plain step of this batch, as measured (None: not known)


@dataclass
class Row:
    """One request decoding in the batch: what it asked for, its text, PRNG key, tree size,
    statistics and (for a stateful drafter) its own drafting session."""

    handle: Hashable
    request: Request
    max_tokens: int
    text: TextBuffer
    key: mx.array
    count: int  # unique tokens of the row's drafted tree (its packed length before padding)
    stats: GenerationStats
    sequence: list[int]  # prompt and every token emitted, accepted or not yet committed
    session: TreeDrafter | None = None  # a stateful drafter's, for this row alone
    phase: DraftFn | None = None  # its draft phase
    started: float = field(default_factory=time.perf_counter)

    def sampler(self):
        """This step's sampler; the row's key advances (lazily) on every draw."""
        self.key, key = mx.random.split(self.key)
        return self.request.options.sampler(key)
