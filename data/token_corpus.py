"""Rebuild `redrafter_mlx/assets/token_corpus.txt.gz`, the default text that ranks tokens for
`redrafter convert --head-tokens` (`token_ranking.py`).

It is the training split of a distillation file's answers (the shipped SmolLM2 drafter's:
`data/smollm2-135m-distill.jsonl.gz` in the checkout), decoded to text with the embedded
model's tokenizer, one answer per paragraph. The held-out split is left out, so coverage can
be measured on it (`token_coverage.py`).
    python -m data.token_corpus data/smollm2-135m-distill.jsonl.gz [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

from redrafter_mlx.formats.loading import EMBEDDED
from redrafter_mlx.formats.target_llm import read_llm_tokenizer
from redrafter_mlx.formats.token_ranking import DEFAULT_CORPUS
from redrafter_mlx.training import Evaluation, split_records
from redrafter_mlx.training.distill_file import read_distill_file


def write_corpus(distill_file: Path, out: Path) -> int:
    """Write the training answers of `distill_file` as gzipped text; returns how many."""
    train, _ = split_records(read_distill_file(distill_file), Evaluation.holdout_fraction)
    tokenizer = read_llm_tokenizer(EMBEDDED)
    texts = tokenizer.batch_decode([r.response_ids for r in train], skip_special_tokens=True)
    text = "\n\n".join(t.strip() for t in texts) + "\n"
    out.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))  # reproducible bytes
    return len(texts)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("distill", type=Path, help="distillation JSONL(.gz) of the LLM's answers")
    parser.add_argument("--out", type=Path, default=DEFAULT_CORPUS)
    args = parser.parse_args()
    print(f"{write_corpus(args.distill, args.out)} answers -> {args.out}")
