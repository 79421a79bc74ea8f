"""`python -m redrafter_mlx.runtime`: the OpenBLAS library to preload (the Makefile's tests), or nothing."""

from .fastblas import find_openblas

print(find_openblas() or "")
