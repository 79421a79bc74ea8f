"""The training positions: distillation records -> (LLM hidden state, token window) pairs.

The LLM is frozen and only its hidden states are needed: distillation saves them as it
generates (`distill.HiddenStore`); records without them get one batched causal forward
here (`prefill_hidden`), stored too, so a grown distillation file is only extended.

Vocabulary trimming: `select_token_subset` picks the K most frequent *target* tokens of
the distillation data; targets outside it are ignored by the loss (the trimmed drafter can
never propose them) and the subset is stored in the drafter as `token_ids`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import mlx.core as mx
import numpy as np
from mlx import nn

from ..formats.token_ranking import rank_tokens
from ..runtime.progress import start_progress
from .distill import HiddenStore
from .distill_file import DistillRecord

PREFILL_CHUNK = 64  # records whose states are computed and stored together (a kill loses one chunk)


def is_holdout(record_id: str, fraction: float) -> bool:
    """Stable train/held-out split by a hash of the record id (unchanged as files grow)."""
    digest = hashlib.sha1(record_id.encode()).digest()
    return int.from_bytes(digest[:4], "little") / 2**32 < fraction


def split_records(records: Sequence[DistillRecord], fraction: float) -> tuple[list, list]:
    train, held = [], []
    for r in records:
        (held if is_holdout(r.id, fraction) else train).append(r)
    if not held and len(train) > 1 and fraction > 0:
        held.append(train.pop())
    return train, held


def windows(record: DistillRecord, predict: int) -> tuple[np.ndarray, np.ndarray]:
    """Training positions of one sequence.

    Returns (positions (n,), tokens (n, predict + 1)): for each position t with y_{t+1} in
    the response, row [y_{t+1}, ..., y_{t+predict+1}] (column 0 = guaranteed token, column
    j = target of depth j), -1 past the end of the sequence.
    """
    seq = np.asarray(record.prompt_ids + record.response_ids, dtype=np.int64)
    p, n = len(record.prompt_ids), len(seq)
    positions = np.arange(p - 1, n - 1)  # y_{t+1} = seq[t + 1] is a response token
    if p < 1 or len(positions) == 0:
        return np.zeros((0,), np.int64), np.zeros((0, predict + 1), np.int32)
    padded = np.concatenate([seq, np.full(predict + 1, -1)])
    idx = positions[:, None] + 1 + np.arange(predict + 1)[None]
    return positions, padded[idx].astype(np.int32)


def causal_rows(
    model: nn.Module, records: Sequence[DistillRecord], taps: tuple[int, ...] = (), max_batch_tokens: int = 4096
) -> Iterator[tuple[int, np.ndarray]]:
    """(record index, its outputs (n_i, hidden (+ taps))) of one causal forward over the record's
    prompt and answer, per group of sequences (no gradient), every record once.

    Sequences are grouped by length and right-padded: under a causal mask padding on the
    right cannot change the states of real tokens.
    """
    order = sorted(range(len(records)), key=lambda i: len(records[i].prompt_ids) + len(records[i].response_ids))
    start = 0
    while start < len(order):
        longest = 0
        end = start
        while end < len(order):
            r = records[order[end]]
            length = max(longest, len(r.prompt_ids) + len(r.response_ids))
            if end > start and length * (end - start + 1) > max_batch_tokens:
                break
            longest, end = length, end + 1
        group = order[start:end]
        tokens = np.zeros((len(group), longest), dtype=np.int32)
        for row, i in enumerate(group):
            seq = records[i].prompt_ids + records[i].response_ids
            tokens[row, : len(seq)] = seq
        out = np.array(mx.stop_gradient(model(mx.array(tokens), None, None, "causal", taps)).astype(mx.float32))
        for row, i in enumerate(group):
            yield i, out[row, : len(records[i].prompt_ids) + len(records[i].response_ids)]
        start = end


def prefill_hidden(
    model: nn.Module,
    records: Sequence[DistillRecord],
    *,
    max_batch_tokens: int = 4096,
    on_batch: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Final-norm hidden states at every training position of each record, (R_i, hidden)."""
    out: list[np.ndarray | None] = [None] * len(records)
    for i, rows in causal_rows(model, records, max_batch_tokens=max_batch_tokens):
        p, n = len(records[i].prompt_ids), len(records[i].response_ids)
        out[i] = rows[p - 1 : p - 1 + n]
        if on_batch is not None:
            on_batch(1)
    return out  # type: ignore[return-value]


def tapped_features(
    model: nn.Module, records: Sequence[DistillRecord], layers: tuple[int, ...], console: Any = None
) -> dict[str, np.ndarray]:
    """id -> the inputs of the LLM layers `layers` at every position of the record's prompt and
    answer, concatenated, (n, len(layers) hidden) float16 (half the memory; trained in float32)."""
    bar, task = start_progress(console, "LLM features", len(records))
    out = {}
    try:
        for i, rows in causal_rows(model, records, layers):
            out[records[i].id] = rows[:, rows.shape[1] // (1 + len(layers)) :].astype(np.float16)
            if bar is not None:
                bar.update(task, advance=1)
    finally:
        if bar is not None:
            bar.stop()
    return out


def assemble(
    records: Sequence[DistillRecord], hiddens: Sequence[np.ndarray], predict: int
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate per-record states and token windows: (N, hidden) float32, (N, T+1) int32."""
    if not records:
        return np.zeros((0, 0), np.float32), np.zeros((0, predict + 1), np.int32)
    hs = [np.asarray(h, np.float32) for h in hiddens]
    ws = [windows(r, predict)[1] for r in records]
    return np.concatenate(hs), np.concatenate(ws)


def batch_rows(seed: int, units: int, micro_batch: int, size: int) -> np.ndarray:
    """The training rows of micro-batch number `micro_batch` of a run: `size` of the `units`
    (positions, or answers), drawn without replacement within an epoch. The permutation depends
    only on (seed, epoch), so a resumed run continues the same stream."""
    epoch, slot = divmod(micro_batch * size, units)
    rows = np.random.default_rng([seed, epoch]).permutation(units)[slot : slot + size]
    if len(rows) < size:  # wrap into the next epoch
        following = np.random.default_rng([seed, epoch + 1]).permutation(units)
        rows = np.concatenate([rows, following[: size - len(rows)]])
    return rows


def later_states(hidden: np.ndarray, rows: np.ndarray, predict: int) -> np.ndarray:
    """(M, predict, D): h_{t+1..t+predict} of the positions `rows` of an `assemble`d array
    (clamped at its end; rows past their record's end are masked by the loss)."""
    later = np.minimum(rows[:, None] + np.arange(1, predict + 1), len(hidden) - 1)
    return hidden[later]


def select_token_subset(records: Sequence[DistillRecord], size: int, vocab_size: int) -> np.ndarray:
    """The `size` most frequent response tokens (targets), most frequent first (ties by id);
    padded with the lowest unused ids when the data has fewer distinct tokens."""
    counts = np.zeros(vocab_size, np.int64)
    for r in records:
        np.add.at(counts, np.asarray(r.response_ids, np.int64), 1)
    return rank_tokens(counts)[:size]


def subset_coverage(records: Sequence[DistillRecord], token_ids: np.ndarray) -> float:
    """Fraction of response tokens inside the subset."""
    allowed = np.zeros(int(max(token_ids.max(initial=0) + 1, 1)), bool)
    allowed[token_ids] = True
    total = hit = 0
    for r in records:
        ids = np.asarray(r.response_ids)
        total += len(ids)
        hit += int(allowed[ids[ids < len(allowed)]].sum())
    return hit / total if total else 0.0


def stored_hidden(
    model: nn.Module,
    records: Sequence[DistillRecord],
    store: HiddenStore,
    console: Any = None,
) -> dict[str, np.ndarray]:
    """id -> hidden states (R, hidden) of every record: read from `store`, and computed (and
    stored, a chunk at a time, so an interrupted run keeps its work) for records it lacks."""
    stored = store.load([r.id for r in records])
    missing = [r for r in records if r.id not in stored or len(stored[r.id]) != len(r.response_ids)]
    if not missing:
        return stored
    bar, task = start_progress(console, "LLM hidden states", len(missing))
    try:
        for k in range(0, len(missing), PREFILL_CHUNK):
            part = missing[k : k + PREFILL_CHUNK]
            states = prefill_hidden(model, part, on_batch=(lambda n: bar.update(task, advance=n)) if bar else None)
            store.add([r.id for r in part], states)
            stored |= dict(zip([r.id for r in part], states))
    finally:
        if bar is not None:
            bar.stop()
    return stored
