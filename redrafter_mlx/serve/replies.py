"""One answer as OpenAI shapes it: text detokenized per request, cut at `stop` strings, and
the response body or stream chunks around it (with speculation's figures beside `usage`)."""

from __future__ import annotations

import copy
import json
import time
import uuid

from ..decoding import GenerationStats
from ..decoding.batch import Update


class StopMatcher:
    """Cuts the text at the first stop string; holds back a tail that may begin one."""

    def __init__(self, stops: list[str]):
        self.stops, self.held = stops, ""

    def feed(self, text: str) -> tuple[str, bool]:
        """(text that is safe to emit, whether a stop string was found)."""
        text = self.held + text
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return text[: min(hits)], True
        keep = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], False

    def flush(self) -> str:
        text, self.held = self.held, ""
        return text


class Answer:
    """One request's text as its tokens arrive."""

    def __init__(self, tokenizer, stops: list[str]):
        self.detokenizer = copy.copy(tokenizer.detokenizer)  # its state is per answer
        self.detokenizer.reset()
        self.stops = StopMatcher(stops)
        self.tokens = 0
        self.stats = GenerationStats()
        self.finish_reason: str | None = None

    def add(self, update: Update) -> str:
        for token in update.tokens:
            self.detokenizer.add_token(token)
        self.tokens += len(update.tokens)
        self.stats = update.stats
        text, stopped = self.stops.feed(self.detokenizer.last_segment)
        if stopped:
            self.finish_reason = "stop"
        elif update.finish_reason:
            self.detokenizer.finalize()
            text += self.stops.feed(self.detokenizer.last_segment)[0] + self.stops.flush()
            self.finish_reason = update.finish_reason
        return text

    def usage(self, prompt_tokens: int) -> dict:
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": self.tokens,
            "total_tokens": prompt_tokens + self.tokens,
        }

    def extension(self) -> dict:
        """Speculative decoding's figures, beside OpenAI's `usage`."""
        return {"tokens_per_step": round(self.stats.tokens_per_step, 3), "steps": self.stats.steps}


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


class Reply:
    """OpenAI's response and chunk shapes for one request."""

    def __init__(self, chat: bool, model: str, prompt_tokens: int):
        self.chat, self.model, self.prompt_tokens = chat, model, prompt_tokens
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def _frame(self, kind: str, choices: list[dict]) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}

    def whole(self, text: str, answer: Answer) -> dict:
        finish = finish_reason(answer.finish_reason)
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            if self.chat
            else {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        )
        return {
            **self._frame("chat.completion" if self.chat else "text_completion", [choice]),
            "usage": answer.usage(self.prompt_tokens),
            "redrafter": answer.extension(),
        }

    def chunk(self, text: str = "", role: bool = False, finish: str | None = None) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason(finish)}
            return self._frame("chat.completion.chunk", [choice])
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason(finish)}
        return self._frame("text_completion", [choice])

    def usage_chunk(self, answer: Answer) -> dict:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._frame(kind, []), "usage": answer.usage(self.prompt_tokens), "redrafter": answer.extension()}


def finish_reason(reason: str | None) -> str | None:
    """OpenAI's names: an answer cut by shutdown ends as "length" would, not with a new word."""
    return None if reason is None else "stop" if reason == "stop" else "length"
