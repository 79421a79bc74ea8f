"""Each prompt answered by a fresh `redrafter generate` process at the defaults and by a fresh
`redrafter generate --mode ar`, as a new user runs them: first use pays every trace and load.

    python -m redrafter_mlx.profiling.fresh_processes --prompts-file p.jsonl -m 128

The two processes run one after the other, in alternating order from prompt to prompt (a
machine's drift falls on both). Per prompt, one JSON line: the ratio of their generation
tokens/s (`generate --json`'s `generation_tps`) and of their whole-process wall times, and
whether the answers are identical; then the mean and the lowest ratio.
"""

from __future__ import annotations

import argparse
import json
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
    args = parser.parse_args()
    prompts = read_prompts(None, Path(args.prompts_file))
    ratios = []
    for i, prompt in enumerate(prompts):
        runs = {}
        for mode in ("defaults", "ar") if i % 2 == 0 else ("ar", "defaults"):
            runs[mode] = answer(prompt, args.max_tokens, *(["--mode", "ar"] if mode == "ar" else []))
        (ours, ours_s), (plain, plain_s) = runs["defaults"], runs["ar"]
        ratios.append(ours["generation_tps"] / plain["generation_tps"])
        row = {
            "prompt": i,
            "ratio": round(ratios[-1], 3),
            "wall_ratio": round(plain_s / ours_s, 3),
            "tokens_per_s": round(ours["generation_tps"], 2),
            "ar_tokens_per_s": round(plain["generation_tps"], 2),
            "tokens_per_step": round(ours["tokens_per_step"], 2),
            "identical": ours["tokens"] == plain["tokens"],
        }
        print(json.dumps(row), flush=True)
    print(json.dumps({"mean": round(sum(ratios) / len(ratios), 3), "lowest": round(min(ratios), 3)}))


if __name__ == "__main__":
    main()
