"""`DecodingOptions`: how one answer is decoded, in one type with one set of defaults.

The Python API, every CLI command (`cli/options.py` turns these fields into flags), the
benchmarks and training's evaluation all take this type, so a default changes in one place.
The tree fields default to None, meaning "auto": the fastest tree `redrafter tune` measured
for the model, drafter and device (`tuning.plan_drafting`); an explicit value always wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx

from .errors import InputError
from .sampling import BiasedSampler, Sampler, make_greedy_or_sampler

SAMPLING_FIELDS = ("temp", "top_p", "top_k", "seed")
TREE_FIELDS = ("beam_width", "beam_length", "search_width", "node_budget", "lookup", "adaptive")


@dataclass(frozen=True)
class DecodingOptions:
    """Sampler settings, the candidate tree and the answer's length limit."""

    max_tokens: int = 256  # tokens to generate at most (the answer stops earlier at EOS)
    temp: float = 0.0  # 0: greedy, exactly plain decoding's output
    top_p: float = 0.0  # nucleus sampling (0: off)
    top_k: int = 0  # the sampler's top-k (0: off); the beam search has its own, `DraftPlan.draft_top_k`
    seed: int | None = None  # seeds MLX's generator before decoding, when given
    beam_width: int | None = None  # W: beams verified per step (None: auto)
    beam_length: int | None = None  # L: tokens per beam incl. the guaranteed one (None: auto)
    search_width: int | None = None  # S: beams the drafter's search keeps (None: auto)
    node_budget: int | None = None  # N: tokens verified at most, the likeliest prefixes (None: auto; 0: all)
    lookup: bool = True  # a copy of the text's earlier continuation may take the last beam
    adaptive: bool = True  # no beam_length: a `StepPolicy` picks each step's tree, or a plain step
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias) pairs added to the LLM's logits

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise InputError(f"max_tokens must be >= 1, got {self.max_tokens}")
        for name in ("temp", "top_p"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InputError(f"{name} must be a finite number >= 0, got {value}")
        if self.top_p > 1:
            raise InputError(f"top_p must be at most 1, got {self.top_p}")
        if self.top_k < 0:
            raise InputError(f"top_k must be >= 0, got {self.top_k}")
        for name in ("beam_width", "beam_length", "search_width"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"{name} must be >= 1, got {value}")
        if any(not math.isfinite(bias) for _, bias in self.logit_bias):
            raise InputError("logit_bias values must be finite numbers")
        if self.node_budget is not None and (self.node_budget < 0 or self.node_budget == 1):
            raise InputError(
                f"node budget must be 0 (none) or >= 2 (the guaranteed token and a draft), got {self.node_budget}"
            )

    def sampler(self, key: mx.array | None = None) -> Sampler:
        """Argmax at temp 0, else mlx-lm's top-p/top-k categorical sampler (drawing with
        `key` when given, else with MLX's global generator), over the biased logits when
        `logit_bias` is set."""
        sampler = make_greedy_or_sampler(self.temp, self.top_p, self.top_k, key)
        return BiasedSampler(sampler, dict(self.logit_bias)) if self.logit_bias else sampler
