"""Drafting: the seam every drafter kind implements (`seam.py`) and the compiled draft
phase of a step (`phase.py`)."""

from .phase import DraftFn, TreeShape, make_draft_fn
from .seam import StepFn, TreeDrafter, reorder

__all__ = ["DraftFn", "StepFn", "TreeDrafter", "TreeShape", "make_draft_fn", "reorder"]
