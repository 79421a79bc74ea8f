"""The drafter kinds, one entry each: its name, the config.json `model_type` of its folders, the
module that reads and writes them, for a kind with upstream checkpoints the name of their
format, and for a kind `redrafter train` builds the module of its training recipe.

Every kind module exposes the same functions: `load(folder, dtype) -> TreeDrafter`; when its
kind is savable, `save(drafter, folder) -> folder` (a folder `load` reads back); and when it
has an upstream format, `is_upstream(folder) -> bool` (whether a folder holds such a
checkpoint) and `convert(src, out, *, dtype, llm_config, force) -> out`. Modules are
imported on first use, so importing the registry does not load every kind. A folder of a
plain causal LM (model_type "llama" or "mistral") is a draft LLM.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import mlx.core as mx

from ..errors import InputError
from ..formats.loading import is_llm_type
from .seam import TreeDrafter


@dataclass(frozen=True)
class Kind:
    """One drafter kind."""

    name: str  # `TreeDrafter.kind` of its drafters and their sessions
    model_types: tuple[str, ...]  # config.json model_type(s) of its folders; `save` writes the first
    module: str  # the module defining its load (save, is_upstream, convert) functions
    upstream_format: str | None = None  # `convert --format` name of its upstream checkpoints
    savable: bool = True
    training: str | None = None  # the module of its training recipe (`training.recipe`), if trainable

    def functions(self) -> ModuleType:
        """The kind's module, imported now if it was not yet."""
        return importlib.import_module(self.module)


_KINDS_PACKAGE = "redrafter_mlx.drafting.kinds"
_RECIPES = "redrafter_mlx.training.kinds"  # imported by training only: a name here, not an import
RNN = Kind("redrafter", ("recurrent_drafting_drafter",), f"{_KINDS_PACKAGE}.rnn", training=f"{_RECIPES}.rnn")
# A draft model's folder names its own architecture; any one mlx-lm implements is a draft LLM.
DRAFT_LLM = Kind("draft-llm", ("llama", "mistral"), f"{_KINDS_PACKAGE}.draft_llm", savable=False)
# Upstream formats are detected in this order: the EAGLEs' checks read the checkpoint's keys,
# which a DFlash checkpoint's resemble (`fc`, `layers.*`), so DFlash's (its config's
# `dflash_config`) comes before them, as do the others' (file names and config fields).
KINDS = (
    RNN,
    Kind("medusa", ("medusa_drafter",), f"{_KINDS_PACKAGE}.medusa", "medusa", training=f"{_RECIPES}.medusa"),
    Kind(
        "mlp-speculator",
        ("mlp_speculator_drafter",),
        f"{_KINDS_PACKAGE}.mlp_speculator",
        "mlp",
        training=f"{_RECIPES}.mlp_speculator",
    ),
    Kind("dflash", ("dflash_drafter",), f"{_KINDS_PACKAGE}.dflash", "dflash", training=f"{_RECIPES}.dflash"),
    Kind("eagle3", ("eagle3_drafter",), f"{_KINDS_PACKAGE}.eagle3", upstream_format="eagle3"),
    Kind("eagle", ("eagle_drafter",), f"{_KINDS_PACKAGE}.eagle", "eagle", training=f"{_RECIPES}.eagle"),
    DRAFT_LLM,
)
_BY_MODEL_TYPE = {model_type: kind for kind in KINDS for model_type in kind.model_types}
_UPSTREAM = {kind.upstream_format: kind for kind in KINDS if kind.upstream_format is not None}
# `redrafter convert --format`: the RNN's own checkpoints (the reference's) and the upstream ones
FORMATS = (RNN.name, *_UPSTREAM)


class UnknownDrafterKind(InputError):
    pass


def kind_named(name: str) -> Kind:
    """The entry of kind `name` (`TreeDrafter.kind`)."""
    found = next((kind for kind in KINDS if kind.name == name), None)
    if found is None:
        raise UnknownDrafterKind(f"unknown drafter kind {name!r}; known: {', '.join(k.name for k in KINDS)}")
    return found


def detect_format(src: Path) -> str:
    """Which upstream format a checkpoint folder (or a file in it) holds; "redrafter" when no
    other format's files are there, so the ReDrafter converter's errors explain the rest."""
    folder = src.parent if src.is_file() else src
    for name, kind in _UPSTREAM.items():
        if folder.is_dir() and kind.functions().is_upstream(folder):
            return name
    return RNN.name


def convert_upstream(fmt: str, src: Path, out: Path, **options) -> Path:
    """Convert an upstream EAGLE / Medusa / MLP-speculator checkpoint (`options`: dtype,
    llm_config, force) to an MLX drafter folder."""
    return _UPSTREAM[fmt].functions().convert(src, out, **options)


def drafter_kind(folder: Path) -> str | None:
    """The folder's config.json `model_type`, or None when it has no readable config."""
    try:
        return json.loads((folder / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def load_drafter_folder(folder: Path, dtype: mx.Dtype) -> TreeDrafter:
    """The drafter in `folder`, of whichever kind its config names (RNN when it names none of
    them, so the RNN loader's own errors explain what is missing)."""
    model_type = drafter_kind(folder)
    kind = _BY_MODEL_TYPE.get(model_type or "") or (DRAFT_LLM if is_llm_type(model_type) else None)
    # An upstream checkpoint (no kind of ours, or a Llama config as EAGLE's) says to convert it.
    if kind is None or kind is DRAFT_LLM:
        upstream = detect_format(folder)
        if upstream != RNN.name:
            raise UnknownDrafterKind(
                f"{folder} is an upstream {upstream} checkpoint: convert it first "
                f"(`redrafter convert {folder} OUT -M MODEL`)"
            )
    if model_type is not None and kind is None:  # drafter_kind read it, so config.json exists
        raise UnknownDrafterKind(
            f"{folder}: unknown drafter kind {model_type!r} (config.json model_type); "
            f"known: {', '.join(sorted(_BY_MODEL_TYPE))}"
        )
    return (kind or RNN).functions().load(folder, dtype)


def save_drafter_folder(drafter: TreeDrafter, folder: Path) -> Path:
    """Write `drafter` (of a savable kind) as a folder `load_drafter_folder` reads back."""
    kind = kind_named(drafter.kind)
    if not kind.savable:
        savable = ", ".join(k.name for k in KINDS if k.savable)
        raise UnknownDrafterKind(f"cannot save a {drafter.kind} drafter; savable kinds: {savable}")
    return kind.functions().save(drafter, Path(folder))
