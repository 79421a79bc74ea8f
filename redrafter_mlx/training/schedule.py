"""The learning rate over a run: linear warmup, then a cosine decay (mlx-lm's `build_schedule`)."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.optimizers as optim
from mlx_lm.tuner.utils import build_schedule

from .config import Optimisation

WARMUP_START = 0.01  # the warmup starts at this fraction of the peak rate


def learning_rate_schedule(cfg: Optimisation, total_steps: int) -> Callable[[mx.array], mx.array]:
    """The rate at optimizer steps 0 .. total_steps - 1: from lr * WARMUP_START up to lr over
    `cfg.warmup_steps` steps (at most a fifth of the run), then a cosine down to
    lr * min_lr_ratio at the last step."""
    warmup = min(cfg.warmup_steps, total_steps // 5)
    first_cosine_step = warmup + 1 if warmup else 0  # build_schedule holds the peak one step more
    decay_steps = max(1, total_steps - 1 - first_cosine_step)
    return build_schedule(
        {
            "name": "cosine_decay",
            "arguments": [cfg.lr, decay_steps, cfg.lr * cfg.min_lr_ratio],
            "warmup": warmup,
            "warmup_init": cfg.lr * WARMUP_START,
        }
    )


def make_optimizer(cfg: Optimisation, total_steps: int) -> optim.Optimizer:
    return optim.AdamW(learning_rate=learning_rate_schedule(cfg, total_steps), weight_decay=cfg.weight_decay)
