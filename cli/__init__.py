"""Typer CLI (installed as redrafter_mlx.cli)."""
