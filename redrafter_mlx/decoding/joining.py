"""Requests on their way into a batch: prompts prefilled a chunk at a time between steps.

A joining prompt of 2,000 tokens takes seconds to prefill on a CPU; run at once it would
stall every running row for all of that. So the batch decoder gives joins a token budget per
step (`advance`), spent on the oldest join first, and runs the whole of every waiting prompt
only when no row is decoding. A prompt that starts with a sequence the `PromptCache` holds
prefills only the rest of it.
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

    def advance(self, budget: int | None) -> Iterator[Join]:
        """Prefill the oldest prompts, at most `budget` tokens (None: all of them), yielding
        each join as its prompt completes (its `states` end with the last token's, lazily)."""
        while self.waiting and (budget is None or budget > 0):
            join = self.waiting[0]
            left = len(join.prompt) - join.cache.length
            take = left if budget is None else min(budget, left)
            start = join.cache.length
            chunk = mx.array(join.prompt[start : start + take], mx.uint32)
            states = prefill(self.model, chunk, join.cache, self.taps)
            join.states = [*join.states, states] if self.keep_states else [states[-1:]]
            if budget is not None:
                budget -= take
            if take == left:
                yield self.waiting.popleft()
            else:
                mx.eval(join.cache.state(), join.states)
