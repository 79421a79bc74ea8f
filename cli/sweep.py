"""`redrafter sweep`: beam width x beam length grid -> sweep.csv + heatmaps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from redrafter_mlx.formats.loading import DEFAULT_MODEL
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.profiling import bench as runner
from redrafter_mlx.profiling.sweep import claim_folder, grid, plot_all, run_sweep

from .app import app, console, friendly_errors
from .bench import setup
from .options import DrafterOpt, DTypeOpt, ModelOpt, NumPromptsOpt, PromptsFileOpt, decoding_options, parse_sizes, plan


@app.command()
@friendly_errors
@decoding_options(96, "search_width", "node_budget", "lookup")
def sweep(
    beam_widths: Annotated[str, typer.Option("--beam-widths", help="Comma-separated W values.")] = "1,2,3,4",
    beam_lengths: Annotated[str, typer.Option("--beam-lengths", help="Comma-separated L values.")] = "2,3,4,5",
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for sweep.csv and the PNGs.")] = Path("sweep"),
    model: ModelOpt = DEFAULT_MODEL,
    drafter: DrafterOpt = None,
    prompts_file: PromptsFileOpt = None,
    num_prompts: NumPromptsOpt = 8,
    dtype: DTypeOpt = None,
    *,
    options: DecodingOptions,
) -> None:
    """Measure AR once and ReDrafter for every (W, L); resumable (finished cells are kept)."""
    widths, lengths = parse_sizes(beam_widths, "--beam-widths"), parse_sizes(beam_lengths, "--beam-lengths")
    settings = {
        "model": model,
        "drafter": drafter,
        "dtype": dtype,
        "prompts_file": str(prompts_file) if prompts_file else None,
        "num_prompts": num_prompts,
        "max_tokens": options.max_tokens,
        "search_width": options.search_width,
        "node_budget": options.node_budget,
        "lookup": options.lookup,
    }
    pipeline, prompts = setup(model, drafter, dtype, prompts_file, num_prompts)
    claim_folder(out, settings)  # before anything is measured: a mismatch is a one-line error
    cell_options = {
        (w, length): replace(options, beam_width=w, beam_length=length, adaptive=False)
        for w in widths
        for length in lengths
    }
    runner.warm_up(pipeline, cell_options[widths[0], lengths[0]])
    ar = runner.run_ours(pipeline.autoregressive(), prompts, options)

    def measure_cell(width: int, length: int) -> dict:
        cell = cell_options[width, length]
        r = runner.run_ours(pipeline, prompts, cell, plan(pipeline, cell, quiet=True))
        return {
            "tokens_per_s": r.tokens_per_s,
            "speedup": r.tokens_per_s / ar.tokens_per_s,
            "tokens_per_step": r.tokens_per_step,
            "compression": r.compression or 1.0,
        }

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"sweep (AR {ar.tokens_per_s:.1f} tok/s)", total=len(widths) * len(lengths))
        rows = run_sweep(widths, lengths, out, measure_cell, lambda w, length: progress.advance(task))
    images = plot_all(
        rows, out, f"{model}, {len(prompts)} prompts, {options.max_tokens} tokens, AR {ar.tokens_per_s:.1f} tok/s"
    )
    show(rows)
    console.print(f"wrote {out / 'sweep.csv'} and {', '.join(p.name for p in images)}")


def show(rows: list[dict]) -> None:
    """Speedup heatmap as a table, coloured from red (slower than AR) to green."""
    widths, lengths, values = grid(rows, "speedup")
    table = Table(title="speedup vs AR")
    table.add_column("W \\ L")
    for length in lengths:
        table.add_column(str(length), justify="right")
    best = values.max()
    for i, width in enumerate(widths):
        cells = []
        for v in values[i]:
            style = "bold green" if v == best else "green" if v >= 1 else "red"
            cells.append(f"[{style}]{v:.2f}x[/{style}]")
        table.add_row(str(width), *cells)
    Console().print(table)
