"""A multi-turn conversation that keeps the KV cache between turns.

Each turn renders the whole conversation with the model's format (chat template, or the
Vicuna v1.1 format), finds how much of it the cache already holds (longest common prefix
of token ids), rewinds the cache to there and feeds only the rest. Re-tokenisation
differences or a template that rewrites history cost a little recomputation, never a
wrong context.
"""

from __future__ import annotations

from collections.abc import Iterator

from .decoding import Sampler, Step, generate
from .drafter import Drafter
from .loading import LoadedModel
from .prompting import Message, encode_messages
from .tuning import AdaptiveLength


class ChatSession:
    def __init__(
        self,
        loaded: LoadedModel,
        drafter: Drafter | None,
        *,
        system_prompt: str | None = None,
        sampler: Sampler | None = None,
        max_tokens: int = 512,
        beam_width: int = 3,
        beam_length: int = 5,
        search_width: int | None = None,
        lookup: bool = True,
        verify_lengths: list[int] | None = None,
        adapt: AdaptiveLength | None = None,
    ):
        self.loaded, self.drafter = loaded, drafter
        self.system_prompt = system_prompt
        self.options = {"sampler": sampler, "max_tokens": max_tokens,
                        "beam_width": beam_width, "beam_length": beam_length,
                        "search_width": search_width, "lookup": lookup, "verify_lengths": verify_lengths,
                        "adapt": adapt}
        self.reset()

    def reset(self) -> None:
        """Forget the conversation (the cache is kept allocated and rewound)."""
        self.messages: list[Message] = (
            [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        )
        self.cache = getattr(self, "cache", None) or self.loaded.model.make_cache()
        self.cache.trim(0)
        self.cached_ids: list[int] = []
        self.reused_tokens = 0  # prompt tokens the last turn did not recompute

    def send(self, text: str) -> Iterator[Step]:
        """Stream the assistant's answer to `text`; the answer joins the history as it grows,
        so an interrupted answer is kept as far as it got."""
        self.messages.append({"role": "user", "content": text})
        ids = encode_messages(self.loaded.tokenizer, self.messages, vicuna=self.loaded.is_vicuna)
        keep = common_prefix(self.cached_ids, ids)
        keep = min(keep, len(ids) - 1)  # feed at least one token
        self.cache.trim(keep)
        self.reused_tokens = keep
        answer: list[int] = []
        self.messages.append({"role": "assistant", "content": ""})
        steps = generate(
            self.loaded.model, ids[keep:], drafter=self.drafter, cache=self.cache, context=ids[:keep],
            eos_ids=self.loaded.tokenizer.eos_token_ids, **self.options,
        )
        try:
            for step in steps:
                answer += step.tokens
                self.messages[-1]["content"] = self.loaded.tokenizer.decode(answer)
                yield step
        finally:
            steps.close()  # runs the decoder's cache bookkeeping even when interrupted
            self.cached_ids = ids + answer[:-1] if answer else list(ids)
            self.cached_ids = self.cached_ids[: self.cache.length]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
