"""Drafting: the seam every drafter kind implements (`seam.py`) and the compiled draft
phase of a step (`phase.py`)."""

from .phase import BatchDraftFn, DraftFn, TreeShape, make_batch_draft_fn, make_draft_fn, plain_trees
from .seam import StepFn, TreeDrafter, reorder

__all__ = [
    "BatchDraftFn",
    "DraftFn",
    "StepFn",
    "TreeDrafter",
    "TreeShape",
    "make_batch_draft_fn",
    "make_draft_fn",
    "plain_trees",
    "reorder",
]
