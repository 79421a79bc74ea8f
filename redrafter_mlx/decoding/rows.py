"""What goes in and out of a `BatchDecoder`: a `Request`, the `Update`s its row produces, and
the `Row` that decodes it in the batch."""

from __future__ import annotations

import random
import time
from collections.abc import Hashable
from dataclasses import dataclass, field

import mlx.core as mx

from ..drafting import DraftFn, TreeDrafter
from ..drafting.lookup import TextBuffer
from ..options import DecodingOptions
from .joining import Join
from .logprobs import TokenLogprob
from .steps import GenerationStats, answer_part


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

    @classmethod
    def open(cls, join: Join, request: Request, max_tokens: int, text_room: int | None) -> Row:
        """The row of a prefilled request, before its first token. `text_room`: tokens its
        lookup buffer holds after the prompt (None: no lookup)."""
        seed = request.options.seed if request.options.seed is not None else random.getrandbits(63)
        stats = GenerationStats(prompt_tokens=len(request.prompt), cached_tokens=join.cached)
        text = TextBuffer(request.prompt, text_room) if text_room is not None else TextBuffer([], 1)
        return cls(join.handle, request, max_tokens, text, mx.random.key(seed), 0, stats, list(request.prompt))

    def advance(
        self, tokens: list[int], cells: int, next_count: int, eos_ids: frozenset[int]
    ) -> tuple[list[int], str | None]:
        """Take a verified step's `tokens` (its accepted drafts and the next token) out of a tree
        of `cells` drafted cells; `next_count`: the size of the row's next tree. Returns the
        answer's new tokens and why it ended (None: it goes on)."""
        stats = self.stats
        self.text.commit(len(tokens))
        stats.accepted_per_step.append(len(tokens))
        stats.verified_tokens.append(self.count)
        stats.tree_cells.append(cells)
        self.count = next_count
        self.sequence += tokens
        new, stop = answer_part(tokens, eos_ids, self.max_tokens - stats.num_tokens)
        stats.num_tokens += len(new)
        stats.generation_time = time.perf_counter() - self.started
        finish = "stop" if stop else "length" if stats.num_tokens >= self.max_tokens else None
        stats.finish_reason = finish or stats.finish_reason
        return new, finish

    def sampler(self):
        """This step's sampler; the row's key advances (lazily) on every draw."""
        self.key, key = mx.random.split(self.key)
        return self.request.options.sampler(key)


def lookup_texts(rows: list[Row], looked_up: bool) -> mx.array:
    """(B, N) every row's lookup buffer, padded to a power of two N so that the compiled draft
    phase, traced once per input shape, is not traced again whenever rows come and go; (B, 1)
    zeros when the trees look nothing up (a plain step, or no lookup)."""
    if not looked_up:
        return mx.zeros((len(rows), 1), mx.int32)
    width = 1 << (max(row.text.tokens.shape[1] for row in rows) - 1).bit_length()
    return mx.concatenate([mx.pad(row.text.tokens, [(0, 0), (0, width - row.text.tokens.shape[1])]) for row in rows])
