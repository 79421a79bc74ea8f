"""One answer as OpenAI shapes it: text detokenized per request, cut at `stop` strings, and
the response body or stream chunks around it (with speculation's figures beside `usage`).

Stream chunks carry an extension OpenAI clients ignore, `redrafter`: each token's text and how
decoding came by it (`Piece`), and the answer's running tokens/step, tokens/s and speed-up over
a plain step of the same batch (None until the server has timed one)."""

from __future__ import annotations

import copy
import json
import time
import uuid
from dataclasses import asdict, dataclass
from itertools import accumulate

from ..decoding import GenerationStats
from ..decoding.batch import Update
from ..decoding.logprobs import TokenLogprob


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


@dataclass
class Piece:
    """The text a token added to the answer, and where the token came from: "llm" (the
    verifier's own token, depth 0), "draft" (a drafted beam's token accepted at `depth`) or
    "lookup" (the context lookup's copy, accepted at `depth`)."""

    text: str
    source: str
    depth: int


class Answer:
    """One request's text as its tokens arrive."""

    def __init__(self, tokenizer, stops: list[str]):
        self.tokenizer = tokenizer
        self.detokenizer = copy.copy(tokenizer.detokenizer)  # its state is per answer
        self.detokenizer.reset()
        self.stops = StopMatcher(stops)
        self.tokens = 0
        self.stats = GenerationStats()
        self.finish_reason: str | None = None
        self.logprobs: list[TokenLogprob] = []
        self.reported = 0  # logprobs already sent in stream chunks
        self.started = time.perf_counter()  # the request's arrival
        self.first_at: float | None = None  # when its first token came
        self.plain_ms: float | None = None  # a plain step of the batch, as last measured

    def add(self, update: Update) -> list[Piece]:
        """The update's text, a piece per token (a token whose text waits for the next one,
        a partial character or a possible stop string, adds none)."""
        self.tokens += len(update.tokens)
        self.logprobs += update.logprobs or []
        if update.tokens and self.first_at is None:
            self.first_at = time.perf_counter()
        self.stats = update.stats
        self.plain_ms = update.plain_ms or self.plain_ms
        pieces, source = [], "lookup" if update.copied else "draft"
        for i, token in enumerate(update.tokens):
            self.detokenizer.add_token(token)
            text, stopped = self.stops.feed(self.detokenizer.last_segment)
            pieces.append(Piece(text, source, i + 1) if i < update.drafted else Piece(text, "llm", 0))
            if stopped:
                self.finish_reason = "stop"
                break
        if self.finish_reason is None and update.finish_reason:
            self.detokenizer.finalize()
            tail = self.stops.feed(self.detokenizer.last_segment)[0] + self.stops.flush()
            pieces.append(Piece(tail, pieces[-1].source, pieces[-1].depth) if pieces else Piece(tail, "llm", 0))
            self.finish_reason = update.finish_reason
        return [p for p in pieces if p.text]

    def usage(self, prompt_tokens: int) -> dict:
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": self.tokens,
            "total_tokens": prompt_tokens + self.tokens,
            "prompt_tokens_details": {"cached_tokens": self.stats.cached_tokens},
        }

    def extension(self) -> dict:
        """Speculative decoding's figures, beside OpenAI's `usage`."""
        return acceptance(self.stats)

    def live(self, pieces: list[Piece]) -> dict:
        """A stream chunk's extension: its pieces and the answer's running figures."""
        stats, speedup = self.stats, None
        if self.plain_ms and stats.generation_time:  # tokens per verify step's time vs 1 per plain step
            speedup = round(sum(stats.accepted_per_step) / stats.generation_time * self.plain_ms / 1e3, 3)
        return {
            "tokens": [asdict(p) for p in pieces],
            "tokens_per_step": round(stats.tokens_per_step, 3),
            "tokens_per_s": round(stats.generation_tps, 2),
            "speedup": speedup,
        }


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def logprobs_body(answer: Answer, chat: bool, entries: list[TokenLogprob]) -> dict:
    """OpenAI's `logprobs` object for these tokens: chat's `content` list, or the completions
    API's parallel lists."""
    text = answer.tokenizer.decode

    def item(token: int, logprob: float) -> dict:
        piece = text([token])
        return {"token": piece, "logprob": logprob, "bytes": list(piece.encode())}

    if chat:
        content = [item(e.token, e.logprob) | {"top_logprobs": [item(t, lp) for t, lp in e.top]} for e in entries]
        return {"content": content}
    tokens = [text([e.token]) for e in entries]
    offsets = list(accumulate((len(t) for t in tokens[:-1]), initial=0)) if tokens else []
    return {
        "tokens": tokens,
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{text([t]): lp for t, lp in e.top} for e in entries],
        "text_offset": offsets,
    }


def acceptance(stats: GenerationStats) -> dict:
    """Speculation's figures for one answer: drafts verified and accepted, tokens per step,
    and per depth d the share of drafting steps that accepted at least d drafts."""
    drafting = [
        (a - 1, v - 1) for a, v, c in zip(stats.accepted_per_step, stats.verified_tokens, stats.tree_cells) if c > 1
    ]
    deepest = max((a for a, _ in drafting), default=0)
    return {
        "tokens_per_step": round(stats.tokens_per_step, 3),
        "steps": stats.steps,
        "drafted": sum(v for _, v in drafting),
        "accepted": sum(a for a, _ in drafting),
        "acceptance_by_depth": [
            round(sum(a >= d for a, _ in drafting) / len(drafting), 3) for d in range(1, deepest + 1)
        ],
    }


class Reply:
    """OpenAI's response and chunk shapes for one request."""

    def __init__(self, chat: bool, model: str, prompt_tokens: int, logprobs: bool = False):
        self.chat, self.model, self.prompt_tokens, self.logprobs = chat, model, prompt_tokens, logprobs
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def _frame(self, kind: str, choices: list[dict]) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}

    def whole(self, text: str, answer: Answer) -> dict:
        finish = finish_reason(answer.finish_reason)
        logprobs = logprobs_body(answer, self.chat, answer.logprobs) if self.logprobs else None
        choice = (
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": finish,
            }
            if self.chat
            else {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
        )
        return {
            **self._frame("chat.completion" if self.chat else "text_completion", [choice]),
            "usage": answer.usage(self.prompt_tokens),
            "redrafter": answer.extension(),
        }

    def chunk(
        self,
        pieces: list[Piece] = (),
        role: bool = False,
        finish: str | None = None,
        answer: Answer | None = None,
    ) -> dict:
        """A stream chunk of `pieces`; with `answer`, the logprobs of its tokens not yet sent
        and (with pieces) the `redrafter` extension."""
        text = "".join(p.text for p in pieces)
        logprobs = None
        if self.logprobs and answer is not None:
            logprobs = logprobs_body(answer, self.chat, answer.logprobs[answer.reported :])
            answer.reported = len(answer.logprobs)
        extension = {"redrafter": answer.live(pieces)} if pieces and answer is not None else {}
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason(finish)}
            return self._frame("chat.completion.chunk", [choice]) | extension
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason(finish)}
        return self._frame("text_completion", [choice]) | extension

    def usage_chunk(self, answer: Answer) -> dict:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._frame(kind, []), "usage": answer.usage(self.prompt_tokens), "redrafter": answer.extension()}


def finish_reason(reason: str | None) -> str | None:
    """OpenAI's names: an answer cut by shutdown ends as "length" would, not with a new word."""
    return None if reason is None else "stop" if reason == "stop" else "length"
