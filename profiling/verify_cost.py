"""Cost of one verify pass as a function of the packed length P.

ReDrafter pays one forward over P packed tokens per step instead of one token per AR step,
so the ratio cost(P) / cost(1) decides how many tokens per step it needs to win. On a
memory-bound GPU it is close to 1 for small P; on a CPU it is not, and this measures it.
"""

from __future__ import annotations

import time

import mlx.core as mx

from redrafter_mlx.models.llm import prefill
from redrafter_mlx.sampling import greedy
from redrafter_mlx.verify.tree_attention import verify_mask


def verify_cost(model, sizes: list[int], context: int = 200, repeats: int = 6) -> dict[int, float]:
    """Seconds (minimum over `repeats`) of a greedy verify pass over P tokens on top of a
    `context`-token cache, for every P in `sizes`: forward with the tree mask and per-token
    positions, logits, argmax, exactly as `generate_redrafter` runs it. Nothing is committed,
    so every pass sees the same cache."""
    cache = model.make_cache()
    mx.eval(prefill(model, mx.arange(context, dtype=mx.uint32) % 1000 + 100, cache))
    times = {}
    for size in sizes:
        tokens = mx.arange(size, dtype=mx.int32)[None] + 200
        positions = mx.arange(size)[None] + cache.length
        mask = verify_mask(mx.tril(mx.ones((size, size), dtype=mx.bool_)), cache.length)
        samples = []
        for _ in range(repeats + 1):
            tic = time.perf_counter()
            mx.eval(greedy(model.logits(model(tokens, cache, positions, mask)[0])))
            samples.append(time.perf_counter() - tic)
        times[size] = min(samples[1:])  # the first pass warms up
    return times
