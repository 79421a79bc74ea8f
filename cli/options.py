"""Options shared by several commands (one definition each)."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer

from redrafter_mlx import runtime
from redrafter_mlx.api import plan_for
from redrafter_mlx.beam_search import DEFAULT_SEARCH_WIDTH
from redrafter_mlx.drafter import Drafter
from redrafter_mlx.loading import DEFAULT_MODEL, LoadedModel
from redrafter_mlx.tuning import DraftPlan

from .app import UsageError, console

ModelOpt = Annotated[
    str,
    typer.Option("--model", "-M", help="Alias, local folder, hub id or .gguf file."),
]
DTypeOpt = Annotated[
    Optional[str],
    typer.Option("--dtype", help="float32 | float16 | bfloat16 (default: float32 on CPU, float16 on GPU)."),
]
MaxTokensOpt = Annotated[int, typer.Option("--max-tokens", "-m", min=1, help="Tokens to generate.")]
def finite(value: float) -> float:
    """Reject inf and nan, which pass typer's range checks (nan compares false)."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")
    return value


TempOpt = Annotated[float, typer.Option("--temp", min=0.0, callback=finite, help="Sampling temperature (0 = greedy).")]
TopPOpt = Annotated[float, typer.Option(
    "--top-p", min=0.0, max=1.0, callback=finite, help="Nucleus sampling (0 = off).")]
TopKOpt = Annotated[int, typer.Option("--top-k", min=0, help="Top-k sampling (0 = off).")]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", help="Random seed.")]
SystemPromptOpt = Annotated[Optional[str], typer.Option("--system-prompt", help="System message.")]
DrafterOpt = Annotated[
    Optional[str],
    typer.Option("--drafter", "-d", help="Drafter folder or hub id (default: the one shipped for the model)."),
]
AUTO = " Default: auto, the fastest tree `redrafter tune` measured for this model, drafter and device."
BeamWidthOpt = Annotated[Optional[int], typer.Option("--beam-width", "-w", help="Beams verified per step (W)." + AUTO)]
BeamLengthOpt = Annotated[Optional[int], typer.Option(
    "--beam-length", "-l", help="Tokens per beam incl. the guaranteed one (L)." + AUTO)]
SearchWidthOpt = Annotated[Optional[int], typer.Option(
    "--search-width", "-s",
    help="Beams the drafter's beam search keeps; the W verified are the ones that cover the most "
         "drafter probability (at most W: the paper's beam search, all W verified)." + AUTO)]
LookupOpt = Annotated[bool, typer.Option(
    "--lookup/--no-lookup",
    help="Let a copy of what followed the text's last n-gram earlier (prompt or answer) take the "
         "last of the W beams when there is one, or else the drafter's stored continuation of it "
         "(its folder's ngrams.safetensors, when it has one).")]
AdaptiveOpt = Annotated[bool, typer.Option(
    "--adaptive/--static",
    help="With a calibration and no --beam-length: choose each step's beam length from the acceptance "
         "seen so far (long beams where the text repeats, short ones in open prose).")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Print device, dtype and BLAS.")]

__all__ = ["DEFAULT_MODEL", "DEFAULT_SEARCH_WIDTH"]


def parse_sizes(text: str, name: str) -> list[int]:
    """Sorted distinct positive integers from "1,4,8" (option `name` in the error)."""
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"{name}: expected comma-separated integers, got {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise UsageError(f"{name}: values must be >= 1, got {text!r}")
    return sizes


def plan(
    loaded: LoadedModel, drafter: Drafter, dtype, beam_width: int | None, beam_length: int | None,
    search_width: int | None, adaptive: bool = True, quiet: bool = False,
) -> DraftPlan:
    """The drafting plan for the loaded pair; says once on stderr when it is not calibrated."""
    found = plan_for(loaded, drafter, dtype, beam_width, beam_length, search_width, adaptive)
    if found.calibration is None and None in (beam_width, beam_length, search_width) and not quiet:
        console.print(f"[dim]no calibration for this model and drafter on {runtime.device_name()}/"
                      f"{runtime.dtype_name(dtype)}: drafting {found.shape}; `redrafter tune` measures "
                      f"the fastest tree for this machine[/dim]")
    return found
