"""`redrafter chat`: interactive multi-turn chat that streams accepted tokens as they come."""

from __future__ import annotations

import sys
from typing import Annotated

import mlx.core as mx
import typer

from redrafter_mlx import runtime
from redrafter_mlx.chat import ChatSession
from redrafter_mlx.decoding import GenerationStats, make_greedy_or_sampler
from redrafter_mlx.loading import DEFAULT_MODEL, load, load_drafter_for

from .app import app, console, friendly_errors
from .generate import check_decoding
from .options import (
    AdaptiveOpt,
    BeamLengthOpt, BeamWidthOpt, DrafterOpt, DTypeOpt, MaxTokensOpt, ModelOpt, SearchWidthOpt,
    LookupOpt, SeedOpt, SystemPromptOpt, TempOpt, TopKOpt, TopPOpt, VerboseOpt, plan,
)

HELP = "/reset  forget the conversation   /stats  session totals   /help  this text   /quit  leave"


def stats_line(stats: GenerationStats, tokens: int) -> str:
    return (f"{tokens} tokens, {stats.generation_tps:.1f} tokens/s, "
            f"{stats.tokens_per_step:.2f} tokens/step")


def answer(session: ChatSession, text: str, out) -> tuple[int, GenerationStats | None]:
    """Stream one answer; Ctrl-C stops it (the partial answer stays in the history)."""
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
    detokenizer.finalize()
    out.write(detokenizer.last_segment + "\n")
    out.flush()
    return count, stats


@app.command()
@friendly_errors
def chat(
    model: ModelOpt = DEFAULT_MODEL,
    drafter: DrafterOpt = None,
    beam_width: BeamWidthOpt = None,
    beam_length: BeamLengthOpt = None,
    search_width: SearchWidthOpt = None,
    lookup: LookupOpt = True,
    adaptive: AdaptiveOpt = True,
    temp: TempOpt = 0.0,
    top_p: TopPOpt = 0.0,
    top_k: TopKOpt = 0,
    max_tokens: MaxTokensOpt = 512,
    system_prompt: SystemPromptOpt = None,
    seed: SeedOpt = None,
    dtype: DTypeOpt = None,
    mode: Annotated[str, typer.Option("--mode", help="redrafter | ar")] = "redrafter",
    verbose: VerboseOpt = False,
) -> None:
    """Chat with a model; with piped stdin, answer one prompt per line."""
    check_decoding(mode, beam_width, beam_length, search_width)
    dtype_ = runtime.parse_dtype(dtype)
    if seed is not None:
        mx.random.seed(seed)
    loaded = load(model, dtype_)
    draft_model = load_drafter_for(loaded, drafter, dtype_) if mode == "redrafter" else None
    drafting = plan(loaded, draft_model, dtype_, beam_width, beam_length, search_width, adaptive) if draft_model else None
    session = ChatSession(
        loaded, draft_model, system_prompt=system_prompt, sampler=make_greedy_or_sampler(temp, top_p, top_k),
        max_tokens=max_tokens, lookup=lookup, **(drafting.options() if drafting else {}),
    )
    interactive = sys.stdin.isatty()
    if verbose or interactive:
        console.print(f"[dim]{runtime.describe(dtype_)}[/dim]")
    if interactive:
        console.print(f"[bold]redrafter chat[/bold] with {model} ({mode}). {HELP}")
    totals = {"turns": 0, "tokens": 0, "steps": 0, "time": 0.0}
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
            console.print(f"[dim]{totals['turns']} turns, {totals['tokens']} tokens, {tps:.1f} tokens/s, "
                          f"{totals['tokens'] / max(totals['steps'], 1):.2f} tokens/step, "
                          f"{session.cache.length} tokens in cache[/dim]")
            continue
        count, stats = answer(session, text, sys.stdout)
        if stats is not None:
            totals["turns"] += 1
            totals["tokens"] += count
            totals["steps"] += max(len(stats.accepted_per_step), 1)
            totals["time"] += stats.generation_time
            console.print(f"[dim]{stats_line(stats, count)}, {session.reused_tokens} prompt tokens reused[/dim]")
