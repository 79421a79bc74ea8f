"""Entry point `redrafter`: loads and runs the Typer app."""

from __future__ import annotations

import os
import signal
import sys
from functools import partial

import typer


def load_commands() -> typer.Typer:
    """The app with every command registered (importing a command module registers it)."""
    from . import bench, chat, convert, export, generate, info, quantize, serve, sweep, train, tune  # noqa: F401
    from .app import app

    return app


def main() -> None:
    if "MLX_RANK" in os.environ:  # under `mlx.launch`, which ends every rank when one fails: say why here
        signal.signal(signal.SIGTERM, partial(stopped_by_launch, os.environ["MLX_RANK"]))  # first: before imports
    from redrafter_mlx.errors import InputError
    from redrafter_mlx.runtime import distributed  # importing redrafter_mlx routes MLX to OpenBLAS first

    from .app import console, print_error

    # The CLI checks prompt lengths against the context itself, in one line of its own.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        leader = distributed.is_leader()
    except InputError as error:
        print_error(str(error))
        sys.exit(1)
    if not leader:  # under `mlx.launch` the other ranks decode in step, silently but for errors
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
        console.quiet = True

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


def stopped_by_launch(rank: str, *_) -> None:
    sys.stderr.write(f"error: rank {rank} stopped: the launcher ended the group (another rank exited; see its error)\n")
    sys.stderr.flush()
    os._exit(1)


if __name__ == "__main__":
    main()
