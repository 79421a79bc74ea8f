"""`redrafter serve`: an OpenAI-compatible HTTP server with batched ReDrafter decoding."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from redrafter_mlx import runtime
from redrafter_mlx.decoding.batch import PREFILL_BUDGET
from redrafter_mlx.formats.loading import DEFAULT_MODEL
from redrafter_mlx.options import DecodingOptions

from .app import app, console, friendly_errors
from .options import (
    DrafterOpt,
    DraftModelOpt,
    DTypeOpt,
    Mode,
    ModelOpt,
    ModeOpt,
    decoding_options,
    load_pipeline,
    plan,
)

SERVER = "Server"


@app.command()
@friendly_errors
@decoding_options(512, "temp", "beam_width", "beam_length", "search_width", "node_budget", "lookup", "adaptive")
def serve(
    model: ModelOpt = DEFAULT_MODEL,
    drafter: DrafterOpt = None,
    draft_model: DraftModelOpt = None,
    mode: ModeOpt = Mode.redrafter,
    dtype: DTypeOpt = None,
    host: Annotated[
        str,
        typer.Option(
            "--host", rich_help_panel=SERVER, help="Address to bind (0.0.0.0 exposes the server to the network)."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, rich_help_panel=SERVER)] = 8080,
    max_batch: Annotated[
        int,
        typer.Option(
            "--max-batch", min=1, rich_help_panel=SERVER, help="Requests decoded together (rows of one verify pass)."
        ),
    ] = 8,
    max_queue: Annotated[
        int,
        typer.Option(
            "--max-queue", min=0, rich_help_panel=SERVER, help="Requests that may wait for a row; more get HTTP 429."
        ),
    ] = 64,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="REDRAFTER_API_KEY",
            rich_help_panel=SERVER,
            help="Require 'Authorization: Bearer KEY' on every request.",
        ),
    ] = None,
    model_id: Annotated[
        str | None,
        typer.Option("--model-id", rich_help_panel=SERVER, help="The name clients pass as `model` (default: --model)."),
    ] = None,
    max_body_bytes: Annotated[
        int,
        typer.Option("--max-body-bytes", min=1, rich_help_panel=SERVER, help="Larger request bodies get HTTP 413."),
    ] = 1 << 20,
    request_timeout: Annotated[
        float | None,
        typer.Option(
            "--request-timeout",
            min=0.001,
            rich_help_panel=SERVER,
            help="Seconds a request may take; past them its answer ends (finish_reason 'length').",
        ),
    ] = None,
    prompt_cache_bytes: Annotated[
        int,
        typer.Option(
            "--prompt-cache-bytes",
            min=0,
            rich_help_panel=SERVER,
            help="Bytes of finished requests' keys/values kept for prompts that repeat them (0: none).",
        ),
    ] = 1 << 30,
    prefill_budget: Annotated[
        int,
        typer.Option(
            "--prefill-budget",
            min=1,
            rich_help_panel=SERVER,
            help="Prompt tokens joins prefill per step while others decode, at most (fewer if a step would drag).",
        ),
    ] = PREFILL_BUDGET,
    sweeps: Annotated[
        list[Path] | None,
        typer.Option(
            "--sweep",
            exists=True,
            file_okay=False,
            rich_help_panel=SERVER,
            help="A `redrafter sweep --out` folder whose heatmaps the chat page shows (repeatable).",
        ),
    ] = None,
    *,
    options: DecodingOptions,
) -> None:
    """Serve /v1/chat/completions, /v1/completions, /v1/models and /health (OpenAI's API),
    and a chat page at / that colours each token by how it was drafted and accepted.

    Requests are decoded together: every step verifies all running requests' candidate trees
    in one forward pass, and requests join and leave between steps. --max-tokens and --temp
    are the defaults for requests that do not set max_tokens or temperature. With --adaptive
    (the default) each step drafts the tree, or nothing, that is fastest for the rows running.
    """
    import logging

    import uvicorn

    from redrafter_mlx.runtime import distributed
    from redrafter_mlx.serve.app import Batching, Limits, decoder_factory, serve_pipeline
    from redrafter_mlx.serve.engine import follow

    # Server errors (logger redrafter.errors: request id, exception, traceback) go to stderr.
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    pipeline = load_pipeline(model, drafter, dtype, mode, draft_model)
    drafting = plan(pipeline, options)
    shape = drafting.shape if drafting else None
    adaptive = options.adaptive and options.beam_length is None  # an explicit length is kept
    batching = Batching(max_batch, max_queue, prefill_budget, prompt_cache_bytes, adaptive)
    if not distributed.is_leader():  # rank 0 serves; this rank runs its steps on its shard
        return follow(decoder_factory(pipeline, shape, options.lookup, batching))
    app_ = serve_pipeline(
        pipeline,
        model_id=model_id or model,
        shape=shape,
        lookup=options.lookup,
        defaults=options,
        batching=batching,
        api_key=api_key,
        limits=Limits(max_body_bytes, request_timeout),
        calibration=drafting.calibration if drafting else None,
        sweeps=sweeps or (),
    )
    console.print(
        f"[dim]{runtime.describe(pipeline.dtype)}; drafting "
        f"{shape if shape else 'nothing (plain decoding)'}"
        f"{' or less as the batch grows' if shape and adaptive else ''}; up to {max_batch} requests per step[/dim]"
    )
    console.print(f"serving {model_id or model!r} on http://{host}:{port}/v1, chat page at / (Ctrl-C stops it)")
    uvicorn.run(app_, host=host, port=port, log_level="warning", timeout_graceful_shutdown=30)
