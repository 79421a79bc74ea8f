"""Write a model as an HF/mlx-lm folder (config.json, model.safetensors, tokenizer files).

The folder appears all at once: files go to a temporary sibling directory that is renamed
into place, so a failure never leaves a half-written or partly overwritten user folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import mlx.core as mx


def export_hf_folder(
    config: dict[str, Any],
    weights: dict[str, mx.array],
    tokenizer: Any,
    out_dir: Path | str,
    force: bool = False,
) -> Path:
    """Write an ``mlx_lm.load``-able folder; a non-empty ``out_dir`` is only replaced with ``force``."""
    out_dir = Path(out_dir).expanduser().absolute()
    _check_target(out_dir, force)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.parent / f".{out_dir.name}.{uuid.uuid4().hex[:12]}.tmp"
    staging.mkdir()  # not mkdtemp: its 0700 mode would become the user's folder mode
    try:
        _write(config, weights, tokenizer, staging)
        _replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir


def _check_target(out_dir: Path, force: bool) -> None:
    """Only an absent or empty directory may be written without ``force``; never a file."""
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir} exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise FileExistsError(f"{out_dir} exists and is not empty; pass --force to replace it")


def _write(config: dict[str, Any], weights: dict[str, mx.array], tokenizer: Any, folder: Path) -> None:
    """The three artefacts mlx-lm and transformers look for."""
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    tokenizer.save_pretrained(str(folder))


def _replace(staging: Path, out_dir: Path) -> None:
    """Move ``staging`` to ``out_dir``; an old folder is only deleted once the new one is in place."""
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return
    backup = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
    os.rename(out_dir, backup / out_dir.name)
    try:
        os.rename(staging, out_dir)
    except BaseException:
        os.rename(backup / out_dir.name, out_dir)
        backup.rmdir()
        raise
    shutil.rmtree(backup, ignore_errors=True)
