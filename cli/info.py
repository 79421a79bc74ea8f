"""`redrafter info`: what this machine will run on."""

from __future__ import annotations

import platform
from importlib.metadata import version

import mlx.core as mx
from rich.console import Console
from rich.table import Table

from redrafter_mlx import runtime
from redrafter_mlx.gguf import GGUFError, embedded_model_path
from redrafter_mlx.loading import ALIASES, DEFAULT_MODEL, SHIPPED_DRAFTERS
from redrafter_mlx.tuning import CALIBRATION_FILE, calibration_dir, read_calibration

from .app import app, friendly_errors


@app.command()
@friendly_errors
def info() -> None:
    """Show device, default dtype, BLAS library, versions and the embedded model."""
    try:
        embedded = str(embedded_model_path())
    except GGUFError as e:
        embedded = f"missing ({e})"
    table = Table(show_header=False, box=None)
    rows = {
        "redrafter-mlx": version("redrafter-mlx"),
        "mlx / mlx-lm": f"{mx.__version__} / {version('mlx-lm')}",
        "platform": f"{platform.system()} {platform.machine()}",
        "runtime": runtime.describe(runtime.default_dtype()),
        "OpenBLAS library": runtime.find_openblas() or "not installed (apt-get install libopenblas0-pthread)",
        "default model": f"{DEFAULT_MODEL} -> {embedded}",
        "aliases": ", ".join(f"{k}={v}" for k, v in ALIASES.items() if k != DEFAULT_MODEL),
        "shipped drafters": ", ".join(f"{name} -> {folder}" for name, folder in SHIPPED_DRAFTERS.items()),
        "calibration": calibration_status(),
    }
    for key, value in rows.items():
        table.add_row(f"[bold]{key}[/bold]", value)
    Console().print(table)


def calibration_status() -> str:
    """Whether this device and dtype have a calibration: shipped with a drafter, or tuned."""
    device, dtype = runtime.device_name(), runtime.dtype_name(runtime.default_dtype())
    shipped = [name for name, folder in SHIPPED_DRAFTERS.items()
               if read_calibration(folder / CALIBRATION_FILE, device, dtype) is not None]
    tuned = len(list(calibration_dir().glob("*.json")))
    return (f"{device}/{dtype}: shipped for {', '.join(shipped) or 'none'}; "
            f"{tuned} tuned in {calibration_dir()} (`redrafter tune`)")
