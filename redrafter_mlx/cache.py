"""Preallocated KV cache with explicit commits, so a verified tree can be compacted.

The model writes a block of keys/values *after* the committed length and never moves that
length itself. The decoding loop then commits: a plain prefix of the block (prefill,
autoregressive steps) or, after `gather_pending`, a path through it (ReDrafter verification). The committed
length is a Python int that only ever changes from a value the loop already read from the
device, so the cache adds no host synchronisation of its own.
"""

from __future__ import annotations

import mlx.core as mx

CHUNK = 256


class KVCache:
    """Keys/values of every layer, each (B, n_kv_heads, capacity, head_dim).

    The dtype follows the first block written (the activations), never the weights, so a
    4-bit model gets a float cache.
    """

    def __init__(self, num_layers: int, chunk: int = CHUNK):
        self.keys: list[mx.array | None] = [None] * num_layers
        self.values: list[mx.array | None] = [None] * num_layers
        self.length = 0
        self.chunk = chunk

    @property
    def capacity(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def write(self, layer: int, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Store a pending block (B, n_kv, T, Dh) at `length`; return all keys/values up to it."""
        start, end = self.length, self.length + keys.shape[2]
        if end > (self.keys[layer].shape[2] if self.keys[layer] is not None else 0):
            self._grow(layer, keys, end)
        self.keys[layer][..., start:end, :] = keys
        self.values[layer][..., start:end, :] = values
        return self.keys[layer][..., :end, :], self.values[layer][..., :end, :]

    def _grow(self, layer: int, like: mx.array, needed: int) -> None:
        B, n_kv, _, head_dim = like.shape
        capacity = -(-needed // self.chunk) * self.chunk
        fresh = [mx.zeros((B, n_kv, capacity, head_dim), like.dtype) for _ in range(2)]
        old_k, old_v = self.keys[layer], self.values[layer]
        if old_k is not None:
            fresh[0][..., : self.length, :] = old_k[..., : self.length, :]
            fresh[1][..., : self.length, :] = old_v[..., : self.length, :]
        self.keys[layer], self.values[layer] = fresh

    def commit(self, n: int) -> None:
        """Keep the first n tokens of the pending block."""
        self.length += n

    def gather_pending(self, block_index: mx.array) -> None:
        """Reorder the pending block so its tokens `block_index` (n,) come first.

        Lazy and fixed-shape: the loop calls `commit` with the accepted count once it has
        read it, so compaction needs no host sync of its own.
        """
        start, end = self.length, self.length + block_index.shape[0]
        index = block_index + start
        for layer in range(len(self.keys)):
            self.keys[layer][..., start:end, :] = self.keys[layer][..., index, :]
            self.values[layer][..., start:end, :] = self.values[layer][..., index, :]

    def trim(self, length: int) -> None:
        """Forget everything after `length` (e.g. to rewind a chat turn)."""
        self.length = min(self.length, length)

    def state(self) -> list[mx.array]:
        """Arrays to evaluate together with a step's outputs."""
        return [a for a in self.keys + self.values if a is not None]
