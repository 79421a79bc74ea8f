"""Not a test module: `test_distributed` runs it under `mlx.launch -n 2`. The tiny model, split
across the ranks (by tensors, or by layers), samples answers with ReDrafter at temperature 1;
every rank writes what it drew (they must agree: each rank reads its own copy of every step's
acceptance)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm.sample_utils import make_sampler

from redrafter_mlx.decoding.loop import generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.models.sharding import pipeline_llm, shard_llm
from redrafter_mlx.runtime import distributed
from redrafter_mlx.tuning import DraftPlan
from tests.helpers import SEQ_LEN, TINY, TINY_PROMPT, TINY_VOCAB, random_drafter, sample_counts


def main(out: Path, n: int, split: str) -> None:
    all_reduces = (pipeline_llm if split == "pipeline" else shard_llm)(TINY, distributed.world())
    drafter = random_drafter(TINY_VOCAB, 32, seed=5)
    mx.random.seed(1234)  # every rank draws the same numbers, as `distributed.shared_seed` makes the CLI's
    counts, accepted = sample_counts(
        lambda: generate_redrafter(
            TINY,
            drafter,
            TINY_PROMPT,
            DraftPlan(TreeShape(2, 3, 2)),
            max_tokens=SEQ_LEN,
            sampler=make_sampler(temp=1.0),
        ),
        n,
    )
    record = {
        "all_reduces": all_reduces,
        "accepted": accepted,
        "counts": sorted([list(k), v] for k, v in counts.items()),
    }
    (out / f"rank{distributed.rank()}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
