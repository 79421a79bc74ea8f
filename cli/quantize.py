"""`redrafter quantize`: 4-/8-bit LLM and drafter folders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from redrafter_mlx import runtime
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.formats.loading import DEFAULT_MODEL, load
from redrafter_mlx.quantize import check_settings, quantize_and_save_drafter, quantize_llm

from .app import UsageError, app, console, friendly_errors
from .options import DrafterOpt, ModelOpt


@app.command()
@friendly_errors
def quantize(
    model: ModelOpt = DEFAULT_MODEL,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Quantized LLM folder to write.")] = None,
    drafter: DrafterOpt = None,
    drafter_out: Annotated[Optional[Path], typer.Option("--drafter-out", help="Quantized drafter folder.")] = None,
    bits: Annotated[int, typer.Option("--bits", "-b", help="4 or 8.")] = 4,
    group_size: Annotated[int, typer.Option("--group-size", "-g", help="32, 64 or 128.")] = 64,
    force: Annotated[bool, typer.Option("--force", help="Replace existing output folders.")] = False,
) -> None:
    """Quantize the LLM (--out) and/or its drafter (--drafter-out)."""
    if out is None and drafter_out is None:
        raise UsageError("nothing to do: give --out (LLM) and/or --drafter-out (drafter)")
    check_settings(bits, group_size)
    loaded = load(model, runtime.default_dtype())
    if drafter_out is not None:
        draft_model = load_drafter_for(loaded, drafter, runtime.default_dtype())
        path = quantize_and_save_drafter(draft_model, drafter_out, bits, group_size, force)
        console.print(f"wrote {bits}-bit drafter to {path}")
    if out is not None:
        path = quantize_llm(loaded, out, bits, group_size, force)
        console.print(f"wrote {bits}-bit model to {path}")
