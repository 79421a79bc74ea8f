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


def verify_cost(model, sizes: list[int], context: int = 200, growth: int = 256, repeats: int = 6) -> dict[int, float]:
    """Seconds of a greedy verify pass over P tokens, for every P in `sizes`, on a cache that
    grows as decoding grows it: the mean over contexts `context`, `context + growth / 2` and
    `context + growth` of the minimum over `repeats` passes (measured at one context, the
    loop's cost was under-priced). Forward with the tree mask and per-token positions,
    logits, argmax, exactly as `generate_redrafter` runs it; nothing is committed."""
    cache = model.make_cache()
    mx.eval(prefill(model, mx.arange(context + growth, dtype=mx.uint32) % 1000 + 100, cache))
    lengths = [context + growth, context + growth // 2, context]  # trimmed down to each in turn
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    for length in lengths:
        cache.trim(length)
        for size in sizes:
            tokens = mx.arange(size, dtype=mx.int32)[None] + 200
            positions = mx.arange(size)[None] + cache.length
            tree = mx.tril(mx.ones((size, size), dtype=mx.bool_))
            mask = cache.attention_mask(tree[None])
            times = []
            for _ in range(repeats + 1):
                tic = time.perf_counter()
                mx.eval(greedy(model.logits(model(tokens, cache, positions, mask)[0])))
                times.append(time.perf_counter() - tic)
            samples[size].append(min(times[1:]))  # the first pass warms up
    return {size: sum(times) / len(times) for size, times in samples.items()}
