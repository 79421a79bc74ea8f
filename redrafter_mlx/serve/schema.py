"""The OpenAI request bodies the server takes, checked field by field.

Unknown fields are refused rather than ignored, so a client never believes a setting took
effect that did not; the fields OpenAI clients (LangChain, the AI SDK) commonly send with
neutral values (`n=1`, `user`, zero penalties, `stream_options`, `response_format:
{"type": "text"}`, `tool_choice: "none"`) are accepted, and any other value of them is
refused naming the field. `logit_bias` (token id -> -100..100, as OpenAI's) is applied
exactly; `logprobs`/`top_logprobs` (chat, up to 20) and `logprobs` (completions, up to 5)
report the LLM's log-probabilities. `top_k` is an extension, as in mlx-lm's server.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..decoding.logprobs import MAX_TOP_LOGPROBS

NonNegative = Annotated[float, Field(ge=0.0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(Strict):
    include_usage: bool = False


class ResponseFormat(Strict):
    type: Literal["text"]


class TextPart(Strict):
    type: Literal["text"]
    text: str


class ChatMessage(Strict):
    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class Sampling(Strict):
    """What both endpoints take besides the prompt."""

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    seed: int | None = None
    stop: str | list[str] | None = Field(None, validate_default=True)
    n: Literal[1] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: Literal[0, 0.0] = 0.0
    frequency_penalty: Literal[0, 0.0] = 0.0
    logit_bias: dict[int, Annotated[float, Field(ge=-100, le=100)]] | None = None

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, stop: str | list[str] | None) -> list[str]:
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop takes up to 4 non-empty strings")
        return stops


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: ResponseFormat | None = None
    tool_choice: Literal["none"] | None = None


class CompletionRequest(Sampling):
    prompt: str | list[int] = Field(min_length=1)
    echo: Literal[False] = False
    logprobs: int | None = Field(None, ge=0, le=5)


def error_body(
    message: str, kind: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
