"""The draft phase of a step as one compiled function of fixed shape.

Drafting is many small ops (the beam search's L - 1 drafter steps, the choice of the W
beams to verify, the context lookup, the prefix tree's layout), so its cost on a CPU is
partly per-op dispatch. `mx.compile` traces the whole phase once per tree shape and then
replays it without Python. Shapes depend only on (W, S, L, the search's top-k) and the text
buffer's size, so a generation traces it once. Nothing here reads the device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from ..verify.tree_attention import TreeLayout, tree_layout
from . import beam_search as search  # a module: beam_search.py imports this package's seam
from .lookup import with_lookup_beam
from .seam import TreeDrafter


@dataclass(frozen=True)
class TreeShape:
    """The candidate tree a step verifies: W beams of L tokens (the guaranteed one included),
    chosen among the S beams the drafter's search keeps (S <= W: the paper's search). With a
    `node_budget` N, only the N likeliest prefixes of the W beams are verified (the
    guaranteed token counts as one; `beam_search.keep_likeliest`): a dynamic tree whose
    size, and so verify cost, is fixed while its shape follows the drafter's confidence."""

    beam_width: int
    beam_length: int
    search_width: int
    node_budget: int | None = None

    def __post_init__(self) -> None:
        if min(self.beam_width, self.beam_length, self.search_width) < 1:
            raise ValueError(
                f"beam width, beam length and search width must be >= 1, got "
                f"{self.beam_width}, {self.beam_length} and {self.search_width}"
            )
        if self.node_budget is not None and self.node_budget < 2:
            raise ValueError(f"a node budget must be >= 2 (the guaranteed token and a draft), got {self.node_budget}")

    @property
    def full_size(self) -> int:
        """Tokens in W beams of L at most, without a budget: the root and W * (L - 1) drafts."""
        return 1 + self.beam_width * (self.beam_length - 1)

    @property
    def budgeted(self) -> bool:
        """Whether the node budget cuts the tree (a budget of `full_size` or more does not)."""
        return self.node_budget is not None and self.node_budget < self.full_size

    @property
    def max_packed(self) -> int:
        """Most tokens the packed tree can hold: `full_size`, or the node budget where that is fewer."""
        return self.node_budget if self.budgeted else self.full_size

    def __str__(self) -> str:
        budget = "" if self.node_budget is None else f" N={self.node_budget}"
        return f"W={self.beam_width} L={self.beam_length} S={self.search_width}{budget}"


# Where the lookup's copy took the last beam, each of its drafts counts as this log-prob in a
# node budget (the drafter has no score for it). 0.5 beat 1 (the copy first: it crowds out the
# drafter's surest tokens), 0.7 and 0.3 on held-out prompts (docs/benchmarks.md, lookup).
LOOKUP_LOG_PROB = math.log(0.5)


def propose(
    drafter: TreeDrafter,
    embedding: Any,
    shape: TreeShape,
    hidden: mx.array,
    token: mx.array,
    text: mx.array | None = None,
    length: mx.array | None = None,
    draft_top_k: int = search.DRAFT_TOP_K,
) -> tuple[mx.array, mx.array]:
    """The beams (B, W, L) int32 a step verifies: the drafter's search after the LLM's
    state hidden (B, D) and guaranteed tokens (B,), the last beam replaced by the context
    lookup's copy where text (B, N), valid up to length (B,), has one (none: no lookup),
    and cut to the shape's node budget (positions outside it: `search.INVALID_TOKEN`);
    and copied (B,) bool: which rows' last beam is that copy."""
    context, first = hidden[:, None, :], token.reshape(-1, 1).astype(mx.int32)
    beams, history = search.search_beams(
        drafter, embedding, context, first, shape.beam_width, shape.beam_length, draft_top_k, shape.search_width
    )
    found = mx.zeros(beams.shape[:1], mx.bool_)
    if text is not None:
        beams, found = with_lookup_beam(beams, text, length, drafter.ngrams)
        copied = LOOKUP_LOG_PROB * mx.arange(shape.beam_length, dtype=mx.float32)
        history = mx.concatenate([history[:, :-1], mx.where(found[:, None], copied, history[:, -1])[:, None]], axis=1)
    if shape.budgeted:
        beams = search.keep_likeliest(beams, history, shape.node_budget)
    return beams, found


# (hidden (B, D), guaranteed tokens (B,), texts (B, N) int32, text lengths (B,) int32)
#   -> (beams (B, W, L), layout with a leading B axis)
BatchDraftFn = Callable[[mx.array, mx.array, mx.array, mx.array], tuple[mx.array, TreeLayout]]
# The same for one sequence: hidden (D,), token (), text (1, N), length (1,) -> beams (W, L), layout
DraftFn = BatchDraftFn


def stacked_layout(beams: mx.array, copied: mx.array) -> TreeLayout:
    """The layouts of B rows' beams (B, W, L), stacked."""
    rows = (tree_layout(beams[b], copied[b]) for b in range(beams.shape[0]))
    return TreeLayout.combine(lambda *fields: mx.stack(fields), *rows)


def plain_trees(tokens: mx.array) -> tuple[mx.array, TreeLayout]:
    """Each row's tree as its guaranteed token (B,) alone: a plain decoding step."""
    beams = tokens.reshape(-1, 1, 1).astype(mx.int32)
    return beams, stacked_layout(beams, mx.zeros(tokens.shape[:1], mx.bool_))


def make_batch_draft_fn(
    drafter: TreeDrafter | None,
    embedding: Any,
    shape: TreeShape,
    *,
    draft_top_k: int = search.DRAFT_TOP_K,
    lookup: bool = True,
) -> BatchDraftFn:
    """The draft phase of B sequences for one tree shape, compiled for a stateless drafter.

    The returned function maps the LLM's state after each row's guaranteed token (hidden
    (B, D), tokens (B,)) and each row's decoded text (a (B, N) buffer valid up to lengths
    (B,)) to the W beams to verify per row (B, W, L) int32 and their `TreeLayout`s. A
    stateless drafter's weights are captured as constants: build a new function after
    changing them. A stateful drafter's cache grows every step, which would retrace a
    compiled function each time, so its phase runs as a plain lazy graph. No drafter: every
    row's tree is its guaranteed token alone (plain decoding through the same verifier).
    `draft_top_k`: the beam search's top-k warp (`beam_search.beam_search`).
    """

    def draft(hidden: mx.array, token: mx.array, text: mx.array, length: mx.array):
        if drafter is None:
            beams, layout = plain_trees(token)
        else:
            looked_up = (text, length) if lookup else (None, None)
            beams, copied = propose(drafter, embedding, shape, hidden, token, *looked_up, draft_top_k)
            layout = stacked_layout(beams, copied)
        return beams, layout.unpack_index, layout.owner, layout.count, layout.copied

    phase = draft if drafter is not None and drafter.stateful else mx.compile(draft)

    def run(hidden: mx.array, token: mx.array, text: mx.array, length: mx.array) -> tuple[mx.array, TreeLayout]:
        beams, *layout = phase(hidden, token, text, length)
        return beams, TreeLayout(*layout)

    return run


def make_draft_fn(
    drafter: TreeDrafter,
    embedding: Any,
    shape: TreeShape,
    *,
    draft_top_k: int = search.DRAFT_TOP_K,
    lookup: bool = True,
) -> DraftFn:
    """`make_batch_draft_fn` for one sequence: (hidden (D,), token (), text (1, N), length
    (1,)) -> (beams (W, L) int32, their `TreeLayout`)."""
    batched = make_batch_draft_fn(drafter, embedding, shape, draft_top_k=draft_top_k, lookup=lookup)

    def run(hidden: mx.array, token: mx.array, text: mx.array, length: mx.array) -> tuple[mx.array, TreeLayout]:
        beams, layout = batched(hidden[None], token.reshape(1), text, length)
        return beams[0], TreeLayout.combine(lambda a: a[0], layout)

    return run
