"""`/v1/chat/completions`, `/v1/completions`, `/v1/models`, `/health`, `/metrics` and the chat
page at `/` (`page.py`) on FastAPI.

Handlers turn a request into prompt ids and `DecodingOptions`, queue it to the `Engine`, and
turn the engine's per-step updates into OpenAI responses: one JSON body, or server-sent
events as tokens are accepted. Text is detokenized per request, and `stop` strings are
matched on the text (the row leaves the batch as soon as one appears). Every refusal is a
4xx in OpenAI's error shape; a client that disconnects mid-stream frees its row at once.
Every 5xx is logged (logger `redrafter.errors`) with its request id, the exception and its
traceback, and the client gets the id in OpenAI's error shape and the `x-request-id` header.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import Depends, FastAPI
from fastapi import Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

from ..api import Pipeline
from ..decoding.batch import PREFILL_BUDGET, BatchDecoder
from ..decoding.prompt_cache import PromptCache
from ..drafting import TreeShape
from ..options import DecodingOptions
from ..runtime import distributed
from ..tuning.calibration import Calibration
from ..tuning.policy import StepPolicy
from .engine import Engine, QueueFull, Ticket
from .metrics import Metrics
from .page import PUBLIC, Served, page_router
from .replies import Answer, Piece, Reply, finish_reason, sse
from .requests import ApiError, Limits, ServerInfo, decoding_request
from .schema import ChatRequest, CompletionRequest, Sampling, error_body

ERROR_LOG = logging.getLogger("redrafter.errors")


def server_error(request_id: str, error: BaseException, doing: str) -> ApiError:
    """A 500 for `error`, logged with its traceback under `request_id`, which the client gets."""
    ERROR_LOG.error("request %s: %s failed: %r", request_id, doing, error, exc_info=error)
    return ApiError(
        500,
        f"{doing} failed: {error} (request {request_id})",
        kind="server_error",
        headers={"x-request-id": request_id},
    )


@dataclass(frozen=True)
class Batching:
    """How the engine batches: rows per step, requests that may wait, prompt tokens joins
    prefill per step while rows decode, bytes of finished conversations' keys/values kept for
    reuse (0: no prompt cache), and whether each step's tree is chosen for the batch as it is
    (`StepPolicy`) or fixed at the served shape."""

    max_batch: int = 8
    max_queue: int = 64
    prefill_budget: int = PREFILL_BUDGET
    prompt_cache_bytes: int = 1 << 30
    adaptive: bool = True


def serve_pipeline(
    pipeline: Pipeline,
    *,
    model_id: str,
    shape: TreeShape | None,
    lookup: bool = True,
    defaults: DecodingOptions = DecodingOptions(max_tokens=512),
    batching: Batching = Batching(),
    api_key: str | None = None,
    limits: Limits = Limits(),
    calibration: Calibration | None = None,
    sweeps: Sequence[Path] = (),
) -> FastAPI:
    """The app for a loaded pipeline: its engine decodes up to `batching.max_batch` requests
    per step with tree `shape` (or, adaptive, the best of `step_choices(shape)` for each
    step); `defaults` fill a request's missing max_tokens and temperature. The chat page
    shows `calibration` (what `shape` was chosen from) and the `sweeps` folders."""
    loaded, drafter = pipeline.loaded, pipeline.drafter
    pipeline.materialize()
    make_decoder = decoder_factory(pipeline, shape, lookup, batching, calibration)
    info = ServerInfo(
        model_id=model_id,
        tokenizer=loaded.tokenizer,
        vicuna=loaded.is_vicuna,
        context_length=loaded.model.args.max_position_embeddings or None,
        vocab_size=loaded.config["vocab_size"],
        defaults=defaults,
        drafter=drafter.kind if drafter else "none",
        api_key=api_key,
        limits=limits,
    )
    lead = distributed.world() is not None
    engine = Engine(make_decoder, max_batch=batching.max_batch, max_queue=batching.max_queue, lead=lead)
    adaptive = batching.adaptive and not lead
    return create_app(engine, info, Served(shape, adaptive, calibration, tuple(sweeps)))


def decoder_factory(
    pipeline: Pipeline,
    shape: TreeShape | None,
    lookup: bool,
    batching: Batching,
    calibration: Calibration | None = None,
) -> Callable[[], BatchDecoder]:
    """How the engine builds its `BatchDecoder` (again after a failed step), the same on every
    rank of a distributed server: there nothing follows a rank's own clock (no policy; joins
    in `prefill_budget` chunks), so that all ranks run the same steps. `calibration`: the
    policy's prior."""
    loaded, drafter = pipeline.loaded, pipeline.drafter
    timed = distributed.world() is None
    prompt_cache = PromptCache(batching.prompt_cache_bytes) if batching.prompt_cache_bytes else None

    def make_decoder() -> BatchDecoder:
        policy = None
        if batching.adaptive and drafter is not None and shape is not None:
            policy = StepPolicy(shape, calibration)
        return BatchDecoder(
            loaded.model,
            drafter,
            shape,
            lookup=lookup,
            eos_ids=loaded.tokenizer.eos_token_ids,
            policy=policy,
            prefill_budget=batching.prefill_budget,
            prompt_cache=prompt_cache,
            timed=timed,
        )

    return make_decoder


def create_app(engine: Engine, info: ServerInfo, served: Served = Served()) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        engine.start()
        yield
        engine.stop()

    async def check_key(request: HttpRequest) -> None:
        public = request.method == "GET" and request.url.path in PUBLIC
        if info.api_key and not public and request.headers.get("authorization") != f"Bearer {info.api_key}":
            raise ApiError(401, "invalid or missing API key", code="invalid_api_key")

    async def check_size(request: HttpRequest) -> None:
        declared = request.headers.get("content-length", "")
        size = int(declared) if declared.isdigit() else len(await request.body())
        if size > info.limits.max_body_bytes:
            raise ApiError(
                413,
                f"the request body is {size} bytes; this server takes at most {info.limits.max_body_bytes} "
                "(--max-body-bytes)",
                code="request_too_large",
            )

    # Dependencies, not middlewares: Starlette's middlewares wrap `receive`, which hides a
    # client's disconnect from the handlers.
    app = FastAPI(title="redrafter-mlx", lifespan=lifespan, dependencies=[Depends(check_key), Depends(check_size)])
    metrics = Metrics(lambda: engine.queued, lambda: engine.running)

    @app.exception_handler(ApiError)
    async def api_error(_, error: ApiError):
        return JSONResponse(error.body, status_code=error.status, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_, error: RequestValidationError):
        first = error.errors()[0]
        if first.get("type") == "json_invalid":
            return JSONResponse(error_body("the request body is not valid JSON"), status_code=400)
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "body"
        message = "unknown field" if first.get("type") == "extra_forbidden" else first.get("msg", "invalid value")
        return JSONResponse(error_body(f"{where}: {message}", param=where), status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(_, error: HTTPException):
        return JSONResponse(error_body(str(error.detail)), status_code=error.status_code)

    @app.exception_handler(Exception)
    async def unexpected(http: HttpRequest, error: Exception):
        request_id = "req-" + uuid.uuid4().hex[:24]
        failed = server_error(request_id, error, f"{http.method} {http.url.path}")
        return JSONResponse(failed.body, status_code=failed.status, headers=failed.headers)

    app.include_router(page_router(info, served))

    @app.get("/health")
    async def health() -> dict:
        return {
            "status": "ok",
            "model": info.model_id,
            "drafter": info.drafter,
            "running": engine.running,
            "queued": engine.queued,
        }

    @app.get("/metrics")
    async def metrics_page() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict:
        return {
            "object": "list",
            "data": [{"id": info.model_id, "object": "model", "created": 0, "owned_by": "redrafter-mlx"}],
        }

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, http: HttpRequest):
        return await complete(body, http, chat=True)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, http: HttpRequest):
        return await complete(body, http, chat=False)

    async def complete(body: Sampling, http: HttpRequest, chat: bool):
        request = decoding_request(info, body)
        reply = Reply(chat, info.model_id, len(request.prompt), request.logprobs is not None)
        try:
            ticket = engine.submit(request)
        except QueueFull as full:
            raise ApiError(
                429,
                f"the server is busy: {full}",
                code="rate_limit_exceeded",
                kind="rate_limit_error",
                headers={"Retry-After": "1"},
            ) from None
        timeout = info.limits.request_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        answer = Answer(info.tokenizer, body.stop)
        endpoint = "chat" if chat else "completions"

        def done(status: int) -> None:
            metrics.record(
                endpoint,
                status,
                finish_reason(answer.finish_reason) or "cancelled",
                answer.stats,
                answer.started,
                answer.first_at,
            )

        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            events = stream(engine, ticket, answer, reply, usage, deadline, done)
            return StreamingResponse(events, media_type="text/event-stream", headers={"x-request-id": reply.id})
        text = ""
        try:
            async for pieces in updates(engine, ticket, answer, reply.id, deadline):
                text += "".join(p.text for p in pieces)
                if await http.is_disconnected():  # nobody to answer: free the row now
                    break
        except ApiError as error:
            done(error.status)
            raise
        done(200)
        return reply.whole(text, answer)

    return app


async def updates(
    engine: Engine, ticket: Ticket, answer: Answer, request_id: str, deadline: float | None = None
) -> AsyncIterator[list[Piece]]:
    """The answer's text as each step's `Piece`s, until it finishes or its `deadline` (monotonic
    seconds) passes; the row is freed however this ends (finished, stopped by a stop string,
    out of time, or the consumer gone). A failure is a logged 500 (`server_error`)."""
    try:
        while answer.finish_reason is None:
            try:
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                event = await asyncio.wait_for(ticket.events.get(), left)
            except asyncio.TimeoutError:
                answer.finish_reason = "length"
                engine.cancel(ticket)
                break
            if isinstance(event, Exception):
                raise server_error(request_id, event, "decoding")
            pieces = answer.add(event)
            if pieces:
                yield pieces
    finally:
        if answer.finish_reason is None or answer.finish_reason == "stop":
            engine.cancel(ticket)


async def stream(
    engine: Engine,
    ticket: Ticket,
    answer: Answer,
    reply: Reply,
    usage: bool,
    deadline: float | None,
    done: Callable[[int], None],
) -> AsyncIterator[str]:
    if reply.chat:
        yield sse(reply.chunk(role=True))
    try:
        async for pieces in updates(engine, ticket, answer, reply.id, deadline):
            yield sse(reply.chunk(pieces, answer=answer))
    except Exception as error:  # the headers are sent: the error goes in the stream
        failed = error if isinstance(error, ApiError) else server_error(reply.id, error, "streaming")
        done(failed.status)
        yield sse(failed.body)
        yield "data: [DONE]\n\n"
        return
    done(200)
    yield sse(reply.chunk(finish=answer.finish_reason, answer=answer))
    if usage:
        yield sse(reply.usage_chunk(answer))
    yield "data: [DONE]\n\n"
