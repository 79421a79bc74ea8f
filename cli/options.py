"""Options shared by several commands (one definition each).

The decoding flags are `DecodingOptions`' fields: `decoding_options` adds the ones a command
takes to its signature and hands the command one `DecodingOptions`, so no command re-lists
them and every default comes from the one type.
"""

from __future__ import annotations

import enum
import functools
import inspect
import math
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional, TypeVar

import typer

from redrafter_mlx import api, runtime
from redrafter_mlx.api import Pipeline
from redrafter_mlx.errors import InputError
from redrafter_mlx.formats.loading import DEFAULT_MODEL
from redrafter_mlx.options import SAMPLING_FIELDS, TREE_FIELDS, DecodingOptions
from redrafter_mlx.tuning import DraftPlan

from .app import UsageError, console


def known_dtype(name: str | None) -> str | None:
    """A flag's value is a usage error (exit 2) like any other option's."""
    if name is not None and name not in runtime.DTYPES:
        raise typer.BadParameter(f"unknown dtype {name!r}; choose one of {', '.join(runtime.DTYPES)}")
    return name


def finite(value: float) -> float:
    """Reject inf and nan, which pass typer's range checks (nan compares false)."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")
    return value


ModelOpt = Annotated[
    str,
    typer.Option("--model", "-M", help="Alias, local folder, hub id or .gguf file."),
]
DTypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--dtype", callback=known_dtype, help="float32 | float16 | bfloat16 (default: float32 on CPU, float16 on GPU)."
    ),
]
SystemPromptOpt = Annotated[Optional[str], typer.Option("--system-prompt", help="System message.")]
DrafterOpt = Annotated[
    Optional[str],
    typer.Option("--drafter", "-d", help="Drafter folder or hub id (default: the one shipped for the model)."),
]
DraftModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--draft-model",
        help="A small LLM with the model's tokenizer to draft with (alias, folder, "
        "hub id or .gguf), instead of a --drafter.",
    ),
]
PromptsFileOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--prompts-file",
        exists=True,
        dir_okay=False,
        help="JSON lines with a 'prompt' field (default: the held-out eval prompts).",
    ),
]
NumPromptsOpt = Annotated[int, typer.Option("--num-prompts", "-n", min=1, help="Prompts to run.")]


class Mode(str, enum.Enum):
    redrafter = "redrafter"
    ar = "ar"


ModeOpt = Annotated[Mode, typer.Option("--mode", help="redrafter: draft and verify; ar: plain decoding.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Print device, dtype and BLAS.")]

__all__ = ["DEFAULT_MODEL", "SAMPLING_FIELDS", "TREE_FIELDS"]

# The flag of each `DecodingOptions` field, all listed under "Decoding" in --help.
PANEL = "Decoding"
AUTO = " Default: auto, the fastest tree `redrafter tune` measured for this model, drafter and device."
FLAGS = {
    "max_tokens": Annotated[
        int, typer.Option("--max-tokens", "-m", min=1, rich_help_panel=PANEL, help="Tokens to generate.")
    ],
    "temp": Annotated[
        float,
        typer.Option(
            "--temp", min=0.0, callback=finite, rich_help_panel=PANEL, help="Sampling temperature (0 = greedy)."
        ),
    ],
    "top_p": Annotated[
        float,
        typer.Option(
            "--top-p", min=0.0, max=1.0, callback=finite, rich_help_panel=PANEL, help="Nucleus sampling (0 = off)."
        ),
    ],
    "top_k": Annotated[int, typer.Option("--top-k", min=0, rich_help_panel=PANEL, help="Top-k sampling (0 = off).")],
    "seed": Annotated[Optional[int], typer.Option("--seed", rich_help_panel=PANEL, help="Random seed.")],
    "beam_width": Annotated[
        Optional[int],
        typer.Option("--beam-width", "-w", min=1, rich_help_panel=PANEL, help="Beams verified per step (W)." + AUTO),
    ],
    "beam_length": Annotated[
        Optional[int],
        typer.Option(
            "--beam-length",
            "-l",
            min=1,
            rich_help_panel=PANEL,
            help="Tokens per beam incl. the guaranteed one (L)." + AUTO,
        ),
    ],
    "search_width": Annotated[
        Optional[int],
        typer.Option(
            "--search-width",
            "-s",
            min=1,
            rich_help_panel=PANEL,
            help="Beams the drafter's beam search keeps; the W verified are the ones that cover the most "
            "drafter probability (at most W: the paper's beam search, all W verified)." + AUTO,
        ),
    ],
    "node_budget": Annotated[
        Optional[int],
        typer.Option(
            "--node-budget",
            "-N",
            min=0,
            rich_help_panel=PANEL,
            help="Verify at most N tokens of the W beams: the guaranteed one and the N - 1 drafted prefixes the "
            "drafter finds likeliest, a tree that follows its confidence (0: every prefix)." + AUTO,
        ),
    ],
    "lookup": Annotated[
        bool,
        typer.Option(
            "--lookup/--no-lookup",
            rich_help_panel=PANEL,
            help="Let a copy of what followed the text's last n-gram earlier (prompt or answer) take the "
            "last of the W beams when there is one, or else the drafter's stored continuation of it "
            "(its folder's ngrams.safetensors, when it has one).",
        ),
    ],
    "adaptive": Annotated[
        bool,
        typer.Option(
            "--adaptive/--static",
            rich_help_panel=PANEL,
            help="Without --beam-length: each step, draft the tree (its beam length) or take a plain decoding "
            "step, whichever this generation's acceptance and timings say is faster, so drafting never runs "
            "where it loses (--static: the same tree every step).",
        ),
    ],
}
F = TypeVar("F", bound=Callable)


def decoding_options(max_tokens: int | None, *names: str) -> Callable[[F], F]:
    """Give the command `--max-tokens` (default `max_tokens`; None: no such flag) and the flags
    of the named `DecodingOptions` fields, and call it with `options: DecodingOptions` instead."""

    def decorate(command: F) -> F:
        defaults = DecodingOptions(max_tokens=max_tokens or DecodingOptions.max_tokens)
        taken = (*(("max_tokens",) if max_tokens else ()), *names)
        flags = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=getattr(defaults, name), annotation=FLAGS[name]
            )
            for name in taken
        ]
        signature = inspect.signature(command)
        hints = typing.get_type_hints(command, include_extras=True)  # resolved in the command's module
        own = [p.replace(annotation=hints[p.name]) for p in signature.parameters.values() if p.name != "options"]

        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            options = DecodingOptions(**{name: kwargs.pop(name) for name in taken})
            return command(*args, options=options, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=own + flags)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in own + flags} | {"return": None}
        return wrapper  # type: ignore[return-value]

    return decorate


def parse_sizes(text: str, name: str) -> list[int]:
    """Sorted distinct positive integers from "1,4,8" (option `name` in the error)."""
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"{name}: expected comma-separated integers, got {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise UsageError(f"{name}: values must be >= 1, got {text!r}")
    return sizes


def plan(pipeline: Pipeline, options: DecodingOptions, quiet: bool = False) -> DraftPlan | None:
    """The drafting plan for the pipeline (None without a drafter); says once on stderr when
    the tree is left to a calibration that does not exist."""
    found = pipeline.plan(options)
    auto = None in (options.beam_width, options.beam_length, options.search_width)
    if found is not None and found.calibration is None and auto and not quiet:
        console.print(
            f"[dim]no calibration for this model and drafter on {runtime.device_name()}/"
            f"{runtime.dtype_name(pipeline.dtype)}: drafting {found.shape}; `redrafter tune` measures "
            f"the fastest tree for this machine[/dim]"
        )
    return found


def load_pipeline(
    model: str, drafter: str | None, dtype: str | None, mode: Mode = Mode.redrafter, draft_model: str | None = None
) -> Pipeline:
    """`api.load` from the flags: the LLM and, unless `mode` is ar (which ignores the drafter
    flags), its drafter (`draft_model`, else `drafter`, else the one shipped for it, which
    redrafter mode requires)."""
    if drafter and draft_model:  # a usage error (exit 2), before anything loads
        raise typer.BadParameter("give --drafter or --draft-model, not both", param_hint="--draft-model")
    if mode is Mode.ar:
        return api.load(model, drafter=False, dtype=dtype)
    pipeline = api.load(model, drafter=drafter or None, dtype=dtype, draft_model=draft_model or None)
    if pipeline.drafter is None:
        raise InputError(
            f"no drafter ships for model {pipeline.loaded.name!r}: pass --drafter <folder|hub-id> "
            "(train one with `redrafter train`, or convert one with `redrafter convert`), "
            "or --mode ar to decode without one"
        )
    return pipeline
