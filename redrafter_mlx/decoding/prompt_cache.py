"""Keys and values of earlier token sequences, reused by a prompt that starts the same way.

A chat's second turn repeats the first turn and its answer; requests share a system
prompt. Re-running those tokens costs a full prefill (seconds for a long history on a CPU),
so the batch decoder keeps each finished row's committed keys/values here, keyed by the
exact token ids they hold, and a new prompt starts from the longest stored prefix of it.
The entries are bounded in bytes and evicted least recently used first. Reuse is exact in
the sense that matters: the stored keys/values are the LLM's own for those very tokens at
those very positions, so a hit continues the same computation a miss would redo.
"""

from __future__ import annotations

from collections import OrderedDict

import mlx.core as mx

from ..models.cache import KVCache

Layers = list[tuple[mx.array, mx.array]]  # per layer: keys, values (1, n_kv, T, Dh)


def common_prefix(a: tuple[int, ...], b: list[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


class PromptCache:
    """Stored (tokens -> per-layer keys/values) entries, at most `max_bytes` of them."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, ...], Layers] = OrderedDict()
        self.bytes = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self.entries)

    def insert(self, tokens: list[int], layers: Layers) -> None:
        """Keep `layers` (lazy slices are copied, so the batch's arrays are not pinned) for
        `tokens`; an entry that is a prefix of them is superseded and dropped."""
        key = tuple(tokens)
        size = sum(k.nbytes + v.nbytes for k, v in layers)
        if not key or size > self.max_bytes:
            return
        for old in [old for old in self.entries if old == key[: len(old)]]:
            self._drop(old)
        while self.entries and self.bytes + size > self.max_bytes:
            self._drop(next(iter(self.entries)))
        copies = [(mx.contiguous(k), mx.contiguous(v)) for k, v in layers]
        mx.eval(copies)
        self.entries[key] = copies
        self.bytes += size

    def _drop(self, key: tuple[int, ...]) -> None:
        layers = self.entries.pop(key)
        self.bytes -= sum(k.nbytes + v.nbytes for k, v in layers)

    def restore(self, prompt: list[int], num_layers: int) -> KVCache:
        """A cache holding the longest stored prefix of `prompt`, short of its last token
        (whose hidden state the caller needs), or an empty cache."""
        cache = KVCache(num_layers)
        best, found = 0, None
        for key in self.entries:
            n = min(common_prefix(key, prompt), len(prompt) - 1)
            if n > best:
                best, found = n, key
        if found is None:
            return cache
        self.hits += 1
        self.entries.move_to_end(found)
        for layer, (keys, values) in enumerate(self.entries[found]):
            cache.write(layer, keys[..., :best, :], values[..., :best, :])
        cache.commit(best)
        return cache
