"""The drafter a training run starts from: a fresh one, or a drafter folder to fine-tune."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from ..drafter import Drafter, load_drafter
from ..errors import InputError
from .config import TrainConfig


def make_drafter(cfg: TrainConfig, llm_config: dict[str, Any], token_ids: np.ndarray | None, seed: int = 0) -> Drafter:
    """A fresh drafter for the LLM. Default nn.Linear init everywhere except the head,
    which starts small (std 0.02 untied, so the initial loss is ~log K and no token is
    favoured) or, tied, as head_proj = the exit->hidden map that is 0 (the table is the
    frozen LLM embedding)."""
    mx.random.seed(seed)
    config = cfg.drafter_config(llm_config)
    drafter = Drafter(config, None if token_ids is None else mx.array(token_ids))
    if cfg.head_tied:
        drafter.head_proj.weight = mx.random.normal(drafter.head_proj.weight.shape) * 0.02
    else:
        head = drafter.lm_head[config.num_draft_layers]
        head.weight = mx.random.normal(head.weight.shape) * 0.02
    mx.eval(drafter.parameters())
    return drafter


def starting_drafter(path: str | Path, llm_config: dict[str, Any]) -> Drafter:
    """The drafter in folder `path`, to fine-tune, checked against the LLM it will serve."""
    drafter = load_drafter(path)
    have = (drafter.config.hidden_size, drafter.config.vocab_size)
    want = (llm_config["hidden_size"], llm_config["vocab_size"])
    if have != want:
        raise InputError(f"{path}: the drafter is for hidden size {have[0]} and vocabulary {have[1]}, "
                         f"the LLM has {want[0]} and {want[1]}")
    return drafter
