"""What a step may run (a plain step, or a tree of the served family or a single beam at each
length) and what its time is linear in, for the step policy's cost model."""

from __future__ import annotations

import numpy as np

from ..drafting import TreeShape

Choice = TreeShape | None  # a step's tree; None: a plain step


def features(rows: int, choice: Choice) -> np.ndarray:
    """What a step's time is linear in: 1, B, B x P (the largest packed tree), B x S x L."""
    packed, cells = (1, 0) if choice is None else (choice.max_packed, choice.search_width * choice.beam_length)
    return np.array([1.0, rows, rows * packed, rows * cells])


def step_choices(start: TreeShape, deepest: int | None = None) -> list[Choice]:
    """What a step may run: a plain step, `start`'s family (its width, search and budget) at
    every length from 2 to `deepest` (default: `start`'s), and a single beam of each length."""
    deepest = deepest or start.beam_length
    trees = {
        start,
        *(TreeShape(start.beam_width, n, start.search_width, start.node_budget) for n in range(2, deepest + 1)),
    }
    chains = {TreeShape(1, n, 1) for n in range(2, deepest + 1)}
    return [None, *sorted(trees | chains, key=lambda s: (s.beam_width, s.beam_length))]


def family(tree: TreeShape) -> tuple[int, int, int | None]:
    """What the trees of one family share: all but their length."""
    return tree.beam_width, tree.search_width, tree.node_budget
