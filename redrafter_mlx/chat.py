"""A multi-turn conversation that keeps the KV cache between turns.

Each turn renders the whole conversation with the model's format (chat template, or the
Vicuna v1.1 format), finds how much of it the cache already holds (longest common prefix
of token ids), rewinds the cache to there and feeds only the rest. Re-tokenisation
differences or a template that rewrites history cost a little recomputation, never a
wrong context.
"""

from __future__ import annotations

from collections.abc import Iterator

from .api import Pipeline
from .decoding import Step
from .formats.loading import LoadedModel
from .options import DecodingOptions
from .prompting import Message, encode_messages
from .tuning import DraftPlan


class ChatSession:
    def __init__(
        self,
        pipeline: Pipeline,
        options: DecodingOptions = DecodingOptions(max_tokens=512),
        *,
        system_prompt: str | None = None,
        drafting: DraftPlan | None = None,
    ):
        """`drafting` defaults to the pipeline's plan for `options`."""
        self.pipeline, self.options = pipeline, options
        self.drafting = drafting or pipeline.plan(options)
        self.system_prompt = system_prompt
        self.reset()

    @property
    def loaded(self) -> LoadedModel:
        return self.pipeline.loaded

    def reset(self) -> None:
        """Forget the conversation (the cache is kept allocated and rewound)."""
        self.messages: list[Message] = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self.cache = getattr(self, "cache", None) or self.loaded.model.make_cache()
        self.cache.trim(0)
        self.cached_ids: list[int] = []
        self.reused_tokens = 0  # prompt tokens the last turn did not recompute

    def send(self, text: str) -> Iterator[Step]:
        """Stream the assistant's answer to `text`; the answer joins the history as it grows,
        so an interrupted answer is kept as far as it got."""
        ids = encode_messages(
            self.loaded.tokenizer, [*self.messages, {"role": "user", "content": text}], vicuna=self.loaded.is_vicuna
        )
        keep = min(common_prefix(self.cached_ids, ids), len(ids) - 1)  # feed at least one token
        self.cache.trim(keep)
        self.cached_ids = self.cached_ids[:keep]
        self.reused_tokens = keep
        # Raises InputError when the conversation no longer fits the context: the turn is not kept.
        steps = self.pipeline.steps(ids[keep:], self.options, self.drafting, cache=self.cache, context=ids[:keep])
        self.messages += [{"role": "user", "content": text}, {"role": "assistant", "content": ""}]
        answer: list[int] = []
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
