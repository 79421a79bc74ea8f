"""The one place that decides device, default dtype and the BLAS library.

On Linux the `mlx[cpu]` wheel links the slow reference (netlib) BLAS; `fastblas.preload`,
run when `redrafter_mlx` is imported, routes MLX's matmuls to Debian's OpenBLAS instead
(10-20x faster float32 matmuls). Set REDRAFTER_NO_OPENBLAS=1 to keep the reference BLAS.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx

from ..errors import InputError

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


def on_gpu() -> bool:
    return mx.default_device() == mx.gpu


def device_name() -> str:
    """'gpu' or 'cpu': the device part of a calibration's key."""
    return "gpu" if on_gpu() else "cpu"


def default_dtype() -> mx.Dtype:
    """float16 on Apple GPUs; float32 on CPU, where half-precision matmuls are scalar code."""
    return mx.float16 if on_gpu() else mx.float32


def parse_dtype(name: str | None) -> mx.Dtype:
    if name is None:
        return default_dtype()
    if name not in DTYPES:
        raise InputError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[name]


def dtype_name(dtype: mx.Dtype) -> str:
    return next(k for k, v in DTYPES.items() if v == dtype)


def loaded_blas() -> str:
    """Which BLAS this process runs matmuls on: 'Accelerate', 'OpenBLAS <path>' or 'reference'."""
    if platform.system() == "Darwin":
        return "Accelerate"
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "unknown"
    for line in maps.splitlines():
        if "libopenblas" in line:
            return f"OpenBLAS ({line.split()[-1]})"
    return "reference BLAS (slow; install libopenblas0-pthread)"


@functools.cache
def parallel_streams() -> tuple[mx.Stream, ...]:
    """Streams whose work may run at the same time: one per core on the CPU, where each MLX
    stream has its own thread and element-wise kernels use one core (ml-explore/mlx#3019);
    just the default stream on a GPU, which is parallel already."""
    if on_gpu():
        return (mx.default_stream(mx.default_device()),)
    return tuple(mx.new_stream(mx.cpu) for _ in range(max(1, os.cpu_count() or 1)))


@contextlib.contextmanager
def blas_threads(count: int) -> Iterator[None]:
    """Run the block with OpenBLAS on `count` threads (no-op with another BLAS). With work
    on several streams, one BLAS thread per stream avoids oversubscribing the cores."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        get, set_ = lib.openblas_get_num_threads, lib.openblas_set_num_threads
    except (OSError, AttributeError):
        yield
        return
    before = get()
    set_(count)
    try:
        yield
    finally:
        set_(before)


def describe(dtype: mx.Dtype) -> str:
    """The one status line: device, dtype and BLAS."""
    return f"device={device_name()} dtype={dtype_name(dtype)} blas={loaded_blas()} mlx={mx.__version__}"
