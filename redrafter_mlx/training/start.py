"""The drafter a training run starts from: a fresh one of the recipe's kind, or a drafter
folder (of any kind training builds) to fine-tune."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx import nn

from ..drafting.registry import load_drafter_folder
from ..drafting.seam import TreeDrafter
from ..errors import InputError
from .recipe import Recipe


def make_drafter(
    recipe: Recipe,
    llm_config: dict[str, Any],
    token_ids: np.ndarray | None,
    seed: int = 0,
    model: nn.Module | None = None,
) -> TreeDrafter:
    """A fresh drafter of the recipe's kind for the LLM (`model`, when given, is the LLM itself:
    Medusa's heads start as its output head, EAGLE's embedding is its embedding). `token_ids`:
    the RNN head's token subset."""
    mx.random.seed(seed)
    drafter = recipe.fresh(llm_config, model, token_ids)
    mx.eval(drafter.parameters())
    return drafter


def drafter_sizes(drafter: TreeDrafter) -> tuple[int, int]:
    """(hidden size, vocabulary size) the drafter is built for (EAGLE's config is a dict)."""
    config = drafter.config
    if isinstance(config, dict):
        return config["hidden_size"], config["vocab_size"]
    return config.hidden_size, config.vocab_size


def starting_drafter(path: str | Path, llm_config: dict[str, Any], recipe: Recipe) -> TreeDrafter:
    """The drafter in folder `path`, to fine-tune, checked against the LLM it will serve, the
    run's kind and the depths it trains."""
    drafter = load_drafter_folder(Path(path), mx.float32)
    if drafter.kind != recipe.kind:
        raise InputError(f"{path} holds a {drafter.kind} drafter; the run trains kind {recipe.kind}")
    have = drafter_sizes(drafter)
    want = (llm_config["hidden_size"], llm_config["vocab_size"])
    if have != want:
        raise InputError(
            f"{path}: the drafter is for hidden size {have[0]} and vocabulary {have[1]}, "
            f"the LLM has {want[0]} and {want[1]}"
        )
    check_depths(drafter, recipe.depths, str(path))
    return drafter


def check_depths(drafter: TreeDrafter, predict: int, name: str) -> None:
    """A drafter with a fixed number of heads or stages cannot be trained deeper than it drafts."""
    deepest = drafter.max_beam_length
    if deepest is not None and predict > deepest - 1:
        raise InputError(
            f"{name}: this {drafter.kind} drafter drafts at most {deepest - 1} tokens, "
            f"but the run predicts {predict} (set predict to at most {deepest - 1})"
        )
