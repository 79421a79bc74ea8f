"""Phase 2 of drafter training: fit the drafter to the LLM's own answers (paper Eq. 2).

Phase 1, the answers, is `distill.py`. Here, one module per job:
`config` (what a run is set to; the defaults are the shipped drafter's recipe), `dataset`
(distillation records -> hidden states and token windows, split, token subset), `loss`
(Eq. 2 and the soft targets, on the drafter unrolled as in beam search), `schedule` (the
learning rate), `start` (the drafter a run starts from), `evaluation` (scores and the best
drafter), `checkpoint` (what a run writes) and `loop` (`train_drafter`). The drafter is
ReDrafter's RNN or, with `TrainConfig.kind`, IBM's MLP speculator or Medusa: the loss unrolls
any stateless kind through the drafting seam; or EAGLE, trained on whole answers by its own
objective (`eagle`: next-feature regression + the LLM head's cross-entropy, teacher-forced).
"""

from __future__ import annotations

from .checkpoint import save_drafter_as
from .config import TrainConfig
from .dataset import TrainingData, assemble, prefill_hidden, prepare_data, split_records
from .loop import TrainResult, train_drafter

__all__ = [
    "TrainConfig",
    "TrainResult",
    "TrainingData",
    "assemble",
    "prefill_hidden",
    "prepare_data",
    "save_drafter_as",
    "split_records",
    "train_drafter",
]
