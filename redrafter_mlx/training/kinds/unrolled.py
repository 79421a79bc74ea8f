"""What the stateless kinds (ReDrafter's RNN, IBM's MLP speculator, Medusa) share in training:
positions sampled from every answer, the loss unrolled through the drafting seam
(`training.loss`, paper Eq. 2, optionally with soft targets) and top-k accuracy per depth."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx import nn

from ...drafting.kinds.llm_embedding import Embedding
from ...drafting.seam import TreeDrafter
from ..dataset import batch_rows, later_states
from ..loss import head_index_map, loss_and_grad, unrolled_logits
from ..recipe import Batches, Positions, Recipe


@dataclass(frozen=True)
class UnrolledRecipe(Recipe):
    """A kind trained position by position on the LLM's final-norm hidden states."""

    predict: int = 4  # T, tokens predicted per position (beam_length - 1 are used)
    soft_targets: float = 0.0  # weight of the CE against the LLM's distribution (0: Eq. 2 only)

    def __post_init__(self) -> None:
        if self.predict < 1:
            raise ValueError(f"predict must be >= 1, got {self.predict}")

    @property
    def depths(self) -> int:
        return self.predict

    def batches(self, data: Positions, positions: int, seed: int) -> Batches:
        """`positions` rows a micro-batch: (hidden, windows, later states with soft targets)."""
        n = len(data[0])
        return n, positions, lambda k: self.micro_batch(data, batch_rows(seed, n, k, positions))

    def micro_batch(self, data: Positions, rows: np.ndarray) -> tuple[mx.array, mx.array, mx.array | None]:
        """The loss's inputs for `rows`: hidden (M, D), windows (M, T+1), and with soft targets
        the later states (M, T, D)."""
        hidden, windows = data
        later = mx.array(later_states(hidden, rows, self.predict)) if self.soft_targets > 0 else None
        return mx.array(hidden[rows]), mx.array(windows[rows]), later

    def loss_and_grad(self, model: nn.Module, drafter: TreeDrafter) -> Callable[..., Any]:
        return loss_and_grad(model, drafter, self.predict, self.soft_targets)

    def accuracy(self, drafter: TreeDrafter, model: nn.Module, data: Positions) -> dict[str, list[float]]:
        return accuracy(drafter, model.embedding, *data, self.predict)


def accuracy(
    drafter: TreeDrafter,
    embedding: Embedding,
    hidden: np.ndarray,
    tokens: np.ndarray,
    predict: int,
    batch: int = 2048,
) -> dict[str, list[float]]:
    """Teacher-forced top-1 / top-5 accuracy per depth over ALL targets (a target outside
    the token subset counts as a miss, so trimming is charged for what it cannot propose)."""
    index_map = head_index_map(drafter)
    hits = np.zeros((3, predict))  # top-1, top-5, targets
    for s in range(0, len(hidden), batch):
        tok = mx.array(tokens[s : s + batch])
        logits = unrolled_logits(drafter, embedding, mx.array(hidden[s : s + batch]), tok, predict)
        for j, lg in enumerate(logits):
            target = tok[:, j + 1]
            head_target = mx.where(target >= 0, index_map[mx.maximum(target, 0)], -1)
            top5 = mx.argpartition(-lg, kth=4, axis=-1)[:, :5] if lg.shape[-1] > 5 else mx.argsort(-lg)[:, :5]
            known = head_target >= 0
            in1 = (mx.argmax(lg, axis=-1) == head_target) & known
            in5 = (top5 == head_target[:, None]).any(axis=-1) & known
            hits[:, j] += np.array(mx.stack([in1.sum(), in5.sum(), (target >= 0).sum()]))
    total = np.maximum(hits[2], 1)
    return {"top1": (hits[0] / total).tolist(), "top5": (hits[1] / total).tolist()}
