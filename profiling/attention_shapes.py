"""How many distinct shapes multi-query attention meets while decoding, as a GPU would see them.

GPU attention backends compile a graph per exact (queries, keys, mask) shape: MLX's CUDA backend
builds a cuDNN graph for each and aborts after hundreds of misses. This forces the GPU's route
on any machine (`attention` then always calls MLX's kernel, and trees are padded as on a GPU)
and counts the shapes of the calls with more than one query and an array mask, per answer length.

    python -m redrafter_mlx.profiling.attention_shapes --lengths 40,240
"""

from __future__ import annotations

import argparse

import mlx.core as mx

from redrafter_mlx.decoding.loop import decode_steps
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.formats.loading import DEFAULT_MODEL, load
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.runtime import device

PROMPT = "Write a long story about a river that runs past a mountain village."


def count_shapes(model, drafter, prompt: list[int], lengths: list[int], plan=None) -> dict[int, tuple[int, list[int]]]:
    """For a greedy answer of each length: its distinct multi-query attention shapes, and the
    answer (the GPU's route must decode what the CPU's does)."""
    shapes: set = set()
    kernel, on_gpu = mx.fast.scaled_dot_product_attention, device.on_gpu

    def counting(q, k, v, *, scale, mask=None, **kwargs):
        if q.shape[2] > 1 and isinstance(mask, mx.array):
            shapes.add((q.shape, k.shape, mask.shape, mask.dtype))
        return kernel(q, k, v, scale=scale, mask=mask, **kwargs)

    counts = {}
    mx.fast.scaled_dot_product_attention, device.on_gpu = counting, lambda: True
    try:
        for n in lengths:
            shapes.clear()
            tokens = [t for step in decode_steps(model, prompt, drafter, plan, max_tokens=n) for t in step.tokens]
            counts[n] = (len(shapes), tokens)
    finally:
        mx.fast.scaled_dot_product_attention, device.on_gpu = kernel, on_gpu
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--lengths", default="40,240", help="answer lengths, comma-separated")
    parser.add_argument("--prompt", default=PROMPT)
    args = parser.parse_args()
    loaded = load(args.model, mx.float32)
    prompt = encode_prompt(loaded.tokenizer, args.prompt)
    lengths = [int(n) for n in args.lengths.split(",")]
    for n, (count, _) in count_shapes(loaded.model, load_drafter_for(loaded, None), prompt, lengths).items():
        print(f"{n:5d} tokens: {count} distinct attention shapes")


if __name__ == "__main__":
    main()
