"""Route MLX's CPU matmuls to OpenBLAS on Linux, before MLX is loaded.

The `mlx[cpu]` wheel links the reference (netlib) BLAS, which makes float32 matmuls 10-20x
slower. Debian's OpenBLAS exports the same symbols, and a library opened with RTLD_GLOBAL
before `mlx.core` is loaded comes first in symbol lookup, so opening it is enough: no
LD_PRELOAD, no re-exec. `runtime/__init__.py` calls `preload()` on import, which is
why this module must not import MLX. Set REDRAFTER_NO_OPENBLAS=1 to keep the reference BLAS.
"""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import warnings
from pathlib import Path

DISABLE_ENV = "REDRAFTER_NO_OPENBLAS"
_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/lib/aarch64-linux-gnu/libopenblas.so.0",
)


def find_openblas() -> str | None:
    """Path of Debian's libopenblas.so.0, or None."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            if "libopenblas.so.0" in line and "=>" in line:
                return line.split("=>")[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return next((p for p in _CANDIDATES if Path(p).exists()), None)


def openblas_loaded() -> bool:
    try:
        return "libopenblas" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def preload() -> None:
    """Open OpenBLAS globally when it helps, is allowed and is still in time; when MLX was
    imported first, warn once with the fix instead."""
    if platform.system() != "Linux" or os.environ.get(DISABLE_ENV) or openblas_loaded():
        return
    path = find_openblas()
    if path is None:
        return
    if "mlx.core" in sys.modules:
        warnings.warn(
            f"mlx was imported before redrafter_mlx, so float32 matmuls use the slow reference BLAS: "
            f"import redrafter_mlx first, or run with LD_PRELOAD={path}",
            stacklevel=3,
        )
        return
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
