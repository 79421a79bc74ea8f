"""Entry point `redrafter`: loads and runs the Typer app."""

from __future__ import annotations

import os
import sys

import typer


def load_commands() -> typer.Typer:
    """The app with every command registered (importing a command module registers it)."""
    from . import bench, chat, convert, export, generate, info, quantize, serve, sweep, train, tune  # noqa: F401
    from .app import app

    return app


def main() -> None:
    from .app import print_error  # importing redrafter_mlx first routes MLX to OpenBLAS (fastblas.py)

    # The CLI checks prompt lengths against the context itself, in one line of its own.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    try:
        code = load_commands()(standalone_mode=False)
    except typer.Abort:
        code = 130
    except Exception as e:
        # typer's own option checks (`min=`, unknown options) raise click's usage errors, which
        # typer (it vendors click) does not export: known by their interface, shown in one line.
        if not (hasattr(e, "format_message") and hasattr(e, "exit_code")):
            raise
        if e.format_message():  # empty when no command was given: the help was shown
            print_error(e.format_message())
        code = e.exit_code
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
