"""The KV cache of a stateful drafter (a draft LLM, EAGLE): staged text, then the beams.

The LLM's cache contract carries over: the tokens a step emitted are staged as a block of
fixed size L whose valid length `count` is still lazy (the host reads it with the LLM's
accepted tokens), and `commit` keeps them once it is known. Drafting then writes each
depth's W beam tokens after that block into a scratch that lives for one proposal; every
beam token attends to the committed text, the valid staged tokens and its own ancestors
(its lineage of scratch slots, which the beam search reorders with the beams).
"""

from __future__ import annotations

import mlx.core as mx

from ..models.cache import KVCache


class DraftCache:
    """A drafter's committed cache plus the block staged last (`stage_inputs`)."""

    def __init__(self, cache: KVCache):
        self.cache = cache
        self.staged = 0  # size of the staged block (slots after cache.length)
        self.count = mx.array(0, mx.int32)  # how many of them are valid (lazy)

    def stage_inputs(self, size: int, count: mx.array) -> tuple[mx.array, mx.array]:
        """Positions (1, size) and mask (1, 1, size, n + size) for a block of `size` tokens
        appended to the n committed ones, of which the first `count` will be kept."""
        self.staged, self.count = size, count.astype(mx.int32)
        n = self.cache.length
        positions = (n + mx.arange(size, dtype=mx.int32))[None]
        causal = mx.arange(size)[:, None] >= mx.arange(size)[None, :]
        mask = mx.concatenate([mx.ones((size, n), mx.bool_), causal], axis=1)
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

    def key_positions(self, positions: mx.array) -> mx.array:
        """(1, S) RoPE positions of every key the current depth's block sees (`write`)."""
        text = mx.arange(self.base.cache.length + self.base.staged, dtype=mx.int32)[None]
        return mx.concatenate([text, *self.slot_positions], axis=1)

    def key_extents(self, block: int) -> None:
        """One sequence: every key `write` returns is visible (`attention`'s extents)."""
        return None

    def write(self, layer: int, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Append a depth's beam tokens (1, n_kv, W, Dh); return every key/value visible."""
        end = self.base.cache.length + self.base.staged
        self.keys[layer].append(keys)
        self.values[layer].append(values)
        if layer == 0:
            self.slots += keys.shape[2]
        stored = (self.base.cache.keys[layer][..., :end, :], self.base.cache.values[layer][..., :end, :])
        return (
            mx.concatenate([stored[0], *self.keys[layer]], axis=2),
            mx.concatenate([stored[1], *self.values[layer]], axis=2),
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
                earlier,
                mx.eye(width, dtype=mx.bool_),
            ],
            axis=1,
        )
        positions = mx.broadcast_to(base.next_position - 1 + depth, (1, width)).astype(mx.int32)
        self.slot_positions.append(positions)
        lineage = mx.concatenate([lineage, own[None, :, None]], axis=2)
        return positions, mask[None, None], lineage
