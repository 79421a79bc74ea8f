"""Steady-state batched decoding: tokens/s of B rows once all of them run, per step option,
against mlx-lm's `BatchGenerator` on the same weights and prompts.

    python -m redrafter_mlx.profiling.batch_steady -b 16 -m 96 --options plain,1x2x1,1x3x1,1x4x1,2x3x2

The first B held-out prompts join a `BatchDecoder` at once (greedy, no EOS, so every row
decodes `-m` tokens); the clock starts when every row has its first token and stops when
the first row ends, so prefill and the batch's ragged end are left out (each option first
runs a few steps, which trace its shapes). Each option is one fixed step kind for every
step: `plain` (no drafter) or a tree `WxLxS`: what the server's batch policy chooses from.
A server under load adds prefill and rows coming and going (`profiling.load_test`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mlx_lm import load as mlx_lm_load
from mlx_lm.generate import BatchGenerator

from redrafter_mlx.api import Pipeline, load
from redrafter_mlx.cli.bench import eval_texts
from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.profiling.bench import mlx_lm_folder, scratch_dir
from redrafter_mlx.prompting import encode_prompt


def ours(pipeline: Pipeline, prompts: list[list[int]], option: str, max_tokens: int) -> dict:
    shape = None if option == "plain" else TreeShape(*map(int, option.split("x")))
    decoder = BatchDecoder(pipeline.loaded.model, pipeline.drafter if shape else None, shape)
    for handle, ids in enumerate(prompts):
        decoder.add(handle, Request(ids, DecodingOptions(max_tokens=max_tokens)))
    list(decoder.admit())
    tokens = steps = 0
    tic = time.perf_counter()
    while len(decoder.rows) == len(prompts):
        tokens += sum(len(update.tokens) for update in decoder.verify())
        steps += 1
    seconds = time.perf_counter() - tic
    return {
        "decoder": "redrafter",
        "option": option,
        "tok_s": tokens / seconds,
        "ms_per_step": 1e3 * seconds / steps,
        "tokens_per_row_step": tokens / steps / len(prompts),
    }


def theirs(folder: Path, prompts: list[list[int]], max_tokens: int) -> dict:
    model, _ = mlx_lm_load(str(folder))
    generator = BatchGenerator(
        model, max_tokens=max_tokens, completion_batch_size=len(prompts), prefill_batch_size=len(prompts)
    )
    generator.insert(prompts, [max_tokens] * len(prompts))
    tokens = steps = 0
    tic = None
    while responses := generator.next_generated():
        if tic is None:  # every row's first token: prefill is over
            tic = time.perf_counter()
            continue
        if len(responses) < len(prompts):
            break
        tokens, steps = tokens + len(responses), steps + 1
    seconds = time.perf_counter() - tic
    return {
        "decoder": "mlx-lm BatchGenerator",
        "option": "plain",
        "tok_s": tokens / seconds,
        "ms_per_step": 1e3 * seconds / steps,
        "tokens_per_row_step": 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("-b", "--batch", type=int, default=16)
    parser.add_argument("-m", "--max-tokens", type=int, default=96)
    parser.add_argument("--options", default="plain,1x2x1,1x3x1,1x4x1,2x3x2")
    args = parser.parse_args()
    pipeline = load(args.model)
    prompts = [encode_prompt(pipeline.tokenizer, t) for t in eval_texts(args.batch)]
    for option in args.options.split(","):
        ours(pipeline, prompts, option, 6)  # traces this batch size's shapes
        print(json.dumps(ours(pipeline, prompts, option, args.max_tokens)), flush=True)
    with scratch_dir() as scratch:
        print(json.dumps(theirs(mlx_lm_folder(pipeline.loaded, Path(scratch)), prompts, args.max_tokens)), flush=True)


if __name__ == "__main__":
    main()
