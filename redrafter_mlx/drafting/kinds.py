"""Which drafter kind a folder holds: the `model_type` of its config.json picks the loader.

A folder of a plain causal LM (model_type "llama" or "mistral") is a draft LLM. Loaders are
imported on first use, so importing the package does not load every kind's module.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import mlx.core as mx

from ..errors import InputError
from .seam import TreeDrafter

# model_type -> "module:function" of a loader (folder, dtype) -> TreeDrafter
LOADERS = {
    "recurrent_drafting_drafter": "redrafter_mlx.drafter:load_drafter",
    "medusa_drafter": "redrafter_mlx.drafting.medusa:load_medusa",
    "mlp_speculator_drafter": "redrafter_mlx.drafting.mlp_speculator:load_mlp_speculator",
    "eagle_drafter": "redrafter_mlx.drafting.eagle:load_eagle",
    "llama": "redrafter_mlx.drafting.draft_llm:load_draft_llm",
    "mistral": "redrafter_mlx.drafting.draft_llm:load_draft_llm",
}


# `TreeDrafter.kind` -> "module:function" of a saver (drafter, folder) -> folder, for the kinds
# `redrafter train` trains; each writes a config.json whose model_type LOADERS reads back
SAVERS = {
    "redrafter": "redrafter_mlx.drafter:save_drafter",
    "mlp-speculator": "redrafter_mlx.drafting.mlp_speculator:save_mlp_speculator",
    "medusa": "redrafter_mlx.drafting.medusa:save_medusa",
    "eagle": "redrafter_mlx.drafting.eagle:save_eagle",
}


# `redrafter convert --format`: format -> (module, converter, detector of an upstream folder)
UPSTREAM_FORMATS = {
    "medusa": ("redrafter_mlx.drafting.medusa", "convert_medusa", "is_medusa_checkpoint"),
    "mlp": ("redrafter_mlx.drafting.mlp_speculator", "convert_mlp_speculator", "is_mlp_speculator_checkpoint"),
    "eagle": ("redrafter_mlx.drafting.eagle", "convert_eagle", "is_eagle_checkpoint"),
}
FORMATS = ("redrafter", *UPSTREAM_FORMATS)


class UnknownDrafterKind(InputError):
    pass


def detect_format(src: Path) -> str:
    """Which upstream format a checkpoint folder (or a file in it) holds; "redrafter" when no
    other format's files are there, so the ReDrafter converter's errors explain the rest.
    The cheap checks (file names, config fields) run before EAGLE's, which reads the keys."""
    folder = src.parent if src.is_file() else src
    for name, (module, _, detector) in UPSTREAM_FORMATS.items():
        if folder.is_dir() and getattr(importlib.import_module(module), detector)(folder):
            return name
    return "redrafter"


def convert_upstream(fmt: str, src: Path, out: Path, **options) -> Path:
    """Convert an upstream EAGLE / Medusa / MLP-speculator checkpoint (`options`: dtype,
    llm_config, force) to an MLX drafter folder."""
    module, converter, _ = UPSTREAM_FORMATS[fmt]
    return getattr(importlib.import_module(module), converter)(src, out, **options)


def drafter_kind(folder: Path) -> str | None:
    """The folder's config.json `model_type`, or None when it has no readable config."""
    try:
        return json.loads((folder / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def load_drafter_folder(folder: Path, dtype: mx.Dtype) -> TreeDrafter:
    """The drafter in `folder`, of whichever kind its config names (RNN when it names none of
    them, so the RNN loader's own errors explain what is missing)."""
    kind = drafter_kind(folder)
    target = LOADERS.get(kind or "", LOADERS["recurrent_drafting_drafter"])
    # An upstream checkpoint (no kind of ours, or a Llama config as EAGLE's) says to convert it.
    if kind not in LOADERS or target == LOADERS["llama"]:
        upstream = detect_format(folder)
        if upstream != "redrafter":
            raise UnknownDrafterKind(f"{folder} is an upstream {upstream} checkpoint: convert it first "
                                     f"(`redrafter convert {folder} OUT -M MODEL`)")
    if kind is not None and kind not in LOADERS:  # drafter_kind read it, so config.json exists
        raise UnknownDrafterKind(
            f"{folder}: unknown drafter kind {kind!r} (config.json model_type); known: {', '.join(sorted(LOADERS))}"
        )
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)(folder, dtype)


def save_drafter_folder(drafter: TreeDrafter, folder: Path) -> Path:
    """Write `drafter` (a kind in SAVERS) as a folder `load_drafter_folder` reads back."""
    if drafter.kind not in SAVERS:
        raise UnknownDrafterKind(f"cannot save a {drafter.kind} drafter; savable kinds: {', '.join(SAVERS)}")
    module, function = SAVERS[drafter.kind].split(":")
    return getattr(importlib.import_module(module), function)(drafter, Path(folder))
