"""Each prompt answered by a fresh `redrafter generate` process at the defaults and by a fresh
`redrafter generate --mode ar`, as a new user runs them: first use pays every trace and load.

    python -m redrafter_mlx.profiling.fresh_processes --prompts-file p.jsonl -m 128 --rounds 3

The two processes run one after the other, in alternating order from pair to pair (a
machine's drift falls on both). Per prompt, one JSON line: the median over `--rounds` pairs of
the ratio of their generation tokens/s (`generate --json`'s `generation_tps`) and of their
whole-process wall times, each pair's ratio, and whether the answers are identical; then the
mean and the lowest median. One pair per prompt is not enough on a shared machine: the same
two processes' ratio moves by 10% from one pair to the next.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

from redrafter_mlx.cli.generate import read_prompts
from redrafter_mlx.profiling.load_test import fast_blas_env, installed_redrafter


def answer(prompt: str, max_tokens: int, *flags: str) -> tuple[dict, float]:
    """`redrafter generate --json` in a process of its own: its record and wall seconds."""
    command = [installed_redrafter(), "generate", "-p", prompt, "--max-tokens", str(max_tokens), "--json", *flags]
    tic = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=fast_blas_env(), check=True)
    return json.loads(done.stdout.strip().splitlines()[-1]), time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts-file", required=True, help='JSON lines, each with a "prompt"')
    parser.add_argument("-m", "--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=1, help="pairs of processes per prompt (the median is reported)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    prompts = read_prompts(None, Path(args.prompts_file))
    ratios, pair = [], 0
    for i, prompt in enumerate(prompts):
        pairs = []
        for _ in range(args.rounds):
            runs = {}
            for mode in ("defaults", "ar") if pair % 2 == 0 else ("ar", "defaults"):
                runs[mode] = answer(prompt, args.max_tokens, *(["--mode", "ar"] if mode == "ar" else []))
            pairs.append((runs["defaults"], runs["ar"]))
            pair += 1
        each = [ours["generation_tps"] / plain["generation_tps"] for (ours, _), (plain, _) in pairs]
        ratios.append(statistics.median(each))
        row = {
            "prompt": i,
            "ratio": round(ratios[-1], 3),
            "wall_ratio": round(statistics.median(plain_s / ours_s for (_, ours_s), (_, plain_s) in pairs), 3),
            "ratios": [round(x, 3) for x in each],
            "tokens_per_step": round(statistics.median(ours["tokens_per_step"] for (ours, _), _ in pairs), 2),
            "identical": all(ours["tokens"] == plain["tokens"] for (ours, _), (plain, _) in pairs),
        }
        print(json.dumps(row), flush=True)
    print(json.dumps({"mean": round(statistics.mean(ratios), 3), "lowest": round(min(ratios), 3)}))


if __name__ == "__main__":
    main()
