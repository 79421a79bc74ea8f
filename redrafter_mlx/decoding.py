"""Decoding loops: plain autoregressive and ReDrafter, with one interface.

Both are generators yielding `Step`s (the tokens a step produced plus the running
`GenerationStats`), so the CLI, chat and bench never care which one runs. Like mlx-lm's
`generate_step`, the next forward pass is queued with `mx.async_eval` before the current
token is read, so Python graph building overlaps compute.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import mlx.core as mx
from mlx_lm.sample_utils import make_sampler

from .cache import KVCache
from .models.llama import Model

Sampler = Callable[[mx.array], mx.array]  # log-probs (..., V) -> token ids (...)
PREFILL_CHUNK = 512


@dataclass
class GenerationStats:
    """Counters every decoder keeps; `steps` = LLM forward passes after prefill."""

    prompt_tokens: int = 0
    num_tokens: int = 0
    steps: int = 0
    prompt_time: float = 0.0
    generation_time: float = 0.0
    accepted_per_step: list[int] = field(default_factory=list)
    verified_tokens: list[int] = field(default_factory=list)
    phase_times: dict[str, float] = field(default_factory=dict)
    finish_reason: str = "length"  # "stop" when an EOS token ended generation

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.prompt_time if self.prompt_time else 0.0

    @property
    def generation_tps(self) -> float:
        return self.num_tokens / self.generation_time if self.generation_time else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Tokens produced per forward pass after prefill (AR: 1.0)."""
        steps = len(self.accepted_per_step)
        return sum(self.accepted_per_step) / steps if steps else 1.0


@dataclass
class Step:
    tokens: list[int]  # tokens this step produced, in order; never an EOS
    stats: GenerationStats


def make_greedy_or_sampler(temp: float = 0.0, top_p: float = 0.0, top_k: int = 0) -> Sampler:
    """mlx-lm's samplers: argmax at temp 0, otherwise top-p/top-k then categorical."""
    return make_sampler(temp=temp, top_p=top_p, top_k=top_k)


def log_softmax(logits: mx.array) -> mx.array:
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def prefill(model: Model, prompt: mx.array, cache: KVCache) -> mx.array:
    """Run the prompt (T,) through the model in chunks; commit it; return the last hidden (D,)."""
    for start in range(0, prompt.shape[0], PREFILL_CHUNK):
        chunk = prompt[start : start + PREFILL_CHUNK][None]
        hidden = model(chunk, cache)
        cache.commit(chunk.shape[1])
        if start + PREFILL_CHUNK < prompt.shape[0]:
            mx.eval(cache.state())
    return hidden[0, -1]


def generate_ar(
    model: Model,
    prompt: list[int],
    *,
    max_tokens: int = 256,
    sampler: Sampler | None = None,
    eos_ids: set[int] | frozenset[int] = frozenset(),
    cache: KVCache | None = None,
) -> Iterator[Step]:
    """Plain autoregressive decoding: one forward pass, one token.

    `cache` may already hold earlier turns; `prompt` is then only the new tokens. On return
    the cache holds the prompt and every emitted token except the last one. Generation
    stops before an EOS token, which is not emitted (as in mlx-lm).
    """
    sampler = sampler or make_greedy_or_sampler()
    cache = cache if cache is not None else model.make_cache()
    stats = GenerationStats(prompt_tokens=len(prompt))
    if max_tokens <= 0:
        return
    start_length = cache.length

    def next_token(hidden: mx.array) -> mx.array:
        return sampler(log_softmax(model.logits(hidden)))

    def forward(token: mx.array) -> mx.array:
        hidden = model(token.reshape(1, 1), cache)
        cache.commit(1)
        return next_token(hidden[0, -1])

    try:
        tic = time.perf_counter()
        token = next_token(prefill(model, mx.array(prompt, mx.uint32), cache))
        mx.async_eval(token)
        while True:
            upcoming = forward(token) if stats.num_tokens + 1 < max_tokens else None
            if upcoming is not None:
                mx.async_eval(upcoming)
            value = token.item()
            now = time.perf_counter()
            if stats.num_tokens == 0 and not stats.prompt_time:
                stats.prompt_time, tic = now - tic, now
            else:
                stats.steps += 1
                stats.accepted_per_step.append(1)
            if value in eos_ids:
                stats.finish_reason = "stop"
                break
            stats.num_tokens += 1
            stats.generation_time = now - tic
            yield Step([value], stats)
            if upcoming is None:
                break
            token = upcoming
    finally:
        cache.trim(start_length + len(prompt) + max(stats.num_tokens - 1, 0))
