"""Entry point `redrafter`: picks the fast BLAS, then runs the Typer app."""

from __future__ import annotations

from redrafter_mlx.runtime import reexec_with_fast_blas

from . import convert, export, generate, info  # noqa: F401  (commands register themselves)
from .app import app


def main() -> None:
    reexec_with_fast_blas()
    app()


if __name__ == "__main__":
    main()
