"""`redrafter generate`: one or many prompts, streamed text or JSON records."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import mlx.core as mx
import typer

from redrafter_mlx import decoding, runtime
from redrafter_mlx.api import with_text
from redrafter_mlx.decoding import GenerationStats, make_greedy_or_sampler
from redrafter_mlx.drafter import Drafter
from redrafter_mlx.loading import DEFAULT_MODEL, LoadedModel, load, load_drafter_for
from redrafter_mlx.profiling.timers import PhaseTimer
from redrafter_mlx.prompting import encode_prompt

from .app import UsageError, app, console, friendly_errors, print_json
from .options import (
    AdaptiveOpt,
    BeamLengthOpt,
    BeamWidthOpt,
    DrafterOpt,
    DTypeOpt,
    LookupOpt,
    MaxTokensOpt,
    ModelOpt,
    SearchWidthOpt,
    SeedOpt,
    SystemPromptOpt,
    TempOpt,
    TopKOpt,
    TopPOpt,
    VerboseOpt,
    plan,
)

MODES = ("ar", "redrafter")


def read_prompts(prompt: Optional[str], prompts_file: Optional[Path]) -> list[str]:
    """Prompts from -p (`-` = stdin) or a JSON-lines file with a `prompt` field."""
    if (prompt is None) == (prompts_file is None):
        raise UsageError("give exactly one of --prompt/-p or --prompts-file")
    if prompts_file is None:
        text = sys.stdin.buffer.read().decode("utf-8", errors="surrogateescape") if prompt == "-" else prompt
        try:
            text.encode("utf-8")  # undecodable bytes arrive as surrogates, from argv and stdin alike
        except UnicodeEncodeError:
            raise UsageError("the prompt is not valid UTF-8 text") from None
        return [text]
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


def record(
    prompt: str, prompt_ids: list[int], tokens: list[int], text: str, stats: GenerationStats, beam_cells: int
) -> dict:
    """The JSON contract of `generate --json` (one object per prompt); beam_cells = W * L."""
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
        "compression": sum(verified) / len(verified) / beam_cells if verified else None,
        "phase_times": stats.phase_times,
        "prompt_tps": stats.prompt_tps,
        "generation_tps": stats.generation_tps,
        "peak_memory_gb": mx.get_peak_memory() / 1e9,
    }


def generate_one(
    loaded: LoadedModel,
    prompt_ids: list[int],
    *,
    drafter: Drafter | None,
    stream: bool,
    **options,
) -> tuple[list[int], str, GenerationStats]:
    """Decode one prompt, optionally printing text as it is produced."""
    tokens: list[int] = []
    pieces: list[str] = []
    stats = GenerationStats()
    steps = decoding.generate(loaded.model, prompt_ids, drafter=drafter, eos_ids=loaded.tokenizer.eos_token_ids, **options)
    for response in with_text(loaded.tokenizer, steps):
        tokens += response.tokens
        pieces.append(response.text)
        stats = response.stats
        if stream:
            sys.stdout.write(response.text)
            sys.stdout.flush()
    if stream:
        sys.stdout.write("\n")
    return tokens, "".join(pieces), stats


def check_decoding(mode: str, beam_width: int | None, beam_length: int | None, search_width: int | None) -> None:
    """Reject an unknown mode or an empty beam before anything is loaded (None: auto)."""
    if mode not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}")
    if min(v for v in (beam_width, beam_length, search_width, 1) if v is not None) < 1:
        raise UsageError(f"--beam-width, --beam-length and --search-width must be >= 1 "
                         f"(got {beam_width}, {beam_length} and {search_width})")


@app.command()
@friendly_errors
def generate(
    prompt: Annotated[Optional[str], typer.Option("--prompt", "-p", help="Prompt text, or - for stdin.")] = None,
    prompts_file: Annotated[
        Optional[Path], typer.Option("--prompts-file", help="JSON lines with a 'prompt' field.", exists=True, dir_okay=False)
    ] = None,
    model: ModelOpt = DEFAULT_MODEL,
    max_tokens: MaxTokensOpt = 256,
    temp: TempOpt = 0.0,
    top_p: TopPOpt = 0.0,
    top_k: TopKOpt = 0,
    seed: SeedOpt = None,
    system_prompt: SystemPromptOpt = None,
    ignore_chat_template: Annotated[bool, typer.Option("--ignore-chat-template", help="Feed the raw prompt.")] = False,
    dtype: DTypeOpt = None,
    mode: Annotated[str, typer.Option("--mode", help="redrafter | ar")] = "redrafter",
    drafter: DrafterOpt = None,
    beam_width: BeamWidthOpt = None,
    beam_length: BeamLengthOpt = None,
    search_width: SearchWidthOpt = None,
    lookup: LookupOpt = True,
    adaptive: AdaptiveOpt = True,
    profile: Annotated[bool, typer.Option("--profile", help="Per-phase timings (evaluates at phase ends).")] = False,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="With --profile: write a Chrome trace JSON.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per prompt on stdout.")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Generate text for one prompt or a file of prompts."""
    check_decoding(mode, beam_width, beam_length, search_width)
    prompts = read_prompts(prompt, prompts_file)
    dtype_ = runtime.parse_dtype(dtype)
    if verbose:
        console.print(f"[dim]{runtime.describe(dtype_)}[/dim]")
    if seed is not None:
        mx.random.seed(seed)
    loaded = load(model, dtype_)
    draft_model = load_drafter_for(loaded, drafter, dtype_) if mode == "redrafter" else None
    drafting = plan(loaded, draft_model, dtype_, beam_width, beam_length, search_width, adaptive) if draft_model else None
    if drafting and verbose:
        console.print(f"[dim]drafting {drafting.shape}{'' if drafting.calibration else ' (not calibrated)'}[/dim]")
    sampler = make_greedy_or_sampler(temp, top_p, top_k)
    timer = PhaseTimer(profile or trace is not None)
    for text_prompt in prompts:
        ids = encode_prompt(
            loaded.tokenizer,
            text_prompt,
            system_prompt=system_prompt,
            use_chat_template=not ignore_chat_template,
            vicuna=loaded.is_vicuna,
        )
        mx.reset_peak_memory()
        tokens, text, stats = generate_one(
            loaded, ids, drafter=draft_model, stream=not json_out, max_tokens=max_tokens, sampler=sampler,
            lookup=lookup, timer=timer, **(drafting.options() if drafting else {}),
        )
        if json_out:
            cells = drafting.shape.beam_width * drafting.shape.beam_length if drafting else 1
            print_json(record(text_prompt, ids, tokens, text, stats, cells))
        else:
            console.print(
                f"[dim]Prompt: {stats.prompt_tokens} tokens, {stats.prompt_tps:.1f} tokens-per-sec\n"
                f"Generation: {len(tokens)} tokens, {stats.generation_tps:.1f} tokens-per-sec, "
                f"{stats.tokens_per_step:.2f} tokens/step\n"
                f"Peak memory: {mx.get_peak_memory() / 1e9:.3f} GB[/dim]"
            )
    if timer.enabled:
        console.print("[dim]phases: " + "  ".join(f"{k} {v * 1e3:.0f} ms" for k, v in timer.totals.items()) + "[/dim]")
    if trace is not None:
        console.print(f"[dim]trace: {timer.write_chrome_trace(trace)}[/dim]")
