"""What a training run is set to: the drafter's architecture, the objective, the optimisation
and the evals (saved with every checkpoint).

The defaults are the recipe of the shipped SmolLM2-135M drafter (its model card: tied head over
K = 16,384 tokens, exit width = the LLM's hidden size, 2 ResBlocks, T = 4, AdamW on 512
positions per step, lr 6e-4 after 50 warmup steps, cosine): the default model's default drafter
is what `redrafter train` with no options retrains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..drafter import DrafterConfig
from ..tuning import FALLBACK_SHAPE


@dataclass
class TrainConfig:
    """Drafter architecture + optimisation settings."""

    # architecture (DrafterConfig fields)
    exit_dim: int | None = None  # None: the LLM's hidden size; <= 0: 2 * hidden (the reference's)
    num_draft_layers: int = 2
    rnn: bool = True
    head_tied: bool = True
    token_subset_size: int | None = 16384  # None: full vocabulary
    # objective
    predict: int = 4  # T, tokens predicted per position (beam_length - 1 are used)
    soft_targets: float = 0.0  # weight of the CE against the LLM's distribution (0: Eq. 2 only)
    # optimisation
    lr: float = 6e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    batch_positions: int = 512  # positions per micro-batch
    grad_accum: int = 1
    steps: int | None = None  # optimizer steps; None: derived from epochs
    epochs: float = 4.0
    # evaluation / bookkeeping
    holdout_fraction: float = 0.03
    eval_every: int = 250
    checkpoint_every: int = 250
    log_every: int = 50  # progress lines ({"step", "loss", "seconds"}) passed to `log`
    eval_prompts: int = 4  # prompts decoded with generate_redrafter at each eval (0: none)
    eval_max_tokens: int = 64
    # the evals' tree: the one every command decodes with when a drafter has no calibration
    beam_width: int = FALLBACK_SHAPE.beam_width
    beam_length: int = FALLBACK_SHAPE.beam_length
    search_width: int = FALLBACK_SHAPE.search_width
    seed: int = 0
    save_dtype: str = "float16"  # dtype of the shipped weights (loaded back as float32)

    def drafter_config(self, llm_config: dict[str, Any]) -> DrafterConfig:
        """The architecture of a fresh drafter for the LLM whose config.json is `llm_config`."""
        hidden = llm_config["hidden_size"]
        return DrafterConfig(
            vocab_size=llm_config["vocab_size"], hidden_size=hidden, num_draft_layers=self.num_draft_layers,
            exit_dim=hidden if self.exit_dim is None else self.exit_dim, rnn=self.rnn, head_tied=self.head_tied,
            token_subset_size=self.token_subset_size,
        )
