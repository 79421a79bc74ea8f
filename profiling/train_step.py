"""Time one drafter training step, hard labels and soft targets, on random data.

The shipped drafter's training shape: 512 positions, tied head over K = 16384 tokens,
exit 576, 2 ResBlocks, 4 depths, the loss on `runtime.parallel_streams()` with the BLAS
threads split between them, as `train_drafter` runs it. Run:
    python -m redrafter_mlx.profiling.train_step [--model smollm2-135m]
"""

from __future__ import annotations

import argparse
import time

import mlx.core as mx
import numpy as np
from mlx import nn

from redrafter_mlx.formats.loading import load
from redrafter_mlx.training import TrainConfig
from redrafter_mlx.training.loss import drafter_loss, head_index_map, loss_blas_threads, teacher_head
from redrafter_mlx.training.start import make_drafter


def step_ms(model: str, repeats: int = 5) -> dict[str, float]:
    """Minimum wall time (ms) of one forward + backward, for soft weight 0 and 1."""
    llm = load(model, mx.float32)
    cfg = TrainConfig()  # the shipped drafter's recipe
    recipe, positions, predict = cfg.recipe, cfg.optimisation.batch_positions, cfg.recipe.depths
    ids = np.arange(recipe.head_subset, dtype=np.int32)
    drafter = make_drafter(recipe, llm.config, ids)
    dim = llm.config["hidden_size"]
    index_map, rows = head_index_map(drafter), teacher_head(llm.model, dim, ids)
    hidden, later = mx.random.normal((positions, dim)), mx.random.normal((positions, predict, dim))
    tokens = mx.random.randint(0, recipe.head_subset, (positions, predict + 1))
    out = {}
    for soft in (0.0, 1.0):
        step = nn.value_and_grad(
            drafter,
            lambda d: drafter_loss(d, llm.model.embedding, hidden, tokens, index_map, predict, soft, (later, rows))[0],
        )
        with loss_blas_threads(predict):
            mx.eval(step(drafter))
            times = []
            for _ in range(repeats):
                tic = time.perf_counter()
                mx.eval(step(drafter))
                times.append(time.perf_counter() - tic)
        out[f"soft={soft:g}"] = 1000 * min(times)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    for name, ms in step_ms(parser.parse_args().model).items():
        print(f"{name}: {ms:.0f} ms per step (minimum of 5)")
