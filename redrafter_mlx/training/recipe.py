"""A drafter kind's training entry: its recipe.

The drafter registry (`drafting.registry.Kind.training`) names, for each kind training builds,
the module whose `RECIPE` is a frozen dataclass of that kind's own settings (architecture and
objective), with what the training loop asks of a kind: a fresh drafter, its micro-batches,
its loss and gradient, its held-out accuracy, and which LLM features it reads. The loop,
the data preparation and the evals hold no per-kind switches: they call these.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import mlx.core as mx
import numpy as np
from mlx import nn

from ..drafting.registry import KINDS, kind_named
from ..drafting.seam import TreeDrafter
from ..errors import InputError
from .dataset import assemble
from .distill_file import DistillRecord

# (units an epoch draws, units per micro-batch, micro-batch number -> the loss's inputs)
Batches = tuple[int, int, Callable[[int], tuple[Any, ...]]]
# (hidden (N, D) or tapped features (N, F), windows (N, T+1)): an `assemble`d training set
Positions = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Recipe:
    """The base of every kind's recipe; a subclass's fields are its kind's settings."""

    kind: ClassVar[str]
    ngrams: ClassVar[bool] = False  # whether its folder ships the answers' n-gram table

    @property
    def depths(self) -> int:
        """Tokens after the guaranteed one each training position's window holds (T)."""
        raise NotImplementedError

    @property
    def head_subset(self) -> int | None:
        """The size of the head's token subset, picked from the data (None: the whole vocabulary)."""
        return None

    def feature_layers(self, llm_config: dict[str, Any]) -> tuple[int, ...] | None:
        """The LLM layers whose inputs it trains on (None: the final-norm hidden state)."""
        return None

    def arrays(self, records: Sequence[DistillRecord], features: Sequence[np.ndarray]) -> Positions:
        """The arrays its batches draw from, for `records` and their features (`feature_layers`):
        by default each answer position's hidden state and its window of next tokens."""
        return assemble(records, features, self.depths)

    def drafter_config(self, llm_config: dict[str, Any]) -> Any:
        """The config of a fresh drafter for the LLM whose config.json is `llm_config`."""
        raise NotImplementedError

    def fresh(self, llm_config: dict[str, Any], model: nn.Module | None, token_ids: np.ndarray | None) -> TreeDrafter:
        """A fresh drafter (`model`, when given, is the LLM: some kinds start from its weights)."""
        raise NotImplementedError

    def batches(self, data: Positions, positions: int, seed: int) -> Batches:
        """The run's micro-batches of about `positions` training positions each."""
        raise NotImplementedError

    def loss_and_grad(self, model: nn.Module, drafter: TreeDrafter) -> Callable[..., tuple[mx.array, Any]]:
        """(drafter, *micro-batch) -> (loss, gradient of the drafter's trainable parameters)."""
        raise NotImplementedError

    def accuracy(self, drafter: TreeDrafter, model: nn.Module, data: Positions) -> dict[str, list[float]]:
        """Held-out teacher-forced top-1 / top-5 per depth."""
        raise NotImplementedError


def trainable_kinds() -> tuple[str, ...]:
    """The kinds `redrafter train` builds: those whose registry entry names a recipe."""
    return tuple(kind.name for kind in KINDS if kind.training is not None)


def recipe_type(kind: str) -> type[Recipe]:
    """The recipe class of drafter kind `kind`."""
    module = kind_named(kind).training
    if module is None:
        raise InputError(f"cannot train a {kind} drafter; trainable kinds: {', '.join(trainable_kinds())}")
    return importlib.import_module(module).RECIPE
