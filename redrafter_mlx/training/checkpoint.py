"""What a run writes: the resumable checkpoint (drafter, optimizer state, run state) and the
drafter folder it produces, for every kind training builds (`drafting.registry.save_drafter_folder`):
the folder's config.json model_type says which, so `drafting.registry.load_drafter_folder` loads it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_unflatten

from ..drafting.kinds.rnn import RecurrentDrafter
from ..drafting.registry import load_drafter_folder, save_drafter_folder
from ..drafting.seam import TreeDrafter

CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "train_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"


def exists(folder: Path) -> bool:
    return (folder / STATE_FILE).exists()


def save(folder: Path, drafter: TreeDrafter, opt: optim.Optimizer, state: dict[str, Any]) -> None:
    """Write the checkpoint beside `folder`, then swap it in: a kill never leaves a torn one."""
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_drafter_folder(drafter, tmp)
    mx.save_safetensors(str(tmp / OPTIMIZER_FILE), dict(tree_flatten(opt.state)))
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=1))
    if folder.exists():
        old = folder.with_name(folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(folder)


def load(folder: Path) -> tuple[TreeDrafter, dict[str, Any], dict[str, Any]]:
    """The checkpointed drafter (float32), run state, and optimizer state (nested, as `Optimizer.state`)."""
    state = json.loads((folder / STATE_FILE).read_text())
    opt_state = tree_unflatten(list(mx.load(str(folder / OPTIMIZER_FILE)).items()))
    return load_drafter_folder(folder, mx.float32), state, opt_state


def save_drafter_as(drafter: TreeDrafter, out_dir: str | Path, dtype: str = "float32") -> Path:
    """The drafter's folder (`save_drafter_folder`) with floating weights cast to `dtype`
    (the loaders cast back)."""
    target = getattr(mx, dtype)
    weights = [
        (k, v.astype(target) if mx.issubdtype(v.dtype, mx.floating) else v)
        for k, v in tree_flatten(drafter.parameters())
    ]
    if isinstance(drafter, RecurrentDrafter):  # keeps its token subset and n-gram table
        cast = drafter.rebuilt(drafter.config, weights)
    else:
        cast = type(drafter)(drafter.config)
        cast.load_weights(weights)
    return save_drafter_folder(cast, Path(out_dir))
