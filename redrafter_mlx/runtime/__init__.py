"""What the process runs on: device, dtype, BLAS (`device`), fast kernels (`fastmath`), the
phase timers and progress bars. The lowest layer but `errors`.

Importing it routes MLX's CPU matmuls to OpenBLAS on Linux (`fastblas.py`), which must happen
before MLX loads: hence `preload()` before the device module (which imports MLX).
"""

from .fastblas import find_openblas, preload

preload()

from .device import (  # noqa: E402 (after the BLAS preload, on purpose)
    DTYPES,
    blas_threads,
    default_dtype,
    describe,
    device_name,
    dtype_name,
    loaded_blas,
    on_gpu,
    parallel_streams,
    parse_dtype,
)

__all__ = [
    "DTYPES",
    "blas_threads",
    "default_dtype",
    "describe",
    "device_name",
    "dtype_name",
    "find_openblas",
    "loaded_blas",
    "on_gpu",
    "parallel_streams",
    "parse_dtype",
]
