"""Decoding: the one-row loops (`loop.py`: plain and ReDrafter, as `Step` iterators, whose
types are in `steps.py`) and batched tree-verified decoding (`batch.py`)."""

from .loop import decode_steps, generate_ar, generate_redrafter
from .steps import GenerationStats, Step

__all__ = ["GenerationStats", "Step", "decode_steps", "generate_ar", "generate_redrafter"]
