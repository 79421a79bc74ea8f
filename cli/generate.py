"""`redrafter generate`: one or many prompts, streamed text or JSON records."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import mlx.core as mx
import typer

from redrafter_mlx import runtime
from redrafter_mlx.api import Pipeline, with_text
from redrafter_mlx.decoding import GenerationStats
from redrafter_mlx.formats.loading import DEFAULT_MODEL
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.runtime.timers import PhaseTimer
from redrafter_mlx.tuning import DraftPlan

from .app import UsageError, app, console, friendly_errors, print_json
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


def valid_text(text: str) -> str:
    """`text` when it is valid UTF-8; undecodable bytes arrive as surrogates (argv, stdin)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("the prompt is not valid UTF-8 text") from None
    return text


def read_prompts(prompt: Optional[str], prompts_file: Optional[Path]) -> list[str]:
    """Prompts from -p (`-` = stdin) or a JSON-lines file with a `prompt` field."""
    if (prompt is None) == (prompts_file is None):
        raise UsageError("give exactly one of --prompt/-p or --prompts-file")
    if prompts_file is None:
        text = sys.stdin.buffer.read().decode("utf-8", errors="surrogateescape") if prompt == "-" else prompt
        return [valid_text(text)]
    prompts = []
    for number, line in enumerate(prompts_file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            prompts.append(json.loads(line)["prompt"])
        except (json.JSONDecodeError, KeyError, TypeError):
            raise UsageError(f"{prompts_file}:{number}: expected a JSON object with a 'prompt' field") from None
    if not prompts:
        raise UsageError(f"{prompts_file}: no prompts")
    return prompts


def preview(text: str, width: int = 60) -> str:
    """The prompt's start on one line."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def record(prompt: str, prompt_ids: list[int], tokens: list[int], text: str, stats: GenerationStats) -> dict:
    """The JSON contract of `generate --json` (one object per prompt)."""
    verified = stats.verified_tokens
    return {
        "prompt": prompt,
        "prompt_tokens": prompt_ids,
        "tokens": tokens,
        "text": text,
        "num_tokens": len(tokens),
        "finish_reason": stats.finish_reason,
        "steps": len(stats.accepted_per_step),
        "tokens_per_step": stats.tokens_per_step,
        "accepted_per_step": stats.accepted_per_step,
        "verified_tokens": verified,
        "compression": stats.compression,
        "phase_times": stats.phase_times,
        "prompt_tps": stats.prompt_tps,
        "generation_tps": stats.generation_tps,
        "peak_memory_gb": mx.get_peak_memory() / 1e9,
    }


def generate_one(
    pipeline: Pipeline,
    prompt_ids: list[int],
    options: DecodingOptions,
    drafting: DraftPlan | None,
    *,
    stream: bool,
    timer: PhaseTimer,
) -> tuple[list[int], str, GenerationStats]:
    """Decode one prompt, optionally printing text as it is produced. Ctrl-C ends the answer
    where it is, with finish reason "interrupted" (the caller reports it, then stops)."""
    tokens: list[int] = []
    pieces: list[str] = []
    stats = GenerationStats()
    steps = pipeline.steps(prompt_ids, options, drafting, timer=timer)
    try:
        for response in with_text(pipeline.tokenizer, steps):
            tokens += response.tokens
            pieces.append(response.text)
            stats = response.stats
            if stream:
                sys.stdout.write(response.text)
                sys.stdout.flush()
    except KeyboardInterrupt:
        stats.finish_reason = "interrupted"
        pieces = [pipeline.tokenizer.decode(tokens)]
    if stream:
        sys.stdout.write("\n")
    return tokens, "".join(pieces), stats


def ending(stats: GenerationStats, options: DecodingOptions) -> str | None:
    """Why an answer that did not reach EOS ended, for the user (None when it did)."""
    if stats.finish_reason == "interrupted":
        return "interrupted"
    if stats.finish_reason != "length":
        return None
    if stats.num_tokens < options.max_tokens:  # the decoder capped it at the context
        return "cut: the model's context is full"
    return f"cut at --max-tokens {options.max_tokens} (raise -m for more)"


@app.command()
@friendly_errors
@decoding_options(256, *SAMPLING_FIELDS, *TREE_FIELDS)
def generate(
    prompt: Annotated[Optional[str], typer.Option("--prompt", "-p", help="Prompt text, or - for stdin.")] = None,
    prompts_file: Annotated[
        Optional[Path],
        typer.Option("--prompts-file", help="JSON lines with a 'prompt' field.", exists=True, dir_okay=False),
    ] = None,
    model: ModelOpt = DEFAULT_MODEL,
    system_prompt: SystemPromptOpt = None,
    ignore_chat_template: Annotated[bool, typer.Option("--ignore-chat-template", help="Feed the raw prompt.")] = False,
    dtype: DTypeOpt = None,
    mode: ModeOpt = Mode.redrafter,
    drafter: DrafterOpt = None,
    draft_model: DraftModelOpt = None,
    profile: Annotated[bool, typer.Option("--profile", help="Per-phase timings (evaluates at phase ends).")] = False,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="With --profile: write a Chrome trace JSON.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per prompt on stdout.")] = False,
    verbose: VerboseOpt = False,
    *,
    options: DecodingOptions,
) -> None:
    """Generate text for one prompt or a file of prompts."""
    prompts = read_prompts(prompt, prompts_file)
    if verbose:
        console.print(f"[dim]{runtime.describe(runtime.parse_dtype(dtype))}[/dim]")
    pipeline = load_pipeline(model, drafter, dtype, mode, draft_model)
    drafting = plan(pipeline, options)
    if drafting and verbose:
        console.print(f"[dim]drafting {drafting.shape}{'' if drafting.calibration else ' (not calibrated)'}[/dim]")
    timer = PhaseTimer(profile or trace is not None)
    for number, text_prompt in enumerate(prompts, 1):
        ids = encode_prompt(
            pipeline.tokenizer,
            text_prompt,
            system_prompt=system_prompt,
            use_chat_template=not ignore_chat_template,
            vicuna=pipeline.loaded.is_vicuna,
        )
        if len(prompts) > 1 and not json_out:
            sys.stdout.write("\n" if number > 1 else "")
            console.print(f"[bold]prompt {number}/{len(prompts)}[/bold] [dim]{preview(text_prompt)}[/dim]")
        mx.reset_peak_memory()
        tokens, text, stats = generate_one(pipeline, ids, options, drafting, stream=not json_out, timer=timer)
        if json_out:
            print_json(record(text_prompt, ids, tokens, text, stats))
        else:
            note = ending(stats, options)
            console.print(
                (f"[yellow]{note}[/yellow]\n" if note else "")
                + f"[dim]Prompt: {stats.prompt_tokens} tokens, {stats.prompt_tps:.1f} tokens-per-sec\n"
                f"Generation: {len(tokens)} tokens, {stats.generation_tps:.1f} tokens-per-sec, "
                f"{stats.tokens_per_step:.2f} tokens/step\n"
                f"Peak memory: {mx.get_peak_memory() / 1e9:.3f} GB[/dim]"
            )
        if stats.finish_reason == "interrupted":
            raise KeyboardInterrupt
    if timer.enabled:
        console.print("[dim]phases: " + "  ".join(f"{k} {v * 1e3:.0f} ms" for k, v in timer.totals.items()) + "[/dim]")
    if trace is not None:
        console.print(f"[dim]trace: {timer.write_chrome_trace(trace)}[/dim]")
