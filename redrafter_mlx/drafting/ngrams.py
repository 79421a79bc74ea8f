"""The LLM's habitual continuations: a fallback draft for when the context lookup finds nothing.

The context lookup (`lookup.py`) copies what followed the text's last n-gram earlier in the
same conversation; when the guaranteed token never occurred before, it has nothing. A small
LLM answers in set phrases, though ("Here is a", "Let me know if you"), and its own distilled
answers record them: for every n-gram (n = 2..4) that occurs in those answers (4-grams: at
least twice), `build_ngram_table` keeps the continuation they most often took (the most
frequent next token, then the most frequent one after that among the answers that agreed,
and so on). A drafter folder may ship this table (`ngrams.safetensors`); decoding and
replay then use it where the context lookup fails (REST, He et al. 2023, retrieves drafts
from a datastore the same way). 1-grams were measured to gain nothing.

Keys are exact: an n-gram t_1..t_n is the integer sum (t_i + 1) * base^(n-i) with base =
vocab_size + 1, so n-grams of different n never collide; n stops where that would overflow
int64 (4 for vocabularies up to 55,000 tokens, 3 up to 2 million). The lookup is a binary
search over the sorted keys, lazy and fixed-shape like the rest of drafting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from ..errors import InputError

NGRAMS_FILE = "ngrams.safetensors"
MIN_NGRAM = 2
MAX_NGRAM = 4
# Occurrences an n-gram needs to be kept. The 4-grams seen once are half of all n-grams and
# gained 0.002 tokens/step (all singletons: +0.043 tokens/step over no table; none: +0.026).
MIN_COUNTS = {2: 1, 3: 1, 4: 2}
WIDTH = 4  # continuation tokens kept per n-gram: drafts for beams of the default length 5


def longest_ngram(vocab_size: int) -> int:
    """Largest n <= MAX_NGRAM whose keys fit in int64 (exact integer arithmetic)."""
    n = 1
    while n < MAX_NGRAM and (vocab_size + 1) ** (n + 1) < 2**63:
        n += 1
    return n


@dataclass(frozen=True)
class NgramTable:
    keys: mx.array  # (K,) int64, sorted, distinct
    drafts: mx.array  # (K, WIDTH) int32: the continuation after each key's n-gram
    vocab_size: int

    @property
    def base(self) -> int:
        return self.vocab_size + 1

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / NGRAMS_FILE
        meta = {"vocab_size": str(self.vocab_size)}
        small = mx.uint16 if self.vocab_size <= 2**16 else mx.int32  # the file's bulk: halve it when ids fit
        arrays = {"keys": self.keys, "drafts": self.drafts.astype(small)}
        mx.save_safetensors(str(path), arrays, metadata=meta)
        return path


def load_ngram_table(folder: str | Path) -> NgramTable | None:
    """The table stored in a drafter folder, or None when it has none."""
    path = Path(folder) / NGRAMS_FILE
    if not path.is_file():
        return None
    try:
        arrays, meta = mx.load(str(path), return_metadata=True)
        return NgramTable(arrays["keys"], arrays["drafts"].astype(mx.int32), int(meta["vocab_size"]))
    except (KeyError, ValueError, RuntimeError) as err:
        raise InputError(f"{path}: not an n-gram table ({type(err).__name__}: {err})") from None


def encode(windows: np.ndarray | mx.array, base: int) -> np.ndarray | mx.array:
    """(M, n) int64 token windows -> (M,) exact keys; the same formula for the numpy table
    build and the lazy MLX lookup, so the two cannot drift apart."""
    keys = windows[:, 0] + 1
    for i in range(1, windows.shape[1]):
        keys = keys * base + windows[:, i] + 1
    return keys


def build_ngram_table(
    answers: Sequence[Sequence[int]],
    vocab_size: int,
    *,
    min_counts: Mapping[int, int] = MIN_COUNTS,
    width: int = WIDTH,
) -> NgramTable:
    """For every n-gram (MIN_NGRAM <= n <= longest_ngram) occurring at least min_counts[n] times
    within `answers` and followed by a token, the greedy path through its continuations."""
    text = np.concatenate([np.append(np.asarray(a, np.int64), -1) for a in answers] or [np.zeros(0, np.int64)])
    keys, drafts = [np.zeros(0, np.int64)], [np.zeros((0, width), np.int64)]
    for n in range(MIN_NGRAM, longest_ngram(vocab_size) + 1):
        if text.size <= n:
            break
        windows = np.lib.stride_tricks.sliding_window_view(text, n)[:-1]  # each followed by a token
        ends = np.arange(n - 1, text.size - 1)
        valid = (windows >= 0).all(axis=1) & (text[ends + 1] >= 0)
        unique, key_of, counts = np.unique(
            encode(windows[valid], vocab_size + 1), return_inverse=True, return_counts=True
        )
        min_count = min_counts.get(n, 1)
        frequent = counts[key_of] >= min_count
        key_of, ends = key_of[frequent], ends[valid][frequent]
        follow = text[np.minimum(ends[:, None] + 1 + np.arange(width), text.size - 1)]
        follow = np.where(np.cumsum(follow < 0, axis=1) > 0, -1, follow)  # nothing past an answer's end
        keys.append(unique[counts >= min_count])
        drafts.append(_greedy_paths(np.unique(key_of, return_inverse=True)[1], follow))
    keys, drafts = np.concatenate(keys), np.concatenate(drafts)
    order = np.argsort(keys)
    return NgramTable(mx.array(keys[order]), mx.array(np.maximum(drafts[order], 0).astype(np.int32)), vocab_size)


def _greedy_paths(group: np.ndarray, follow: np.ndarray) -> np.ndarray:
    """group (M,) in 0..G-1, follow (M, width) tokens (-1: the answer had ended) -> (G, width):
    per group, the most frequent token at each depth among the rows that agreed so far and
    go on (ties: the lowest; -1 once none goes on). An ended answer is no vote: most were
    cut at the length limit, not finished."""
    groups, width = int(group.max(initial=-1)) + 1, follow.shape[1]
    paths = np.full((groups, width), -1, dtype=np.int64)
    alive = np.ones(len(group), dtype=bool)
    for depth in range(width):
        alive &= follow[:, depth] >= 0
        if not alive.any():
            break
        token = follow[alive, depth]
        radix = int(token.max()) + 1
        pairs, counts = np.unique(group[alive] * radix + token, return_counts=True)
        pair_group, pair_token = pairs // radix, pairs % radix
        best = np.lexsort((pair_token, -counts, pair_group))  # per group: highest count first
        first = best[np.r_[True, pair_group[best][1:] != pair_group[best][:-1]]]
        paths[pair_group[first], depth] = pair_token[first]
        alive &= follow[:, depth] == paths[group, depth]
    return paths


def ngram_draft(table: NgramTable, context: mx.array, length: mx.array, width: int) -> tuple[mx.array, mx.array]:
    """context (B, N) token buffer valid up to length (B,) -> (draft (B, width) int32, found (B,)
    bool): the stored continuation of the longest n-gram ending the text that the table holds.
    Drafts longer than WIDTH end in token 0."""
    batch = context.shape[0]
    if table.keys.shape[0] == 0:
        return mx.zeros((batch, width), dtype=mx.int32), mx.zeros((batch,), dtype=mx.bool_)
    last = longest_ngram(table.vocab_size)
    orders = range(MIN_NGRAM, last + 1)
    length = length.astype(mx.int32).reshape(batch, 1)
    tail = mx.take_along_axis(context, mx.maximum(length - last + mx.arange(last)[None], 0), axis=1)
    tail = tail.astype(mx.int64)
    # One key per order n, all searched at once: fewer, larger ops than one search per n.
    query = mx.stack([encode(tail[:, last - n :], table.base) for n in orders], axis=1)  # (B, orders)
    index = _search_sorted(table.keys, query)
    hit = (table.keys[index] == query) & (length >= mx.array(list(orders))[None])
    longest = (len(orders) - 1) - mx.argmax(hit[:, ::-1], axis=1)  # the last (longest) hit
    chosen = mx.take_along_axis(index, longest[:, None], axis=1)[:, 0]
    stored = table.drafts[chosen, : min(width, table.drafts.shape[1])]
    draft = mx.pad(stored, [(0, 0), (0, width - stored.shape[1])])
    found = hit.any(axis=1)
    return mx.where(found[:, None], draft, 0), found


def _search_sorted(keys: mx.array, query: mx.array) -> mx.array:
    """Index of the first key >= query (clamped to the last key), by a fixed-step binary search."""
    low = mx.zeros(query.shape, dtype=mx.int32)
    high = mx.full(query.shape, keys.shape[0] - 1, dtype=mx.int32)
    for _ in range(max(1, math.ceil(math.log2(keys.shape[0] + 1)))):
        middle = (low + high) // 2
        right = keys[middle] < query
        low = mx.where(right, middle + 1, low)
        high = mx.where(right, high, middle)
    return mx.minimum(low, keys.shape[0] - 1)
