"""Write a model as an HF/mlx-lm folder (config.json, model.safetensors, tokenizer files).

The folder appears all at once: files go to a temporary sibling directory that is renamed
into place (`checkpoint.save_staged`), so a failure never leaves a half-written or partly
overwritten user folder.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx

from .checkpoint import CONFIG_FILE, WEIGHTS_FILE, check_target, save_staged


def export_hf_folder(
    config: dict[str, Any],
    weights: dict[str, mx.array],
    tokenizer: Any,
    out_dir: Path | str,
    force: bool = False,
) -> Path:
    """Write an ``mlx_lm.load``-able folder; a non-empty ``out_dir`` is only replaced with
    ``force`` (else `TargetExists`)."""
    out_dir = Path(out_dir).expanduser().absolute()
    check_target(out_dir, force)
    return save_staged(partial(_write, config, weights, tokenizer), out_dir)


def _write(config: dict[str, Any], weights: dict[str, mx.array], tokenizer: Any, folder: Path) -> None:
    """The three artefacts mlx-lm and transformers look for."""
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    mx.save_safetensors(str(folder / WEIGHTS_FILE), weights, metadata={"format": "mlx"})
    tokenizer.save_pretrained(str(folder))
