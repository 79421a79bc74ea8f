"""`redrafter info`: what this machine will run on."""

from __future__ import annotations

import platform
from importlib.metadata import version

import mlx.core as mx
from rich.console import Console
from rich.table import Table

from redrafter_mlx import runtime
from redrafter_mlx.errors import InputError
from redrafter_mlx.formats.loading import ALIASES, DEFAULT_MODEL, SHIPPED_DRAFTERS, load, shipped_drafter_name
from redrafter_mlx.models.adapter import TreeModel
from redrafter_mlx.runtime import distributed
from redrafter_mlx.tuning.calibration import CALIBRATION_FILE, calibration_dir, read_calibration

from .app import app, friendly_errors
from .options import ModelOpt


@app.command()
@friendly_errors
def info(model: ModelOpt = DEFAULT_MODEL) -> None:
    """Show device, default dtype, BLAS library, versions, the model (its context length) and
    its drafter."""
    table = Table(show_header=False, box=None)
    rows = {
        "redrafter-mlx": version("redrafter-mlx"),
        "mlx / mlx-lm": f"{mx.__version__} / {version('mlx-lm')}",
        "platform": f"{platform.system()} {platform.machine()}",
        "runtime": runtime.describe(runtime.default_dtype()),
        "distributed": distributed.describe(),
        "OpenBLAS library": runtime.find_openblas() or "not installed (apt-get install libopenblas0-pthread)",
        "model": describe_model(model),
        "aliases": ", ".join(f"{k}={v}" for k, v in ALIASES.items() if k != DEFAULT_MODEL),
        "shipped drafters": ", ".join(f"{name} -> {folder}" for name, folder in SHIPPED_DRAFTERS.items()),
        "calibration": calibration_status(),
    }
    for key, value in rows.items():
        table.add_row(f"[bold]{key}[/bold]", value)
    Console().print(table)


def describe_model(name: str) -> str:
    """Where the model comes from, its shape, its context length and its shipped drafter."""
    try:
        loaded = load(name, runtime.default_dtype())
    except InputError as e:
        return f"{name}: cannot load ({e})"
    args = loaded.model.args
    context = f"context {args.max_position_embeddings} tokens" if args.max_position_embeddings else "context unknown"
    forward = (
        f"mlx-lm's {type(loaded.model.wrapped).__module__.rsplit('.', 1)[-1]} class"
        if isinstance(loaded.model, TreeModel)
        else "the compiled Llama forward"
    )
    return (
        f"{name} -> {loaded.source}\n{args.model_type}, {args.num_hidden_layers} layers, hidden "
        f"{args.hidden_size}, vocab {args.vocab_size}, {context}\nverified by {forward}: token trees yes, "
        "draft LLMs yes (any architecture, same tokenizer), hidden-state drafters yes (ReDrafter, EAGLE, "
        f"Medusa, MLP speculator)\nshipped drafter: {shipped_drafter_name(loaded) or 'none (pass --drafter)'}"
    )


def calibration_status() -> str:
    """Whether this device and dtype have a calibration: shipped with a drafter, or tuned."""
    device, dtype = runtime.device_name(), runtime.dtype_name(runtime.default_dtype())
    shipped = [
        name
        for name, folder in SHIPPED_DRAFTERS.items()
        if read_calibration(folder / CALIBRATION_FILE, device, dtype) is not None
    ]
    tuned = len(list(calibration_dir().glob("*.json")))
    return (
        f"{device}/{dtype}: shipped for {', '.join(shipped) or 'none'}; "
        f"{tuned} tuned in {calibration_dir()} (`redrafter tune`)"
    )
