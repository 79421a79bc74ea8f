"""redrafter-mlx: ReDrafter speculative decoding in pure MLX.

    from redrafter_mlx import load, generate, stream_generate

The API names load lazily, so importing a submodule stays cheap. Importing the package
first routes MLX's CPU matmuls to OpenBLAS on Linux (`runtime/fastblas.py`).
"""

from . import runtime  # noqa: F401 (the BLAS route is taken on import)

_API = ("load", "generate", "stream_generate", "Pipeline", "Response")


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    if name == "DecodingOptions":
        from .options import DecodingOptions

        return DecodingOptions
    raise AttributeError(f"module 'redrafter_mlx' has no attribute {name!r}")


__all__ = [*_API, "DecodingOptions"]
