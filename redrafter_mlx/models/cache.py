"""Preallocated KV cache with explicit commits, so a verified tree can be compacted.

The model writes a block of keys/values *after* the committed length and never moves that
length itself. The decoding loop then commits: a plain prefix of the block (prefill,
autoregressive steps) or, after `gather_pending`, a path through it (ReDrafter verification). The committed
length is a Python int that only ever changes from a value the loop already read from the
device, so the cache adds no host synchronisation of its own.

A block under an array mask (a verified tree, rows of a batch) attends over `span` key
columns: its end rounded up to whole chunks, the mask hiding the columns past it. So
multi-query attention meets one key length per chunk of context instead of a new one every
step: GPU attention backends cache a compiled graph per exact shape (MLX's CUDA backend
builds a cuDNN graph per shape and aborts after hundreds of misses).
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

    def span(self, block: int) -> int:
        """Key columns a block of `block` tokens under an array mask attends over (`write`)."""
        return -(-(self.length + block) // self.chunk) * self.chunk

    def write(
        self, layer: int, keys: mx.array, values: mx.array, columns: int | None = None
    ) -> tuple[mx.array, mx.array]:
        """Store a pending block (B, n_kv, T, Dh) at `length`; return the first `columns`
        keys/values (default: up to the block's end; more: `span`, the mask hides the rest)."""
        start, end = self.length, self.length + keys.shape[2]
        columns = columns or end
        if max(end, columns) > (self.keys[layer].shape[2] if self.keys[layer] is not None else 0):
            self._grow(layer, keys, max(end, columns))
        self.keys[layer][..., start:end, :] = keys
        self.values[layer][..., start:end, :] = values
        return self.keys[layer][..., :columns, :], self.values[layer][..., :columns, :]

    def _grow(self, layer: int, like: mx.array, needed: int) -> None:
        B, n_kv, _, head_dim = like.shape
        capacity = -(-needed // self.chunk) * self.chunk
        fresh = [mx.zeros((B, n_kv, capacity, head_dim), like.dtype) for _ in range(2)]
        old_k, old_v = self.keys[layer], self.values[layer]
        if old_k is not None:
            fresh[0][..., : self.length, :] = old_k[..., : self.length, :]
            fresh[1][..., : self.length, :] = old_v[..., : self.length, :]
        self.keys[layer], self.values[layer] = fresh

    def key_extents(self, block: int) -> list[int]:
        """The keys a block of `block` tokens sees (`attention`'s extents): the columns of a
        `span` past them are padding."""
        return [self.length + block]

    def offsets(self) -> mx.array:
        """(1,) int32: where the pending block starts (`BatchKVCache.offsets` for one row)."""
        return mx.array([self.length], mx.int32)

    def attention_mask(self, tree_mask: mx.array) -> mx.array:
        """(1, 1, P, S) for a pending block with tree mask (1, P, P): it sees every committed
        token and, after them, its ancestors; the `span`'s padding columns are hidden."""
        block = tree_mask.shape[-1]
        seen = mx.ones((1, block, self.length), mx.bool_)
        padding = mx.zeros((1, block, self.span(block) - self.length - block), mx.bool_)
        return mx.concatenate([seen, tree_mask, padding], axis=2)[:, None]

    def commit(self, n: int | list[int]) -> None:
        """Keep the first n tokens of the pending block ([n]: as `BatchKVCache.commit`)."""
        self.length += n if isinstance(n, int) else n[0]

    def gather_pending(self, block_index: mx.array) -> None:
        """Reorder the pending block so its tokens `block_index` (n,) or (1, n) come first
        (lazy; the loop then commits a prefix of them). Two ops per layer and array, so the
        loop calls it only when the accepted tokens are not already at the front."""
        block_index = block_index.reshape(-1)
        start, end = self.length, self.length + block_index.shape[0]
        index = block_index + start
        for layer in range(len(self.keys)):
            self.keys[layer][..., start:end, :] = self.keys[layer][..., index, :]
            self.values[layer][..., start:end, :] = self.values[layer][..., index, :]

    def key_positions(self, positions: mx.array, columns: int | None = None) -> mx.array:
        """(B, columns) RoPE positions of the keys `write` returns for a block at `positions`
        (B, T): the committed ones, the block's, then zeros for the padding (masked)."""
        B, T = positions.shape
        padding = (columns or self.length + T) - self.length - T
        committed = mx.broadcast_to(mx.arange(self.length, dtype=mx.int32), (B, self.length))
        return mx.concatenate([committed, positions.astype(mx.int32), mx.zeros((B, padding), mx.int32)], axis=1)

    def trim(self, length: int) -> None:
        """Forget everything after `length` (e.g. to rewind a chat turn)."""
        self.length = min(self.length, length)

    def state(self) -> list[mx.array]:
        """Arrays to evaluate together with a step's outputs."""
        return [a for a in self.keys + self.values if a is not None]


def _padded(a: mx.array, capacity: int) -> mx.array:
    """Keys or values (B, n_kv, T, Dh) with T extended by zeros to at least `capacity`."""
    B, n_kv, length, head_dim = a.shape
    if length >= capacity:
        return a
    return mx.concatenate([a, mx.zeros((B, n_kv, capacity - length, head_dim), a.dtype)], axis=2)


class BatchKVCache:
    """One KV cache for B sequences of different lengths, so B trees verify in one forward.

    Row b holds its committed tokens at [0, lengths[b]) and writes each pending block right
    after them; `attention_mask` hides the other rows' lengths and padding from it. Rows join
    (`append`, from a prefilled `KVCache`) and leave (`keep`) between steps, which copies the
    arrays once: continuous batching. Lengths are host ints, changed only from values the
    decoding loop already read, as in `KVCache`.
    """

    def __init__(self, num_layers: int, chunk: int = CHUNK):
        self.keys: list[mx.array | None] = [None] * num_layers
        self.values: list[mx.array | None] = [None] * num_layers
        self.lengths: list[int] = []
        self.chunk = chunk
        self._offsets = mx.zeros((0,), mx.int32)
        self._block_index: mx.array | None = None  # where this step's block goes, shared by every layer

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def capacity(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def offsets(self) -> mx.array:
        """(B,) int32 committed lengths, where each row's pending block starts."""
        return self._offsets

    def _set_lengths(self, lengths: list[int]) -> None:
        self.lengths = lengths
        self._offsets = mx.array(lengths, mx.int32)
        self._block_index = None

    def _resize(self, capacity: int) -> None:
        for store in (self.keys, self.values):
            for layer, a in enumerate(store):
                store[layer] = _padded(a, capacity)

    def span(self, block: int) -> int:
        """Key columns a pending block of `block` tokens attends over (`attention_mask`): the
        longest row's block end rounded up to whole chunks."""
        return -(-(max(self.lengths) + block) // self.chunk) * self.chunk

    def write(
        self, layer: int, keys: mx.array, values: mx.array, columns: int | None = None
    ) -> tuple[mx.array, mx.array]:
        """Store a pending block (B, n_kv, T, Dh) at every row's length; return the first
        `columns` keys and values (default: up to the longest row's block end; columns past a
        row's own end are masked)."""
        block = keys.shape[2]
        end = max(self.lengths) + block
        columns = columns or end
        capacity = -(-max(end, columns) // self.chunk) * self.chunk
        if self.keys[layer] is None:  # rows that hold nothing yet: prompts prefilled together
            shape = (*keys.shape[:2], capacity, keys.shape[3])
            self.keys[layer], self.values[layer] = mx.zeros(shape, keys.dtype), mx.zeros(shape, values.dtype)
        elif capacity > self.capacity:
            self._resize(capacity)
        if self._block_index is None or self._block_index.shape != keys.shape:
            self._block_index = mx.broadcast_to(
                (self._offsets[:, None] + mx.arange(block))[:, None, :, None], keys.shape
            )
        self.keys[layer] = mx.put_along_axis(self.keys[layer], self._block_index, keys, axis=2)
        self.values[layer] = mx.put_along_axis(self.values[layer], self._block_index, values, axis=2)
        return self.keys[layer][..., :columns, :], self.values[layer][..., :columns, :]

    def key_extents(self, block: int) -> list[int]:
        """Per row, the keys a pending block of `block` tokens sees: its own committed tokens
        and the block (the columns after it belong to longer rows)."""
        return [length + block for length in self.lengths]

    def attention_mask(self, tree_mask: mx.array) -> mx.array:
        """(B, 1, P, S) for a pending block with tree masks (B, P, P): each row sees its own
        committed tokens and, after them, its block's ancestors (S = `span`)."""
        block = tree_mask.shape[-1]
        columns = mx.arange(self.span(block), dtype=mx.int32)[None, None, :]
        relative = columns - self._offsets[:, None, None]  # (B, 1, S): column within the row's block
        inside = (relative >= 0) & (relative < block)
        rows = mx.broadcast_to(mx.clip(relative, 0, block - 1), (tree_mask.shape[0], block, columns.shape[-1]))
        in_tree = mx.take_along_axis(tree_mask, rows, axis=2) & inside
        return ((relative < 0) | in_tree)[:, None]

    def key_positions(self, positions: mx.array, columns: int | None = None) -> mx.array:
        """(B, S) RoPE positions of the keys `write` returns for a block at `positions` (B, T)
        (S: `columns`, default `span`): a row's committed tokens, then its block (columns past
        its end hold clipped values, masked by `attention_mask`)."""
        T = positions.shape[1]
        columns = mx.arange(columns or self.span(T), dtype=mx.int32)[None]
        relative = columns - self._offsets[:, None]
        block = mx.take_along_axis(positions.astype(mx.int32), mx.clip(relative, 0, T - 1), axis=1)
        return mx.where(relative < 0, columns, block)

    def gather_pending(self, block_index: mx.array) -> None:
        """Move each row's pending tokens block_index[b] (B, n) to the front of its block
        (lazy, fixed-shape; `commit` then keeps the accepted ones)."""
        start = self._offsets[:, None]
        B, n_kv, _, head_dim = self.keys[0].shape
        shape = (B, n_kv, block_index.shape[1], head_dim)
        source = mx.broadcast_to((start + block_index)[:, None, :, None], shape)
        target = mx.broadcast_to((start + mx.arange(block_index.shape[1]))[:, None, :, None], shape)
        for store in (self.keys, self.values):
            for layer, a in enumerate(store):
                store[layer] = mx.put_along_axis(a, target, mx.take_along_axis(a, source, axis=2), axis=2)

    def commit(self, counts: list[int]) -> None:
        """Keep the first counts[b] tokens of row b's pending block."""
        self._set_lengths([n + c for n, c in zip(self.lengths, counts)])

    def append(self, caches: list[KVCache]) -> None:
        """Add rows holding these caches' committed tokens (prefilled single sequences), in
        one copy of the batch: joining one at a time would copy it once a row."""
        if any(cache.keys[0] is None or cache.keys[0].shape[0] != 1 for cache in caches):
            raise ValueError("append takes prefilled caches of one sequence")
        capacity = max(self.capacity, *(cache.capacity for cache in caches))
        if self.rows:
            self._resize(capacity)
        for store, sources in ((self.keys, [c.keys for c in caches]), (self.values, [c.values for c in caches])):
            for layer in range(len(store)):
                rows = [_padded(source[layer], capacity) for source in sources]
                store[layer] = mx.concatenate([store[layer], *rows] if self.rows else rows)
        self._set_lengths(self.lengths + [cache.length for cache in caches])

    @classmethod
    def empty_rows(cls, num_layers: int, rows: int) -> BatchKVCache:
        """`rows` rows that hold no tokens yet."""
        cache = cls(num_layers)
        cache._set_lengths([0] * rows)
        return cache

    def row(self, b: int) -> KVCache:
        """Row b's committed tokens as a cache of one sequence (lazy slices, no copy yet)."""
        single = KVCache(len(self.keys), self.chunk)
        single.keys = [a[b : b + 1] for a in self.keys]
        single.values = [a[b : b + 1] for a in self.values]
        single.length = self.lengths[b]
        return single

    def committed(self, b: int) -> list[tuple[mx.array, mx.array]]:
        """Row b's committed keys and values (1, n_kv, length, Dh) per layer (lazy slices)."""
        n = self.lengths[b]
        return [(k[b : b + 1, :, :n, :], v[b : b + 1, :, :n, :]) for k, v in zip(self.keys, self.values)]

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows, in this order (the others' answers ended), and shrink the
        capacity to the chunks the longest of them needs: under continuous load it would
        otherwise ratchet up to the longest answer ever seen, times the batch."""
        if not rows:
            self.keys = [None] * len(self.keys)
            self.values = [None] * len(self.values)
            self._set_lengths([])
            return
        index = mx.array(rows, mx.int32)
        needed = max(self.chunk, -(-max(self.lengths[r] for r in rows) // self.chunk) * self.chunk)
        for store in (self.keys, self.values):
            for layer, a in enumerate(store):
                store[layer] = a[index, :, : min(needed, a.shape[2]), :]
        self._set_lengths([self.lengths[r] for r in rows])

    def state(self) -> list[mx.array]:
        return [a for a in self.keys + self.values if a is not None]
