"""Medusa in training: its heads' settings and upstream's start from the LLM's own head."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import mlx.core as mx
import numpy as np
from mlx import nn

from ...drafting.kinds.medusa import Medusa, MedusaConfig
from ..loss import teacher_head
from .unrolled import UnrolledRecipe


@dataclass(frozen=True)
class MedusaRecipe(UnrolledRecipe):
    kind: ClassVar[str] = "medusa"

    layers: int = 1  # ResBlocks per head

    def drafter_config(self, llm_config: dict[str, Any]) -> MedusaConfig:
        return MedusaConfig(
            vocab_size=llm_config["vocab_size"],
            hidden_size=llm_config["hidden_size"],
            num_heads=self.predict,
            num_layers=self.layers,
        )

    def fresh(self, llm_config: dict[str, Any], model: nn.Module | None, token_ids: np.ndarray | None) -> Medusa:
        """Upstream Medusa's init: each ResBlock's weight zero (the block starts as x + silu(b))
        and each head's vocabulary projection a copy of the LLM's output head, so every head
        starts from the LLM's own next-token guess. Without `model`: a small random projection."""
        medusa = Medusa(self.drafter_config(llm_config))
        rows = teacher_head(model, medusa.config.hidden_size, None) if model is not None else None
        for head in medusa.heads:
            for block in head[:-1]:
                block.linear.weight = mx.zeros_like(block.linear.weight)
            head[-1].weight = rows if rows is not None else mx.random.normal(head[-1].weight.shape) * 0.02
        return medusa


RECIPE = MedusaRecipe
