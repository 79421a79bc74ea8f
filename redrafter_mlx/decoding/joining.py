"""Requests on their way into a batch: prompts prefilled a chunk at a time while rows decode.

A joining prompt of 2,000 tokens takes seconds to prefill on a CPU; run at once it would
stall every running row for all of that. So while rows decode, each step carries a chunk of
the oldest long join's prompt, sized by the `Pacer` from the steps' own times. Where the
model runs several sequences in one pass (`models.llm.runs_together`: our Llama forward),
the chunk rides in the rows' verify pass and adds about `RIDING_SHARE` of their step: a pass
of its own would stream all the weights again, which on a CPU costs most of a step before
its first token (an 8-token chunk alone: 62 ms at the start of a prompt, 131 ms after 1,900
of its tokens, against 86 ms for a step of four rows, on a 2-core x86 CPU). Riding, a prompt
token costs the pass about what a row's token does (4 tokens after 1,500 of a prompt: +45 ms
on a 156 ms step of three rows verifying 5 tokens each), so a long prompt starts at
`RIDING_SHARE` of the rows' tokens and the `Pacer` follows the steps' times from there. A
prompt within the step's budget (a chat turn) rides whole: the rows' step grows once, and a
row more costs their later steps little, whereas pacing fifteen requests that arrived
together behind one running row took 8 to 13 s to their first tokens. Other models (mlx-lm's
classes behind the adapter) prefill chunks in a pass of their own between steps, sized to take
about `PREFILL_SHARE` of a step. Chunk sizes are multiples of `MIN_CHUNK`, so compiled
layers trace a few block lengths rather than one per chunk. The whole of every waiting
prompt runs only when no row is decoding, and then prompts of similar lengths share their
passes (`prefill_together`). A prompt that starts with a sequence the `PromptCache` holds
prefills only the rest of it.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

import mlx.core as mx

from ..models.cache import KVCache
from ..models.llm import LLM, Segment, prefill, prefill_together, runs_together
from .prompt_cache import PromptCache

PREFILL_SHARE = 1.0  # of the rows' step time, what a step's prefill may take
RIDING_SHARE = 0.35  # of the rows' step time, what a chunk riding in their pass may add to it
MIN_CHUNK = 4  # prompt tokens a step prefills at least (so that a join always progresses), and their unit
FIRST_CHUNK = 64  # the chunk size before any was timed (in a pass of its own, a chat prompt joins in one step)
SMOOTHING = 0.3  # weight of the last step in the smoothed time a riding prompt token adds
REFERENCE_STEPS = 9  # the rows' step time is the median of their last this many without prefill
SHARED_REST = 256  # prompts restored from the prompt cache with at most this many tokens left share a pass
PADDING = 0.25  # prompts prefilled together pad to the longest, adding at most this share of tokens


class Pacer:
    """Prompt tokens a step may prefill while rows decode, within [MIN_CHUNK, budget].

    Riding in the rows' pass, a chunk is `RIDING_SHARE` of their step over what a prompt token
    adds to it (smoothed over steps, as one step's time is noisy; it grows late in a long
    prompt, whose tokens attend to more keys), and the share grows with the `crowd`, prompts
    waiting per running row: one row must not hold back the long prompts of many requests
    that arrived with it. In a pass of its own, a chunk is the last one scaled by how far its
    time was from `PREFILL_SHARE` of the step (a pass has a fixed cost). A size changes by at
    most 1.5x a step. The rows' step is the median of their last `REFERENCE_STEPS` steps
    without a chunk that verified as many tokens (else the nearest such, scaled down by tokens
    where it verified more): a step that traced a compiled function or probed a wide tree
    takes several times a normal one, and rows that leave during a long join make the step
    cheaper; chunks sized against either stalled the rows. Untimed (`timed=False`: ranks of a
    distributed server must cut prompts alike), every chunk is `budget` tokens."""

    def __init__(self, budget: int, timed: bool = True):
        self.budget, self.timed = budget, timed
        self.size = float(min(budget, FIRST_CHUNK) if timed else budget)
        self.steps: dict[int, deque[float]] = {}  # the rows' last steps without prefill, by tokens verified
        self.rows_tokens = 0  # what the rows' last step verified
        self.crowd = 1.0  # prompts waiting per running row, at least 1
        self.token_s: float | None = None  # what a riding prompt token adds to the rows' step, smoothed

    def weigh(self, waiting: int, rows: int) -> None:
        """`waiting` prompts join `rows` running rows this step."""
        self.crowd = max(1.0, waiting / max(rows, 1))

    def step_s(self, tokens: int) -> float | None:
        """The rows' step time without prefill when they verify `tokens` (None: none timed yet)."""
        if not self.steps:
            return None
        nearest = min(self.steps, key=lambda known: abs(known - tokens))
        return statistics.median(self.steps[nearest]) * min(1.0, tokens / nearest)

    def begin(self, rows_tokens: int) -> None:
        """A prompt longer than the budget (`Joins.next_chunks` lets shorter ones ride whole)
        starts riding beside rows that verify `rows_tokens` a step: at its share of their
        tokens (a token costs the pass about the same whichever sequence it belongs to), not at
        the size the last join left, which would stall the rows for the steps the size takes
        to shrink."""
        if self.timed:
            self.size = min(self.size, max(MIN_CHUNK, RIDING_SHARE * self.crowd * rows_tokens))

    def tokens(self) -> int:
        """The next chunk's size: `size` rounded down to a multiple of `MIN_CHUNK`."""
        return max(MIN_CHUNK, min(self.budget, int(self.size) // MIN_CHUNK * MIN_CHUNK))

    def ran(self, tokens: int, seconds: float) -> None:
        """A chunk of `tokens` took `seconds` in a pass of its own, between the rows' steps."""
        step_s = self.step_s(self.rows_tokens)
        if self.timed and step_s is not None and tokens >= self.tokens():  # a whole chunk: it measures
            self._scale(PREFILL_SHARE * step_s / seconds)

    def stepped(self, seconds: float, rows_tokens: int, carried: int, paced: int) -> None:
        """The rows' step, verifying `rows_tokens`, took `seconds`, carrying `carried` prompt
        tokens (0: the step's time is theirs alone), `paced` of them a paced chunk."""
        self.rows_tokens, step_s = rows_tokens, self.step_s(rows_tokens)
        if not carried:
            self.steps.setdefault(rows_tokens, deque(maxlen=REFERENCE_STEPS)).append(seconds)
        elif self.timed and step_s is not None and paced:
            added = max(seconds - step_s, 0.0) / paced  # what a prompt token added to the step
            known = self.token_s if self.token_s is not None else added
            self.token_s = SMOOTHING * added + (1 - SMOOTHING) * known
            self._scale(RIDING_SHARE * self.crowd * step_s / max(self.token_s, 1e-6) / self.size)

    def _scale(self, factor: float) -> None:
        self.size = min(max(self.size * min(max(factor, 0.5), 1.5), MIN_CHUNK), self.budget)


@dataclass
class Join:
    handle: Hashable
    prompt: list[int]
    cache: KVCache  # the prompt's keys/values so far
    cached: int  # prompt tokens restored from the prompt cache
    arrived: float = field(default_factory=time.perf_counter)
    states: list[mx.array] = field(default_factory=list)  # hidden states (with taps) of the chunks run


class Joins:
    """Prompts waiting to join, in arrival order. `taps`: the LLM layers whose inputs follow
    the hidden states (`LLM.__call__`); `keep_states`: keep every prefilled token's states
    (a stateful drafter opens on them), not only the last one's."""

    def __init__(
        self,
        model: LLM,
        prompt_cache: PromptCache | None = None,
        taps: tuple[int, ...] = (),
        keep_states: bool = False,
    ):
        self.model, self.prompt_cache, self.taps, self.keep_states = model, prompt_cache, taps, keep_states
        self.waiting: deque[Join] = deque()

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, handle: Hashable, prompt: list[int]) -> None:
        layers = len(self.model.layers)
        cache = self.prompt_cache.restore(prompt, layers) if self.prompt_cache else KVCache(layers)
        self.waiting.append(Join(handle, prompt, cache, cache.length))

    def remove(self, handle: Hashable) -> Join | None:
        join = next((j for j in self.waiting if j.handle == handle), None)
        if join is not None:
            self.waiting.remove(join)
        return join

    def advance(self, pacer: Pacer | None) -> Iterator[Join]:
        """Prefill the oldest prompts, as many tokens as `pacer` allows (None: all of them,
        those with nothing cached in shared passes), yielding each join as its prompt
        completes (its `states` end with the last token's), first those that already have."""
        yield from self.prefilled()  # rode whole in the pass of rows that then all ended
        if pacer is None:
            yield from self._together()
            yield from self._resumed()
        budget = None if pacer is None else pacer.tokens()
        while self.waiting and (budget is None or budget > 0):
            join = self.waiting[0]
            left = len(join.prompt) - join.cache.length
            take = left if budget is None else min(budget, left)
            start = join.cache.length
            tic = time.perf_counter()
            chunk = mx.array(join.prompt[start : start + take], mx.uint32)
            states = prefill(self.model, chunk, join.cache, self.taps)
            join.states = [*join.states, states] if self.keep_states else [states[-1:]]
            mx.eval(join.cache.state(), join.states)
            if pacer is not None:
                budget -= take
                pacer.ran(take, time.perf_counter() - tic)
            if take == left:
                yield self.waiting.popleft()

    def next_chunks(self, pacer: Pacer, rows: int, rows_tokens: int) -> tuple[list[tuple[Join, Segment]], int]:
        """The oldest joins' next prompt tokens, at most `pacer.budget` in all, as segments to
        run in the pass of `rows` rows that verify `rows_tokens` (`run_together`), and how
        many of them are a paced chunk; `rode` then commits each. A prompt of at most the
        budget (a chat turn) rides whole: the rows' step grows once, and as a row it adds
        little to their steps' cost. A longer one rides `pacer.tokens()` a step."""
        pacer.weigh(len(self.waiting), rows)
        room, chunks, paced = pacer.budget, [], 0
        for join in self.waiting:
            start = join.cache.length
            left = len(join.prompt) - start
            if not left:  # prefilled, waiting to be admitted (a seeded sample waits a step)
                continue
            if len(join.prompt) - join.cached <= pacer.budget:
                take = min(left, room)
            else:
                if start == join.cached:
                    pacer.begin(rows_tokens)
                take = paced = min(left, room, pacer.tokens())
            chunks.append((join, next_segment(join, take)))
            room -= take
            if room <= 0 or paced:
                break
        return chunks, paced

    def rode(self, join: Join, states: mx.array) -> None:
        """`join`'s chunk ran in a pass whose hidden states for it are `states` (1, n, D...)."""
        join.cache.commit(states.shape[1])
        join.states = [*join.states, states[0]] if self.keep_states else [states[0, -1:]]

    def prefilled(self) -> Iterator[Join]:
        """The joins whose prompts have run whole (in rows' passes), oldest first. None may
        stay waiting: a segment of no tokens cannot run."""
        for join in [j for j in self.waiting if j.cache.length == len(j.prompt)]:
            self.waiting.remove(join)
            yield join

    def _together(self) -> Iterator[Join]:
        """Prefill the waiting prompts that start from nothing cached in shared passes, each
        pass over prompts of similar lengths (`similar_lengths`)."""
        fresh = [j for j in self.waiting if j.cache.length == 0]
        for group in similar_lengths(fresh):
            if len(group) == 1:
                continue  # alone, the chunked path below runs it
            prefilled = prefill_together(self.model, [j.prompt for j in group], self.taps, self.keep_states)
            for join, (cache, states) in zip(group, prefilled):
                join.cache, join.states = cache, [states]
                self.waiting.remove(join)
                yield join

    def _resumed(self) -> Iterator[Join]:
        """Prefill the rests (at most `SHARED_REST` tokens each) of the waiting prompts that the
        prompt cache restored, in ONE pass where the model runs sequences together: several
        conversations resumed at once (each its new turn) would each stream the weights."""
        resumed = [j for j in self.waiting if 0 < j.cache.length and len(j.prompt) - j.cache.length <= SHARED_REST]
        if len(resumed) < 2 or not runs_together(self.model):
            return
        segments = [next_segment(join, len(join.prompt) - join.cache.length) for join in resumed]
        for join, states in zip(resumed, self.model.run_together(segments, self.taps)):
            self.rode(join, states)
        mx.eval([join.cache.state() for join in resumed], [join.states for join in resumed])
        for join in resumed:
            self.waiting.remove(join)
            yield join


def next_segment(join: Join, take: int) -> Segment:
    """`join`'s next `take` prompt tokens, at their positions, over its cache."""
    start = join.cache.length
    positions = mx.arange(start, start + take, dtype=mx.int32)[None]
    return Segment(mx.array(join.prompt[start : start + take], mx.uint32)[None], join.cache, positions)


def similar_lengths(joins: list[Join]) -> list[list[Join]]:
    """Joins grouped, shortest first, so that padding each group to its longest prompt adds at
    most `PADDING` of its real tokens."""
    groups: list[list[Join]] = []
    total = 0
    for join in sorted(joins, key=lambda j: len(j.prompt)):
        n = len(join.prompt)
        if groups and (len(groups[-1]) + 1) * n <= (1 + PADDING) * (total + n):
            groups[-1].append(join)
            total += n
        else:
            groups.append([join])
            total = n
    return groups
