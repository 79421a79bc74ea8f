"""Lazy-eval-aware timing and profiling (installed as redrafter_mlx.profiling)."""
