"""What a training run is set to: the drafter's recipe (its kind's architecture and objective,
`recipe.py`), the optimisation and the evals (saved with every checkpoint).

The defaults are the recipe of the shipped SmolLM2-135M drafter (its model card: tied head over
K = 16,384 tokens, exit width = the LLM's hidden size, 2 ResBlocks, T = 4, AdamW on 512
positions per step, lr 6e-4 after 50 warmup steps, cosine): the default model's default drafter
is what `redrafter train` with no options retrains.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..drafting import TreeShape
from ..tuning import FALLBACK_SHAPE
from .recipe import Recipe, recipe_type


@dataclass(frozen=True)
class Optimisation:
    """AdamW on micro-batches of sampled positions, a warmup then a cosine decay (`schedule.py`)."""

    lr: float = 6e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    batch_positions: int = 512  # positions per micro-batch
    grad_accum: int = 1
    steps: int | None = None  # optimizer steps; None: derived from epochs
    epochs: float = 4.0


@dataclass(frozen=True)
class Evaluation:
    """How often a run is scored, saved and logged, and on what."""

    holdout_fraction: float = 0.03
    eval_every: int = 250
    checkpoint_every: int = 250
    log_every: int = 50  # progress lines ({"step", "loss", "seconds"}) passed to `log`
    eval_prompts: int = 4  # prompts decoded with generate_redrafter at each eval (0: none)
    eval_max_tokens: int = 64
    # the evals' tree: the one every command decodes with when a drafter has no calibration
    tree: TreeShape = FALLBACK_SHAPE


def default_recipe() -> Recipe:
    """ReDrafter's RNN with the shipped drafter's settings."""
    return recipe_type("redrafter")()


@dataclass(frozen=True)
class TrainConfig:
    """One training run: which drafter (`recipe`), how it is optimised and how it is scored."""

    recipe: Recipe = field(default_factory=default_recipe)
    optimisation: Optimisation = Optimisation()
    evaluation: Evaluation = Evaluation()
    seed: int = 0
    save_dtype: str = "float16"  # dtype of the shipped weights (loaded back as float32)

    @property
    def kind(self) -> str:
        return self.recipe.kind

    def to_dict(self) -> dict[str, Any]:
        """What the run state and run.json record (the recipe's fields under its kind)."""
        return {"kind": self.kind} | asdict(self)
