"""Batched verify: tokens/s of B answers decoded together vs the same B answers one by one.

    python -m redrafter_mlx.profiling.batch_speed --sizes 1,2,4,8 -m 128

For each B, the first B held-out eval prompts are decoded (greedy, the drafter's tree with
the step policy off, so both sides verify the same trees) by one `BatchDecoder` (all
rows join at once) and by B separate batch-1 runs (`Pipeline.steps`); plain decoding is measured
the same way (no drafter: trees of one token). Both sides' tokens/s count every answer
token over the wall time including prefill. The answers must be identical, and are checked.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import mlx.core as mx

from redrafter_mlx.api import Pipeline, load
from redrafter_mlx.cli.bench import eval_texts
from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_prompt


def run_batch(
    pipeline: Pipeline, shape: TreeShape | None, prompts: list[list[int]], options: DecodingOptions
) -> tuple[list[list[int]], float, float]:
    """(answers, seconds, mean tokens/step) of one batch holding every prompt."""
    decoder = BatchDecoder(
        pipeline.loaded.model, pipeline.drafter, shape, lookup=options.lookup, eos_ids=pipeline.tokenizer.eos_token_ids
    )
    per_step: list[float] = []
    tic = time.perf_counter()
    answers = {handle: [] for handle in range(len(prompts))}
    for handle, ids in enumerate(prompts):
        decoder.add(handle, Request(ids, options))
    while decoder.busy:
        for update in decoder.step():
            answers[update.handle] += update.tokens
            if update.finish_reason:
                per_step.append(update.stats.tokens_per_step)
    seconds = time.perf_counter() - tic
    return [answers[h] for h in range(len(prompts))], seconds, sum(per_step) / max(len(per_step), 1)


def run_separately(
    pipeline: Pipeline, prompts: list[list[int]], options: DecodingOptions, shape: TreeShape | None
) -> tuple[list[list[int]], float]:
    tree = (
        {}
        if shape is None
        else dict(
            beam_width=shape.beam_width, beam_length=shape.beam_length, search_width=shape.search_width, adaptive=False
        )
    )
    options = replace(options, **tree)
    answers = []
    tic = time.perf_counter()
    for ids in prompts:
        answers.append([t for step in pipeline.steps(ids, options) for t in step.tokens])
    return answers, time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--drafter", default=None)
    parser.add_argument("--sizes", default="1,2,4,8")
    parser.add_argument("-m", "--max-tokens", type=int, default=128)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    pipeline = load(args.model, args.drafter)
    options = DecodingOptions(max_tokens=args.max_tokens)
    shape = pipeline.plan(options).shape if pipeline.drafter else None
    prompts = [encode_prompt(pipeline.tokenizer, t) for t in eval_texts(max(sizes))]
    run_batch(pipeline, shape, prompts[:2], replace(options, max_tokens=8))  # trace and warm up
    rows = []
    for kind, pipe, tree in (("redrafter", pipeline, shape), ("plain", pipeline.autoregressive(), None)):
        for size in sizes:
            batch_answers, batch_s, per_step = run_batch(pipe, tree, prompts[:size], options)
            alone_answers, alone_s = run_separately(pipe, prompts[:size], options, tree)
            tokens = sum(map(len, batch_answers))
            row = {
                "decoding": kind,
                "tree": str(tree) if tree else "-",
                "batch": size,
                "tokens": tokens,
                "batch_tok_s": tokens / batch_s,
                "separate_tok_s": sum(map(len, alone_answers)) / alone_s,
                "tokens_per_step": per_step,
                "identical": batch_answers == alone_answers,
            }
            row["speedup"] = row["batch_tok_s"] / row["separate_tok_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            mx.clear_cache()
    print(
        "\n| decoding | B | tokens/s batched | tokens/s one by one | batched / one by one | tokens/step | identical |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['decoding']} | {r['batch']} | {r['batch_tok_s']:.1f} | {r['separate_tok_s']:.1f} | "
            f"{r['speedup']:.2f}x | {r['tokens_per_step']:.2f} | {'yes' if r['identical'] else 'NO'} |"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
