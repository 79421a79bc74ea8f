"""From an OpenAI request body to the engine's `Request`: the prompt's token ids (chat
template or raw ids), the decoding options with the server's defaults, and every refusal as
an `ApiError` in OpenAI's error shape."""

from __future__ import annotations

from dataclasses import dataclass

from ..decoding.batch import Request
from ..options import DecodingOptions
from ..prompting import encode_messages
from .schema import ChatRequest, CompletionRequest, error_body


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.body, self.headers = status, error_body(message, kind, param, code), headers


@dataclass(frozen=True)
class Limits:
    """What one request may take: its body's size, and its time from arrival to its last
    token (None: no deadline; past it the answer ends with finish_reason "length")."""

    max_body_bytes: int = 1 << 20
    request_timeout: float | None = None


@dataclass
class ServerInfo:
    """What the handlers need besides the engine."""

    model_id: str  # the name clients pass as `model`
    tokenizer: object  # mlx-lm TokenizerWrapper
    vicuna: bool  # Vicuna's conversation format instead of a chat template
    context_length: int | None
    vocab_size: int
    defaults: DecodingOptions  # the server's --max-tokens and --temp
    drafter: str  # the drafter kind, or "none"
    api_key: str | None = None
    limits: Limits = Limits()


def prompt_ids(info: ServerInfo, body: ChatRequest | CompletionRequest) -> list[int]:
    if isinstance(body, ChatRequest):
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in body.messages]
        return encode_messages(info.tokenizer, messages, vicuna=info.vicuna)
    if isinstance(body.prompt, str):
        return info.tokenizer.encode(body.prompt)
    if not all(0 <= t < info.vocab_size for t in body.prompt):
        raise ApiError(400, f"prompt token ids must be in [0, {info.vocab_size})", "prompt")
    return list(body.prompt)


def decoding_request(info: ServerInfo, body: ChatRequest | CompletionRequest) -> Request:
    """The engine's request, or an ApiError for an unknown model or a context overflow."""
    if body.model != info.model_id:
        raise ApiError(
            404,
            f"model {body.model!r} is not served here; this server runs {info.model_id!r}",
            "model",
            "model_not_found",
        )
    ids = prompt_ids(info, body)
    asked = body.max_tokens or getattr(body, "max_completion_tokens", None)
    limit = info.context_length
    if limit and len(ids) + (asked or 1) > limit:
        raise ApiError(
            400,
            f"this model's context is {limit} tokens; the prompt has {len(ids)} and {asked or 1} more were asked for",
            "messages" if isinstance(body, ChatRequest) else "prompt",
            "context_length_exceeded",
        )
    bias = body.logit_bias or {}
    if any(not 0 <= token < info.vocab_size for token in bias):
        raise ApiError(400, f"logit_bias: token ids must be in [0, {info.vocab_size})", "logit_bias")
    max_tokens = asked or min(info.defaults.max_tokens, limit - len(ids) if limit else info.defaults.max_tokens)
    temp = info.defaults.temp if body.temperature is None else body.temperature
    options = DecodingOptions(
        max_tokens=max_tokens,
        temp=temp,
        top_p=0.0 if body.top_p in (None, 1) else body.top_p,
        top_k=body.top_k or 0,
        seed=body.seed,
        logit_bias=tuple(sorted(bias.items())),
    )
    if isinstance(body, ChatRequest):
        if body.top_logprobs and not body.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs")
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
    else:
        logprobs = body.logprobs
    return Request(ids, options, logprobs)
