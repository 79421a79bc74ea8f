"""Why plain Llama folders keep their own forward: the embedded model's verify pass through
this project's compiled Llama and through mlx-lm's `llama` class behind the tree adapter.

    python -m redrafter_mlx.profiling.adapter_cost --sizes 1,8,16

Both hold the same weights; the passes alternate (ours, adapter, ours, ...) `--rounds` times
and each keeps its best, so drift on a busy machine hits both alike. Prints JSON: ms per
pass for each size and the adapter's cost relative to ours.
"""

from __future__ import annotations

import argparse
import json

from mlx.utils import tree_flatten
from mlx_lm.models import llama as mlx_lm_llama

from redrafter_mlx.formats.loading import load
from redrafter_mlx.models.adapter import TreeModel
from redrafter_mlx.profiling.verify_cost import verify_cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,8,16", help="packed lengths to time (comma-separated)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ours = load().model
    mlx_lm_model = mlx_lm_llama.Model(mlx_lm_llama.ModelArgs.from_dict(vars(ours.args)))
    mlx_lm_model.load_weights(tree_flatten(ours.parameters()))
    adapter = TreeModel(mlx_lm_model)
    best = {"ours": {}, "adapter": {}}
    for _ in range(args.rounds):
        for name, model in (("ours", ours), ("adapter", adapter)):
            for size, seconds in verify_cost(model, sizes).items():
                best[name][size] = min(best[name].get(size, seconds), seconds)
    report = {
        size: {
            "ours_ms": round(1000 * best["ours"][size], 1),
            "adapter_ms": round(1000 * best["adapter"][size], 1),
            "adapter_vs_ours": round(best["adapter"][size] / best["ours"][size], 3),
        }
        for size in sizes
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
