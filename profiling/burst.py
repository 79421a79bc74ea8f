"""A server's traffic without the server: requests streamed through one `BatchDecoder` at a
fixed concurrency, with the step policy `redrafter serve` uses against plain batching, in one
process, and where each one's time went, by batch size.

    python -m redrafter_mlx.profiling.burst --requests 16 --concurrency 8,16 -m 128

The held-out prompts, chat-templated and greedy, as `profiling.load_test` sends them: up to
`--concurrency` requests decode at once and the next joins as one ends. Both sides run the same
requests (each first once to trace its shapes; the policy keeps its timings, as a running
server's does), and their answers must be identical. Per batch size B and step choice: the
steps, their mean time and the tokens a row got per step; a plain step's mean time at B beside
them, from the plain side's steps.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

from redrafter_mlx.api import Pipeline, load
from redrafter_mlx.cli.bench import eval_texts
from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.tuning import StepPolicy

Steps = list[tuple[int, str, float, int]]  # (rows, choice, ms, tokens) of each step


def stream(decoder: BatchDecoder, prompts: list[list[int]], concurrency: int, options: DecodingOptions):
    """Every prompt answered, at most `concurrency` at once: (answers, seconds, steps)."""
    waiting, running, answers, steps = list(range(len(prompts))), 0, defaultdict(list), []
    tic = time.perf_counter()
    while waiting or decoder.busy:
        while waiting and running < concurrency:
            handle = waiting.pop(0)
            decoder.add(handle, Request(prompts[handle], options))
            running += 1
        rows, choice, start, tokens = len(decoder.rows), str(decoder.choice), time.perf_counter(), 0
        for update in decoder.step():
            answers[update.handle] += update.tokens
            tokens += len(update.tokens)
            running -= update.finish_reason is not None
        steps.append((rows, choice, 1e3 * (time.perf_counter() - start), tokens))
    return dict(answers), time.perf_counter() - tic, steps


def by_batch_size(steps: Steps, plain: Steps) -> list[dict]:
    """Per (B, choice) of `steps`: count, mean ms, tokens per row per step, and plain's mean ms at B."""
    groups, plain_ms = defaultdict(list), defaultdict(list)
    for rows, choice, ms, tokens in steps:
        groups[rows, choice].append((ms, tokens))
    for rows, _, ms, _ in plain:
        plain_ms[rows].append(ms)
    return [
        {
            "rows": rows,
            "choice": choice,
            "steps": len(group),
            "ms": round(sum(ms for ms, _ in group) / len(group), 1),
            "tokens_per_row": round(sum(t for _, t in group) / len(group) / max(rows, 1), 2),
            "plain_ms": round(sum(plain_ms[rows]) / len(plain_ms[rows]), 1) if plain_ms[rows] else None,
        }
        for (rows, choice), group in sorted(groups.items())
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--concurrency", default="8,16")
    parser.add_argument("-m", "--max-tokens", type=int, default=128)
    parser.add_argument("--steps", action="store_true", help="print the table by batch size too")
    args = parser.parse_args()
    pipeline: Pipeline = load()
    plan = pipeline.plan(DecodingOptions())
    tokenizer = pipeline.tokenizer
    prompts = [encode_prompt(tokenizer, text, vicuna=pipeline.loaded.is_vicuna) for text in eval_texts(args.requests)]
    options = DecodingOptions(max_tokens=args.max_tokens)
    policy = StepPolicy(plan.shape, plan.calibration)
    model, eos = pipeline.loaded.model, tokenizer.eos_token_ids
    drafted = BatchDecoder(model, pipeline.drafter, plan.shape, eos_ids=eos, policy=policy)
    plain = BatchDecoder(model, None, eos_ids=eos)
    levels = [int(c) for c in args.concurrency.split(",")]
    for decoder in (drafted, plain):  # traces every shape the levels meet once
        stream(decoder, prompts, max(levels), options)
    for level in levels:
        ours, ours_s, ours_steps = stream(drafted, prompts, level, options)
        theirs, theirs_s, theirs_steps = stream(plain, prompts, level, options)
        speed = sum(map(len, ours.values())) / ours_s
        plain_speed = sum(map(len, theirs.values())) / theirs_s
        row = {
            "concurrency": level,
            "tokens_per_s": round(speed, 2),
            "plain_tokens_per_s": round(plain_speed, 2),
            "ratio": round(speed / plain_speed, 3),
            "identical": sum(ours[h] == theirs[h] for h in ours),
            "steps": len(ours_steps),
            "plain_steps": len(theirs_steps),
        }
        print(json.dumps(row), flush=True)
        for group in by_batch_size(ours_steps, theirs_steps) if args.steps else ():
            print("  " + json.dumps(group), flush=True)


if __name__ == "__main__":
    main()
