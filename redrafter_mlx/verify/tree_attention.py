"""Dynamic tree attention (ReDrafter, Sec. 3.3 and Appendix A.1), tensor ops only.

Beam search returns W candidates of equal length L that share prefixes (every beam starts
with the guaranteed token). Verifying them flattened costs W * L tokens; here each distinct
prefix is verified once: the unique tokens are packed into one sequence, each attends to
its ancestors (the tree mask) at RoPE position `depth`, and `unpack_index` maps the packed
outputs back to (W, L). The packed length is data dependent; the decoding loop reads it in
the same host read as the accepted tokens and pads to a bucket size, so shapes stay few.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import mlx.core as mx

from ..runtime import device


def dedup_prefix(beams: mx.array) -> mx.array:
    """For every prefix beams[i, :k+1], the smallest beam index j sharing it.

    beams: (..., W, L) int (a leading batch axis: per row). Returns prefix_tree (..., W, L)
    int32. (The paper's Listing 1 compares tokens within one beam; the intended comparison,
    used here, is across beams.)
    """
    matches = beams[..., :, None, :] == beams[..., None, :, :]  # (..., W, W, L): beam i vs beam j at k
    shared = mx.cumprod(matches.astype(mx.int32), axis=-1)  # prefix [:k+1] equal
    return mx.argmax(shared, axis=-2).astype(mx.int32)  # first j; j = i always qualifies


@dataclass
class TreeLayout:
    """Where each beam token lives in the packed sequence (lazy arrays)."""

    unpack_index: mx.array  # (W, L) int32: packed position of beams[w, k]
    owner: mx.array  # (W, L) int32: the smallest beam holding prefix beams[w, :k+1]
    count: mx.array  # () int32: number of unique tokens (the packed length before padding)
    copied: mx.array  # () bool: the last beam is the context lookup's copy, not the drafter's

    @staticmethod
    def combine(fn: Callable[..., mx.array], *layouts: TreeLayout) -> TreeLayout:
        """Apply `fn` field by field across layouts: stack per-row layouts, take rows, join
        batches (a batch's layout has a leading B axis on every field)."""
        return TreeLayout(*(fn(*(getattr(t, f.name) for t in layouts)) for f in fields(TreeLayout)))


def stack_trees(trees: list[tuple[mx.array, TreeLayout]]) -> tuple[mx.array, TreeLayout]:
    """Rows' trees (each its (W, L) beams and layout) as one batch's: (B, W, L) beams and a
    layout with a leading B axis."""
    beams = mx.stack([beams for beams, _ in trees])
    return beams, TreeLayout.combine(lambda *fields: mx.stack(fields), *(layout for _, layout in trees))


def tree_layout(beams: mx.array, copied: mx.array | None = None) -> TreeLayout:
    """Number the unique prefixes in beam-major order. Tokens < 0 (outside a node budget,
    `beam_search.keep_likeliest`) are not numbered: their unpack index is 0, the root's.
    `copied`: whether the last beam is the context lookup's copy (default: no)."""
    width, length = beams.shape
    owner = dedup_prefix(beams)
    is_unique = ((owner == mx.arange(width, dtype=mx.int32)[:, None]) & (beams >= 0)).reshape(-1)
    position = mx.cumsum(is_unique.astype(mx.int32)) - 1  # packed slot of each unique token
    flat_owner = owner * length + mx.arange(length, dtype=mx.int32)[None, :]
    unpack_index = mx.where(beams >= 0, position[flat_owner], 0)
    copied = mx.array(False) if copied is None else copied
    return TreeLayout(unpack_index, owner, is_unique.astype(mx.int32).sum(), copied)


@dataclass
class PackedTree:
    tokens: mx.array  # (P,) int32 unique tokens, then padding
    depth: mx.array  # (P,) int32 distance from the guaranteed token (RoPE offset)
    mask: mx.array  # (P, P) bool: row attends to column (ancestors and itself)


def pack(beams: mx.array, layout: TreeLayout, size: int) -> PackedTree:
    """Scatter the unique tokens into `size` slots and build their ancestor mask.

    Duplicated beam tokens scatter identical values to the same slot; tokens outside a node
    budget (< 0) scatter to a slot past the end, which is dropped. Padding slots keep
    token 0 at depth 0 and attend to the root only, so no row of the mask is empty and
    no real token attends to padding.
    """
    width, length = beams.shape
    slots = mx.where(beams >= 0, layout.unpack_index, size).reshape(-1)
    depth_wl = mx.broadcast_to(mx.arange(length, dtype=mx.int32)[None], (width, length))
    tokens = mx.zeros((size + 1,), mx.int32)
    depth = mx.zeros((size + 1,), mx.int32)
    owner = mx.zeros((size + 1,), mx.int32)
    tokens[slots] = beams.reshape(-1).astype(mx.int32)
    depth[slots] = depth_wl.reshape(-1)
    owner[slots] = layout.owner.reshape(-1)
    tokens, depth, owner = tokens[:size], depth[:size], owner[:size]
    # Column b is an ancestor of row a iff it sits on a's beam at b's depth.
    on_path = layout.unpack_index[owner[:, None], depth[None, :]] == mx.arange(size)[None, :]
    mask = on_path & (depth[None, :] <= depth[:, None])
    return PackedTree(tokens, depth, mask)


def bucket(count: int, limit: int, step: int | None = None) -> int:
    """Padded packed length: the next multiple of `step`, at most `limit` (= 1 + W(L-1)).
    Default step: 4 on a CPU, where a verify pass costs more with every token; on a GPU the
    whole limit, one length per tree: there verifying a few more tokens costs little, and
    every length is another compiled attention graph."""
    step = step or (limit if device.on_gpu() else 4)
    return min(-(-count // step) * step, limit)
