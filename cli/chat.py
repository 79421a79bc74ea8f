"""`redrafter chat`: interactive multi-turn chat that streams accepted tokens as they come."""

from __future__ import annotations

import sys

import typer

from redrafter_mlx import runtime
from redrafter_mlx.chat import ChatSession
from redrafter_mlx.decoding import GenerationStats
from redrafter_mlx.errors import InputError
from redrafter_mlx.formats.loading import DEFAULT_MODEL
from redrafter_mlx.options import DecodingOptions

from .app import UsageError, app, console, friendly_errors, print_error
from .generate import ending, valid_text
from .options import (
    SAMPLING_FIELDS,
    TREE_FIELDS,
    DrafterOpt,
    DraftModelOpt,
    DTypeOpt,
    Mode,
    ModelOpt,
    ModeOpt,
    SystemPromptOpt,
    VerboseOpt,
    decoding_options,
    load_pipeline,
    plan,
)

HELP = "/reset  forget the conversation   /stats  session totals   /help  this text   /quit  leave"


def stats_line(stats: GenerationStats, tokens: int) -> str:
    return f"{tokens} tokens, {stats.generation_tps:.1f} tokens/s, {stats.tokens_per_step:.2f} tokens/step"


def answer(session: ChatSession, text: str, out) -> tuple[int, GenerationStats | None]:
    """Stream one answer; Ctrl-C stops it (the partial answer stays in the history, and its
    stats say "interrupted")."""
    detokenizer = session.loaded.tokenizer.detokenizer
    detokenizer.reset()
    count, stats = 0, None
    try:
        for step in session.send(text):
            for token in step.tokens:
                detokenizer.add_token(token)
            count, stats = count + len(step.tokens), step.stats
            out.write(detokenizer.last_segment)
            out.flush()
    except KeyboardInterrupt:
        out.write(" [stopped]")
        if stats is not None:
            stats.finish_reason = "interrupted"
    detokenizer.finalize()
    out.write(detokenizer.last_segment + "\n")
    out.flush()
    return count, stats


@app.command()
@friendly_errors
@decoding_options(512, *SAMPLING_FIELDS, *TREE_FIELDS)
def chat(
    model: ModelOpt = DEFAULT_MODEL,
    drafter: DrafterOpt = None,
    draft_model: DraftModelOpt = None,
    system_prompt: SystemPromptOpt = None,
    dtype: DTypeOpt = None,
    mode: ModeOpt = Mode.redrafter,
    verbose: VerboseOpt = False,
    *,
    options: DecodingOptions,
) -> None:
    """Chat with a model; with piped stdin, answer one prompt per line."""
    pipeline = load_pipeline(model, drafter, dtype, mode, draft_model)
    session = ChatSession(pipeline, options, system_prompt=system_prompt, drafting=plan(pipeline, options))
    interactive = sys.stdin.isatty()
    if verbose or interactive:
        console.print(f"[dim]{runtime.describe(pipeline.dtype)}[/dim]")
    if interactive:
        console.print(f"[bold]redrafter chat[/bold] with {model} ({mode.value}). {HELP}")
    totals = {"turns": 0, "tokens": 0, "steps": 0, "time": 0.0}
    failed = False
    while True:
        try:
            text = console.input("[bold green]>>> [/bold green]") if interactive else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            break
        if not interactive and not text:
            break
        text = text.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            break
        if text == "/help":
            console.print(HELP)
            continue
        if text == "/reset":
            session.reset()
            console.print("[dim]conversation cleared[/dim]")
            continue
        if text == "/stats":
            tps = totals["tokens"] / totals["time"] if totals["time"] else 0.0
            console.print(
                f"[dim]{totals['turns']} turns, {totals['tokens']} tokens, {tps:.1f} tokens/s, "
                f"{totals['tokens'] / max(totals['steps'], 1):.2f} tokens/step, "
                f"{session.cache.length} tokens in cache[/dim]"
            )
            continue
        try:
            count, stats = answer(session, valid_text(text), sys.stdout)
        except (UsageError, InputError) as e:  # this line is skipped; the conversation goes on
            print_error(str(e))
            failed = True
            continue
        note = ending(stats, options) if stats is not None and stats.finish_reason != "interrupted" else None
        if note:
            console.print(f"[yellow]{note}[/yellow]")
        if stats is not None:
            totals["turns"] += 1
            totals["tokens"] += count
            totals["steps"] += max(len(stats.accepted_per_step), 1)
            totals["time"] += stats.generation_time
            console.print(f"[dim]{stats_line(stats, count)}, {session.reused_tokens} prompt tokens reused[/dim]")
    if failed and not interactive:
        raise typer.Exit(1)  # piped input: a skipped line fails the run
