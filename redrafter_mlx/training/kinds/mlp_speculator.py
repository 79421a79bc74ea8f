"""IBM's MLP speculator in training: its stages' settings and fms-extras' initialisation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import mlx.core as mx
import numpy as np
from mlx import nn

from ...drafting.kinds.mlp_speculator import MLPSpeculator, MLPSpeculatorConfig
from .unrolled import UnrolledRecipe


@dataclass(frozen=True)
class MLPSpeculatorRecipe(UnrolledRecipe):
    kind: ClassVar[str] = "mlp-speculator"

    inner_dim: int | None = None  # width of the stages; None: the LLM's hidden size
    tie_weights: bool = False  # one embedding, head and norm shared by all stages (upstream's field)
    scale_input: bool = False  # the stages start from rms_norm(h) / sqrt(2) (upstream's field)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tie_weights and self.predict < 2:
            raise ValueError("tie_weights needs predict >= 2 (one stage has nothing to tie)")

    def drafter_config(self, llm_config: dict[str, Any]) -> MLPSpeculatorConfig:
        hidden = llm_config["hidden_size"]
        return MLPSpeculatorConfig(
            emb_dim=hidden,
            inner_dim=self.inner_dim or hidden,
            n_predict=self.predict,
            vocab_size=llm_config["vocab_size"],
            tie_weights=self.tie_weights,
            scale_input=self.scale_input,
        )

    def fresh(self, llm_config: dict[str, Any], model: nn.Module | None, token_ids: np.ndarray | None) -> MLPSpeculator:
        """fms-extras' `MLPSpeculator.reset_parameters`: embeddings, projections and heads
        normal with std 1 / sqrt(inner_dim); the norms' weight 1 and bias 0 (their defaults)."""
        speculator = MLPSpeculator(self.drafter_config(llm_config))
        std = 1 / math.sqrt(speculator.config.inner_dim)
        for layer in (*speculator.emb, *speculator.proj, *speculator.head):
            layer.weight = mx.random.normal(layer.weight.shape) * std
        return speculator


RECIPE = MLPSpeculatorRecipe
