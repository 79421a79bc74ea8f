"""Coverage of a trimmed drafter head: the fraction of an LLM's generated tokens that fall in
the K tokens it keeps (`token_ranking.py`), for the corpus ranking and for id order alone.

ANSWERS is `redrafter generate --json` output (its "tokens") or a distillation file (its
"response_ids"; --heldout keeps only its held-out split, the part the shipped corpus lacks):
    redrafter generate --prompts-file redrafter_mlx/assets/eval_prompts.jsonl --json -m 128 > answers.jsonl
    python -m redrafter_mlx.profiling.token_coverage answers.jsonl [-M smollm2-135m] [--corpus FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

from redrafter_mlx.formats.target_llm import head_tokens_for, read_llm_config
from redrafter_mlx.formats.token_ranking import DEFAULT_CORPUS
from redrafter_mlx.training import Evaluation
from redrafter_mlx.training.dataset import is_holdout

SIZES = (4096, 8192, 16384)


def generated_tokens(path: Path, heldout_only: bool) -> np.ndarray:
    """Every generated token id of every record in a JSONL(.gz) file, concatenated."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    if heldout_only:
        records = [r for r in records if is_holdout(r["id"], Evaluation.holdout_fraction)]
    return np.array([t for r in records for t in r.get("tokens", r.get("response_ids", []))], np.int64)


def coverage(tokens: np.ndarray, kept: np.ndarray) -> float:
    """Fraction of `tokens` (N,) whose id is in `kept` (K,)."""
    return float(np.isin(tokens, kept).mean())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("answers", type=Path)
    parser.add_argument("-M", "--model", default="smollm2-135m")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--heldout", action="store_true", help="only the held-out split of a distillation file")
    args = parser.parse_args()
    tokens = generated_tokens(args.answers, args.heldout)
    llm = read_llm_config(args.model)
    ranked = head_tokens_for(args.model, llm, llm["vocab_size"], args.corpus)
    print(f"{tokens.size:,} generated tokens; coverage of the top K:")
    print("K".rjust(6), "corpus ranking".rjust(15), "id order".rjust(9))
    for k in SIZES:
        print(f"{k:6d} {coverage(tokens, ranked[:k]):15.2%} {coverage(tokens, np.arange(k)):9.2%}")
