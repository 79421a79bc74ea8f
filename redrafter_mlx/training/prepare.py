"""What a run trains and scores on, from one distillation file: the records split, the LLM
features its recipe asks for, and the arrays its batches draw from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mlx import nn

from ..drafting.ngrams import NgramTable, build_ngram_table
from ..errors import InputError
from .dataset import select_token_subset, split_records, stored_hidden, subset_coverage, tapped_features
from .distill import HiddenStore
from .distill_file import read_distill_file
from .recipe import Recipe


@dataclass
class TrainingData:
    """What `train_drafter` trains and scores on, from one distillation file."""

    train: tuple[np.ndarray, np.ndarray]  # (hidden (N, D), windows (N, T+1)) of the training records
    heldout: tuple[np.ndarray, np.ndarray]  # the same for the held-out records
    heldout_answers: list[tuple[np.ndarray, np.ndarray]]  # (response ids, hidden) per held-out record
    token_ids: np.ndarray | None  # the head's token subset (None: full vocabulary)
    ngrams: NgramTable | None  # the training answers' set phrases (`ngrams.py`); RNN drafters only
    coverage: float  # share of held-out targets inside the token subset
    train_records: int
    heldout_records: int


def prepare_data(
    model: nn.Module,
    distill_file: str | Path,
    hidden_dir: str | Path,
    recipe: Recipe,
    llm_config: dict[str, Any],
    holdout_fraction: float,
    console: Any = None,
) -> TrainingData:
    """Read the distillation file, split it, and give the recipe the LLM features it trains on:
    the final-norm hidden states (the store filled for records that lack them) or, when it
    names layers, their inputs (`tapped_features`); where the recipe asks for them, pick the
    head's token subset and tabulate the training answers' set phrases."""
    records = read_distill_file(distill_file)
    if not records:
        raise InputError(f"{distill_file}: no distillation records")
    vocab_size = llm_config["vocab_size"]
    layers = recipe.feature_layers(llm_config)
    if layers is None:
        features = stored_hidden(model, records, HiddenStore(hidden_dir), console)
    else:
        features = tapped_features(model, records, layers, console)
    train_recs, held_recs = split_records(records, holdout_fraction)
    token_ids = None
    if recipe.head_subset:
        token_ids = select_token_subset(train_recs, recipe.head_subset, vocab_size)
    return TrainingData(
        train=recipe.arrays(train_recs, [features[r.id] for r in train_recs]),
        heldout=recipe.arrays(held_recs, [features[r.id] for r in held_recs]),
        heldout_answers=[(np.array(r.response_ids), features[r.id]) for r in held_recs] if layers is None else [],
        token_ids=token_ids,
        ngrams=build_ngram_table([r.response_ids for r in train_recs], vocab_size) if recipe.ngrams else None,
        coverage=subset_coverage(held_recs or train_recs, token_ids) if token_ids is not None else 1.0,
        train_records=len(train_recs),
        heldout_records=len(held_recs),
    )
