"""Phase 2 of drafter training: fit the drafter to the LLM's own answers (paper Eq. 2).

Phase 1, the answers, is `distill.py`. Here, one module per job:
`config` (what a run is set to; the defaults are the shipped drafter's recipe), `recipe` (what
a drafter kind brings to training; each kind's in `kinds/`, named by the drafter registry),
`dataset` (distillation records -> hidden states and token windows, split, token subset),
`prepare` (a run's data, with the LLM features its recipe reads), `loss`
(Eq. 2 and the soft targets, on the drafter unrolled as in beam search), `schedule` (the
learning rate), `start` (the drafter a run starts from), `evaluation` (scores and the best
drafter), `checkpoint` (what a run writes) and `loop` (`train_drafter`).
"""

from __future__ import annotations

from .checkpoint import save_drafter_as
from .config import Evaluation, Optimisation, TrainConfig
from .dataset import assemble, prefill_hidden, split_records
from .loop import TrainResult, train_drafter
from .prepare import TrainingData, prepare_data
from .recipe import Recipe, recipe_type, trainable_kinds

__all__ = [
    "Evaluation",
    "Optimisation",
    "Recipe",
    "TrainConfig",
    "TrainResult",
    "TrainingData",
    "assemble",
    "prefill_hidden",
    "prepare_data",
    "recipe_type",
    "save_drafter_as",
    "split_records",
    "trainable_kinds",
    "train_drafter",
]
