"""The KV cache of a stateful drafter (a draft LLM, EAGLE): staged text, then the beams.

The LLM's cache contract carries over: the tokens a step emitted are staged as a block of
fixed size L whose valid length `count` is still lazy (the host reads it with the LLM's
accepted tokens), and `commit` keeps them once it is known. Drafting then writes each
depth's W beam tokens after that block into a scratch that lives for one proposal; every
beam token attends to the committed text, the valid staged tokens and its own ancestors
(its lineage of scratch slots, which the beam search reorders with the beams). The text's keys
are read up to the cache's `span`, and the beams' slots padded to whole `SLOT_BLOCK`s (the
mask hides both paddings), so that every depth's attention meets one key length per chunk of
text (`models.cache`).
"""

from __future__ import annotations

import mlx.core as mx

from ..models.cache import KVCache

SLOT_BLOCK = 64  # beam slots are read in blocks of this many (a tree's are fewer)


class DraftCache:
    """A drafter's committed cache plus the block staged last (`stage_inputs`)."""

    def __init__(self, cache: KVCache):
        self.cache = cache
        self.staged = 0  # size of the staged block (slots after cache.length)
        self.count = mx.array(0, mx.int32)  # how many of them are valid (lazy)

    def stage_inputs(self, size: int, count: mx.array) -> tuple[mx.array, mx.array]:
        """Positions (1, size) and mask (1, 1, size, span) for a block of `size` tokens
        appended to the n committed ones, of which the first `count` will be kept."""
        self.staged, self.count = size, count.astype(mx.int32)
        n, span = self.cache.length, self.cache.span(size)
        positions = (n + mx.arange(size, dtype=mx.int32))[None]
        causal = mx.arange(size)[:, None] >= mx.arange(size)[None, :]
        padding = mx.zeros((size, span - n - size), mx.bool_)
        mask = mx.concatenate([mx.ones((size, n), mx.bool_), causal, padding], axis=1)
        return positions, mask[None, None]

    def commit(self, count: int) -> None:
        self.cache.commit(count)
        self.staged = 0

    def tree(self) -> TreeScratch:
        return TreeScratch(self)

    @property
    def next_position(self) -> mx.array:
        """RoPE position of the first drafted token: right after the last valid staged one."""
        return self.cache.length + self.count


class TreeScratch:
    """The `cache` a model writes the beams' tokens into during one proposal."""

    def __init__(self, base: DraftCache):
        self.base = base
        layers = len(base.cache.keys)
        self.keys: list[list[mx.array]] = [[] for _ in range(layers)]
        self.values: list[list[mx.array]] = [[] for _ in range(layers)]
        self.slots = 0  # beam tokens written so far
        self.slot_positions: list[mx.array] = []  # (1, W) per depth, the current one included

    @property
    def length(self) -> int:
        return self.base.cache.length

    @property
    def text_span(self) -> int:
        """Key columns of the text (committed and staged, then padding) every depth reads."""
        return self.base.cache.span(self.base.staged)

    def _slot_padding(self, slots: int) -> int:
        return -(-slots // SLOT_BLOCK) * SLOT_BLOCK - slots

    def key_positions(self, positions: mx.array, columns: int | None = None) -> mx.array:
        """(1, S) RoPE positions of every key the current depth's block sees (`write`)."""
        text = mx.arange(self.text_span, dtype=mx.int32)[None]
        slots = sum(p.shape[1] for p in self.slot_positions)  # the current depth's included
        padding = mx.zeros((1, self._slot_padding(slots)), mx.int32)
        return mx.concatenate([text, *self.slot_positions, padding], axis=1)

    def key_extents(self, block: int) -> None:
        """The text's padding sits before the beams' keys: the mask hides it, not the extents."""
        return None

    def write(
        self, layer: int, keys: mx.array, values: mx.array, columns: int | None = None
    ) -> tuple[mx.array, mx.array]:
        """Append a depth's beam tokens (1, n_kv, W, Dh); return the text's keys/values up to
        `text_span` and every beam token's (`columns`, the mask's width, is their count)."""
        end = self.text_span
        self.keys[layer].append(keys)
        self.values[layer].append(values)
        if layer == 0:
            self.slots += keys.shape[2]
        B, n_kv, _, head_dim = keys.shape
        padding = mx.zeros((B, n_kv, self._slot_padding(self.slots), head_dim), keys.dtype)
        stored = (self.base.cache.keys[layer][..., :end, :], self.base.cache.values[layer][..., :end, :])
        return (
            mx.concatenate([stored[0], *self.keys[layer], padding], axis=2),
            mx.concatenate([stored[1], *self.values[layer], padding], axis=2),
        )

    def step_inputs(self, lineage: mx.array, depth: int) -> tuple[mx.array, mx.array, mx.array]:
        """For W beam tokens at `depth` >= 1 whose ancestors' slots are lineage (1, W, depth - 1):
        positions (1, W), mask (1, 1, W, visible) and their lineage with their own slots."""
        width = lineage.shape[1]
        base = self.base
        n, staged, written = base.cache.length, base.staged, self.slots
        own = written + mx.arange(width, dtype=mx.int32)
        earlier = (lineage[0][:, :, None] == mx.arange(written)[None, None, :]).any(axis=1)  # (W, written)
        mask = mx.concatenate(
            [
                mx.ones((width, n), mx.bool_),
                mx.broadcast_to(mx.arange(staged)[None, :] < base.count, (width, staged)),
                mx.zeros((width, self.text_span - n - staged), mx.bool_),
                earlier,
                mx.eye(width, dtype=mx.bool_),
                mx.zeros((width, self._slot_padding(written + width)), mx.bool_),
            ],
            axis=1,
        )
        positions = mx.broadcast_to(base.next_position - 1 + depth, (1, width)).astype(mx.int32)
        self.slot_positions.append(positions)
        lineage = mx.concatenate([lineage, own[None, :, None]], axis=2)
        return positions, mask[None, None], lineage
