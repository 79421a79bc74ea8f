"""Requests on their way into a batch: prompts prefilled a chunk at a time between steps.

A joining prompt of 2,000 tokens takes seconds to prefill on a CPU; run at once it would
stall every running row for all of that. So while rows decode, a step prefills only as many
prompt tokens as take about `PREFILL_SHARE` of the rows' own step time (`Pacer`), spent on
the oldest join first: the running rows' steps stay under twice their normal length. The
whole of every waiting prompt runs only when no row is decoding. A prompt that starts with
a sequence the `PromptCache` holds prefills only the rest of it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

import mlx.core as mx

from ..models.cache import KVCache
from ..models.llm import LLM, prefill
from .prompt_cache import PromptCache

PREFILL_SHARE = 1.0  # of the rows' step time, what a step's prefill may take
MIN_CHUNK = 8  # prompt tokens a step prefills at least, so that a join always progresses
FIRST_CHUNK = 64  # before any chunk was timed: a chat prompt joins in one step


class Pacer:
    """Prompt tokens a step may prefill while rows decode: each chunk's size is the last one's
    scaled by how far its time was from `PREFILL_SHARE` of the rows' step (a pass has a fixed
    cost, and a chunk late in a long prompt attends to more keys), within [MIN_CHUNK, budget].
    Untimed (`timed=False`: ranks of a distributed server must cut prompts alike), every chunk
    is `budget` tokens."""

    def __init__(self, budget: int, timed: bool = True):
        self.budget, self.timed = budget, timed
        self.size = float(min(budget, FIRST_CHUNK) if timed else budget)
        self.step_s: float | None = None  # the rows' last step, without prefill

    def tokens(self) -> int:
        return max(MIN_CHUNK, min(self.budget, int(self.size)))

    def ran(self, tokens: int, seconds: float) -> None:
        """A chunk of `tokens` took `seconds`."""
        if self.timed and self.step_s is not None and tokens >= int(self.size):  # a whole chunk: it measures
            scale = min(max(PREFILL_SHARE * self.step_s / seconds, 0.5), 1.5)
            self.size = min(max(self.size * scale, MIN_CHUNK), self.budget)


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
        """Prefill the oldest prompts, as many tokens as `pacer` allows (None: all of them),
        yielding each join as its prompt completes (its `states` end with the last token's)."""
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
