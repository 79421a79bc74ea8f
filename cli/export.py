"""`redrafter export`: write any loadable model as an mlx-lm-loadable folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from mlx.utils import tree_flatten

from redrafter_mlx import runtime
from redrafter_mlx.formats.export import export_hf_folder
from redrafter_mlx.formats.loading import DEFAULT_MODEL, SHIPPED_DRAFTER_KEY, load, shipped_drafter_name

from .app import app, console, friendly_errors
from .options import DTypeOpt, ModelOpt


@app.command()
@friendly_errors
def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write (must not exist unless --force).")],
    model: ModelOpt = DEFAULT_MODEL,
    dtype: DTypeOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing folder.")] = False,
) -> None:
    """Export the weights, config and tokenizer (with chat template) as a Hugging Face folder."""
    loaded = load(model, runtime.parse_dtype(dtype))
    weights = dict(tree_flatten(loaded.model.parameters()))
    drafter = shipped_drafter_name(loaded)  # the same weights keep their drafter
    config = loaded.config | ({SHIPPED_DRAFTER_KEY: drafter} if drafter else {})
    path = export_hf_folder(config, weights, loaded.tokenizer._tokenizer, out, force=force)
    console.print(f"wrote {path}")
