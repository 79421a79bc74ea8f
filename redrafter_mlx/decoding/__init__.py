"""Decoding: the one-row loops (`loop.py`: plain and ReDrafter, as `Step` iterators) and
batched tree-verified decoding (`batch.py`)."""

from .loop import GenerationStats, Step, decode_steps, generate_ar, generate_redrafter

__all__ = ["GenerationStats", "Step", "decode_steps", "generate_ar", "generate_redrafter"]
