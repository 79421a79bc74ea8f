"""The drafter a training run starts from: a fresh one of the configured kind, or a drafter
folder (of any kind training builds) to fine-tune."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx import nn

from ..drafting.kinds.eagle import Eagle
from ..drafting.kinds.medusa import Medusa
from ..drafting.kinds.mlp_speculator import MLPSpeculator
from ..drafting.kinds.rnn import RecurrentDrafter
from ..drafting.registry import load_drafter_folder
from ..drafting.seam import TreeDrafter
from ..errors import InputError
from .config import TrainConfig
from .loss import teacher_head


def make_drafter(
    cfg: TrainConfig,
    llm_config: dict[str, Any],
    token_ids: np.ndarray | None,
    seed: int = 0,
    model: nn.Module | None = None,
) -> TreeDrafter:
    """A fresh drafter of kind `cfg.kind` for the LLM (`model`, when given, is the LLM itself:
    Medusa's heads start as its output head, EAGLE's embedding is its embedding). `token_ids`:
    the RNN head's token subset."""
    mx.random.seed(seed)
    if cfg.kind == "mlp-speculator":
        drafter: TreeDrafter = fresh_mlp_speculator(cfg, llm_config)
    elif cfg.kind == "medusa":
        drafter = fresh_medusa(cfg, llm_config, model)
    elif cfg.kind == "eagle":
        drafter = fresh_eagle(cfg, llm_config, model)
    else:
        drafter = fresh_rnn(cfg, llm_config, token_ids)
    mx.eval(drafter.parameters())
    return drafter


def fresh_rnn(cfg: TrainConfig, llm_config: dict[str, Any], token_ids: np.ndarray | None) -> RecurrentDrafter:
    """Default nn.Linear init everywhere except the head, which starts small (std 0.02
    untied, so the initial loss is ~log K and no token is favoured) or, tied, as head_proj =
    the exit->hidden map that is 0 (the table is the frozen LLM embedding)."""
    config = cfg.drafter_config(llm_config)
    drafter = RecurrentDrafter(config, None if token_ids is None else mx.array(token_ids))
    if cfg.head_tied:
        drafter.head_proj.weight = mx.random.normal(drafter.head_proj.weight.shape) * 0.02
    else:
        head = drafter.lm_head[config.num_draft_layers]
        head.weight = mx.random.normal(head.weight.shape) * 0.02
    return drafter


def fresh_mlp_speculator(cfg: TrainConfig, llm_config: dict[str, Any]) -> MLPSpeculator:
    """fms-extras' `MLPSpeculator.reset_parameters`: embeddings, projections and heads
    normal with std 1 / sqrt(inner_dim); the norms' weight 1 and bias 0 (their defaults)."""
    speculator = MLPSpeculator(cfg.kind_config(llm_config))
    std = 1 / math.sqrt(speculator.config.inner_dim)
    for layer in (*speculator.emb, *speculator.proj, *speculator.head):
        layer.weight = mx.random.normal(layer.weight.shape) * std
    return speculator


def fresh_medusa(cfg: TrainConfig, llm_config: dict[str, Any], model: nn.Module | None) -> Medusa:
    """Upstream Medusa's init: each ResBlock's weight zero (the block starts as x + silu(b))
    and each head's vocabulary projection a copy of the LLM's output head, so every head
    starts from the LLM's own next-token guess. Without `model`: a small random projection."""
    medusa = Medusa(cfg.kind_config(llm_config))
    rows = teacher_head(model, medusa.config.hidden_size, None) if model is not None else None
    for head in medusa.heads:
        for block in head[:-1]:
            block.linear.weight = mx.zeros_like(block.linear.weight)
        head[-1].weight = rows if rows is not None else mx.random.normal(head[-1].weight.shape) * 0.02
    return medusa


def fresh_eagle(cfg: TrainConfig, llm_config: dict[str, Any], model: nn.Module | None) -> Eagle:
    """Upstream's start (SafeAILab/EAGLE `cnets1.Model(config, load_emb=True)`): `fc` and the
    layers at their default init (torch's and MLX's nn.Linear alike: U(+-1/sqrt(fan_in)); norms 1),
    `embed_tokens` a copy of the LLM's embedding (dequantized if need be; frozen by `Eagle`).
    Without `model`: the default random embedding."""
    eagle = Eagle(cfg.kind_config(llm_config))
    if model is not None:
        vocab = llm_config["vocab_size"]
        eagle.embed_tokens.weight = model.embedding(mx.arange(vocab, dtype=mx.int32)).astype(mx.float32)
    return eagle


def drafter_sizes(drafter: TreeDrafter) -> tuple[int, int]:
    """(hidden size, vocabulary size) the drafter is built for (EAGLE's config is a dict)."""
    config = drafter.config
    if isinstance(config, dict):
        return config["hidden_size"], config["vocab_size"]
    return config.hidden_size, config.vocab_size


def starting_drafter(
    path: str | Path, llm_config: dict[str, Any], kind: str = "redrafter", predict: int = 1
) -> TreeDrafter:
    """The drafter in folder `path`, to fine-tune, checked against the LLM it will serve, the
    run's kind and the depths it trains (`predict`)."""
    drafter = load_drafter_folder(Path(path), mx.float32)
    if drafter.kind != kind:
        raise InputError(f"{path} holds a {drafter.kind} drafter; the run trains kind {kind}")
    have = drafter_sizes(drafter)
    want = (llm_config["hidden_size"], llm_config["vocab_size"])
    if have != want:
        raise InputError(
            f"{path}: the drafter is for hidden size {have[0]} and vocabulary {have[1]}, "
            f"the LLM has {want[0]} and {want[1]}"
        )
    check_depths(drafter, predict, str(path))
    return drafter


def check_depths(drafter: TreeDrafter, predict: int, name: str) -> None:
    """A drafter with a fixed number of heads or stages cannot be trained deeper than it drafts."""
    deepest = drafter.max_beam_length
    if deepest is not None and predict > deepest - 1:
        raise InputError(
            f"{name}: this {drafter.kind} drafter drafts at most {deepest - 1} tokens, "
            f"but the run predicts {predict} (set predict to at most {deepest - 1})"
        )
