"""ReDrafter's RNN in training: its architecture settings and its fresh start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import mlx.core as mx
import numpy as np
from mlx import nn

from ...drafting.kinds.rnn import DrafterConfig, RecurrentDrafter
from .unrolled import UnrolledRecipe


@dataclass(frozen=True)
class RNNRecipe(UnrolledRecipe):
    kind: ClassVar[str] = "redrafter"
    ngrams: ClassVar[bool] = True

    layers: int = 2  # ResBlocks
    exit_dim: int | None = None  # None: the LLM's hidden size; <= 0: 2 * hidden (the reference's)
    rnn: bool = True  # the recurrent state update (else a sum of embeddings)
    tied: bool = True  # the head tied to the LLM's embedding
    token_subset: int | None = 16384  # the head's K most frequent targets (None or 0: the vocabulary)

    @property
    def head_subset(self) -> int | None:
        return self.token_subset or None

    def drafter_config(self, llm_config: dict[str, Any]) -> DrafterConfig:
        hidden = llm_config["hidden_size"]
        return DrafterConfig(
            vocab_size=llm_config["vocab_size"],
            hidden_size=hidden,
            num_draft_layers=self.layers,
            exit_dim=hidden if self.exit_dim is None else self.exit_dim,
            rnn=self.rnn,
            head_tied=self.tied,
            token_subset_size=self.head_subset,
        )

    def fresh(
        self, llm_config: dict[str, Any], model: nn.Module | None, token_ids: np.ndarray | None
    ) -> RecurrentDrafter:
        """Default nn.Linear init everywhere except the head, which starts small (std 0.02
        untied, so the initial loss is ~log K and no token is favoured) or, tied, as head_proj =
        the exit->hidden map that is 0 (the table is the frozen LLM embedding)."""
        config = self.drafter_config(llm_config)
        drafter = RecurrentDrafter(config, None if token_ids is None else mx.array(token_ids))
        head = drafter.head_proj if self.tied else drafter.lm_head[config.num_draft_layers]
        head.weight = mx.random.normal(head.weight.shape) * 0.02
        return drafter


RECIPE = RNNRecipe
