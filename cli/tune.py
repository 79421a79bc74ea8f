"""`redrafter tune`: measure this machine's costs and pick the fastest candidate tree."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from redrafter_mlx import runtime
from redrafter_mlx.formats.loading import DEFAULT_MODEL
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.profiling.calibrate import (
    DEFAULT_BUDGETS,
    DEFAULT_LENGTHS,
    DEFAULT_WIDTHS,
    WIDE_SEARCH,
    calibrate,
    shape_grid,
    work_units,
)
from redrafter_mlx.tuning.calibration import Calibration, calibration_path, write_calibration

from .app import UsageError, app, console, friendly_errors, print_json
from .bench import setup
from .options import DrafterOpt, DTypeOpt, ModelOpt, NumPromptsOpt, PromptsFileOpt, decoding_options, parse_sizes

SHOWN = 8  # rows of the table: the fastest shapes


@app.command()
@friendly_errors
@decoding_options(96, "lookup")
def tune(
    model: ModelOpt = DEFAULT_MODEL,
    drafter: DrafterOpt = None,
    dtype: DTypeOpt = None,
    beam_widths: Annotated[str, typer.Option("--beam-widths", help="W values to try.")] = ",".join(
        map(str, DEFAULT_WIDTHS)
    ),
    beam_lengths: Annotated[str, typer.Option("--beam-lengths", help="L values to try.")] = ",".join(
        map(str, DEFAULT_LENGTHS)
    ),
    search_widths: Annotated[
        str, typer.Option("--search-widths", help="S values to try; S <= W is the paper's search.")
    ] = f"1,{WIDE_SEARCH}",
    node_budgets: Annotated[
        str,
        typer.Option(
            "--node-budgets",
            help="Node budgets N to try on the widest W's trees (the N likeliest prefixes verified; 0: none).",
        ),
    ] = ",".join(map(str, DEFAULT_BUDGETS)),
    num_prompts: NumPromptsOpt = 8,
    prompts_file: PromptsFileOpt = None,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out", help="Calibration file to write (default: the user cache, where every command finds it)."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the calibration as JSON.")] = False,
    *,
    options: DecodingOptions,
) -> None:
    """Measure verify and draft costs and replayed tokens/step on this machine, and store the
    calibration that makes `-w/-l/-s` default to the fastest tree (explicit values still win).
    Replays held-out prompts that `bench` does not run by default; -m: tokens per answer."""
    grid = shape_grid(
        parse_sizes(beam_widths, "--beam-widths"),
        parse_sizes(beam_lengths, "--beam-lengths"),
        parse_sizes(search_widths, "--search-widths"),
        parse_budgets(node_budgets),
    )
    pipeline, prompts = setup(model, drafter, dtype, prompts_file, num_prompts, for_tuning=True)
    loaded, draft_model = pipeline.loaded, pipeline.drafter
    console.print(f"[dim]{runtime.describe(pipeline.dtype)}; {len(grid)} tree shapes, {len(prompts)} prompts[/dim]")
    columns = (
        TextColumn("{task.description:<28}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("tuning", total=work_units(grid))
        calibration = calibrate(
            loaded,
            draft_model,
            prompts,
            grid,
            device=runtime.device_name(),
            dtype=runtime.dtype_name(pipeline.dtype),
            max_tokens=options.max_tokens,
            lookup=options.lookup,
            advance=lambda what: progress.update(task, advance=1, description=what),
        )
    path = out or calibration_path(loaded.source, draft_model.source)
    write_calibration(path, calibration, {"model": str(loaded.source), "drafter": str(draft_model.source)})
    if json_out:
        return print_json(calibration.to_dict() | {"path": str(path)})
    show(calibration)
    console.print(f"wrote {path}")


def parse_budgets(text: str) -> list[int]:
    """--node-budgets: "0" (or nothing) for none, else integers >= 2."""
    if text.strip() in ("", "0"):
        return []
    budgets = parse_sizes(text, "--node-budgets")
    if budgets[0] < 2:
        raise UsageError(f"--node-budgets: a budget holds the guaranteed token and a draft, >= 2; got {text!r}")
    return budgets


def show(calibration: Calibration) -> None:
    """The fastest shapes by expected tokens/s, with what each number comes from."""
    table = Table(
        title=f"fastest trees ({calibration.device}/{calibration.dtype}; "
        f"verify 1 token {calibration.verify_ms[1]:.0f} ms)"
    )
    for column in ("tree", "tokens/step", "draft ms", "step ms", "expected tok/s", "x AR"):
        table.add_column(column, justify="left" if column == "tree" else "right")
    ranked = sorted(calibration.shapes, key=calibration.expected_tokens_per_s, reverse=True)
    for shape in ranked[:SHOWN]:
        cost, speed = calibration.shapes[shape], calibration.expected_tokens_per_s(shape)
        table.add_row(
            str(shape),
            f"{cost.tokens_per_step:.2f}",
            f"{cost.draft_ms:.1f}",
            f"{calibration.step_ms(shape):.0f}",
            f"{speed:.1f}",
            f"{speed * calibration.ar_ms / 1e3:.2f}" if calibration.ar_ms else "-",
        )
    Console().print(table)
