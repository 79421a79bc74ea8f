"""The Typer application and the error boundary every command shares."""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console

app = typer.Typer(
    name="redrafter",
    help="ReDrafter speculative decoding in pure MLX.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console(stderr=True, highlight=False, soft_wrap=True)
errors = Console(stderr=True, highlight=False, soft_wrap=True)  # heard from every rank (`main`)


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"redrafter-mlx {version('redrafter-mlx')}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Show the version and exit.")
    ] = False,
    pipeline: Annotated[
        bool,
        typer.Option(
            "--pipeline",
            help="Under mlx.launch: split the model across the ranks by layers (pipeline) instead of within "
            "every layer (tensor parallel, the default); for slow links (docs/distributed.md).",
        ),
    ] = False,
) -> None:
    """ReDrafter speculative decoding in pure MLX."""
    if pipeline:
        os.environ["REDRAFTER_SPLIT"] = "pipeline"  # read by redrafter_mlx.api.load


F = TypeVar("F", bound=Callable)


class UsageError(Exception):
    """Bad input detected by the CLI itself (one line, exit 2)."""


def _user_error_types() -> tuple[type[BaseException], ...]:
    """What counts as the user's mistake: imported late, so `--help` stays fast."""
    from redrafter_mlx.errors import InputError
    from redrafter_mlx.training.distill_workers import WorkerFailed

    # The OS errors are about a path the user gave; a JSON error is a file the user gave.
    return (
        InputError,
        FileNotFoundError,
        FileExistsError,
        NotADirectoryError,
        IsADirectoryError,
        PermissionError,
        json.JSONDecodeError,
        WorkerFailed,
    )


REPORT_HINT = (
    "this is a bug in redrafter-mlx, not in your input: please report it with the command and the traceback above"
)


def friendly_errors(fn: F) -> F:
    """Bad input: one red line and a non-zero exit. A bug: its traceback and a hint to report it."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError as e:
            print_error(str(e))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(130) from None
        except _user_error_types() as e:
            if os.environ.get("REDRAFTER_DEBUG"):
                raise
            print_error(user_message(e))
            raise typer.Exit(1) from None
        except (typer.Exit, typer.Abort, typer.exceptions.TyperException):  # exits and usage errors
            raise
        except Exception:
            traceback.print_exc()
            print_error(REPORT_HINT)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def user_message(error: BaseException) -> str:
    """One line for the user's mistake, in the CLI's terms (its flags) where the library's
    error says what to ask for."""
    from redrafter_mlx.errors import TargetExists

    if isinstance(error, TargetExists):
        return f"{error.path} exists and is not empty; pass --force to replace it"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def print_error(message: str) -> None:
    errors.print("[red]error:[/red] ", end="")
    errors.print(message, markup=False)


def print_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
