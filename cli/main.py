"""Entry point `redrafter`: picks the fast BLAS first, then loads and runs the Typer app."""

from __future__ import annotations

import typer


def load_commands() -> typer.Typer:
    """The app with every command registered (importing a command module registers it)."""
    from . import bench, chat, convert, export, generate, info, quantize, sweep, train  # noqa: F401
    from .app import app

    return app


def main() -> None:
    from redrafter_mlx.runtime import reexec_with_fast_blas

    reexec_with_fast_blas()  # before the heavy imports, which would otherwise run twice
    load_commands()()


if __name__ == "__main__":
    main()
