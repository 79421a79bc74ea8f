"""Write a random drafter of the reference shape, for the step-overhead benchmark.

Reference shape: what `redrafter convert` gives for a vicuna-style checkpoint of Apple's
ml-recurrent-drafter: exit dim 2 x hidden, 2 ResBlocks, the RNN state update and an untied
head over the LLM's whole vocabulary (for SmolLM2-135M: 1152 wide, 49,152 x 1,152 head).
Random weights accept nothing, so each ReDrafter step emits one token and `redrafter bench`
measures the step's overhead alone. Trim its head as a user would:
    python -m redrafter_mlx.profiling.reference_drafter OUT [--model smollm2-135m] [--seed 0]
    redrafter convert OUT OUT-8k -M smollm2-135m --head-tokens 8192
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mlx.core as mx

from redrafter_mlx.convert import read_llm_config
from redrafter_mlx.drafter import Drafter, DrafterConfig, save_drafter


def reference_drafter(vocab_size: int, hidden_size: int, seed: int = 0) -> Drafter:
    """Reference-shaped drafter with the default (torch.nn.Linear-like) random init."""
    mx.random.seed(seed)
    drafter = Drafter(DrafterConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_draft_layers=2, rnn=True))
    mx.eval(drafter.parameters())
    return drafter


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="drafter folder to write (must not hold files)")
    parser.add_argument("--model", default="smollm2-135m", help="LLM whose vocab and hidden size to match")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        parser.error(f"{args.out} exists and is not an empty folder: nothing was written")
    llm = read_llm_config(args.model)
    print(save_drafter(reference_drafter(llm["vocab_size"], llm["hidden_size"], args.seed), args.out))
