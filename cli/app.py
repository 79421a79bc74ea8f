"""The Typer application and the error boundary every command shares."""

from __future__ import annotations

import functools
import json
import os
import sys
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


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"redrafter-mlx {version('redrafter-mlx')}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_show_version, is_eager=True, help="Show the version and exit.")] = False,
) -> None:
    """ReDrafter speculative decoding in pure MLX."""

F = TypeVar("F", bound=Callable)


class UsageError(Exception):
    """Bad input detected by the CLI itself (one line, exit 2)."""


def _user_error_types() -> tuple[type[BaseException], ...]:
    from redrafter_mlx.errors import USER_ERRORS

    return USER_ERRORS


def friendly_errors(fn: F) -> F:
    """Turn expected failures into one red line and a non-zero exit, never a traceback."""

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
            print_error(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def print_error(message: str) -> None:
    console.print("[red]error:[/red] ", end="")
    console.print(message, markup=False)


def print_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
