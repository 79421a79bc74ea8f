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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx import nn

from ..drafting.ngrams import NgramTable, build_ngram_table
from ..errors import InputError
from ..formats.token_ranking import rank_tokens
from ..runtime.progress import start_progress
from .distill import HiddenStore
from .distill_file import DistillRecord, read_distill_file
from .recipe import Recipe

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


def prefill_hidden(
    model: nn.Module,
    records: Sequence[DistillRecord],
    *,
    max_batch_tokens: int = 4096,
    on_batch: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Final-norm hidden states at every training position of each record, (R_i, hidden),
    by one causal forward per group of sequences (no gradient).

    Sequences are grouped by length and right-padded: under a causal mask padding on the
    right cannot change the states of real tokens.
    """
    order = sorted(range(len(records)), key=lambda i: len(records[i].prompt_ids) + len(records[i].response_ids))
    out: list[np.ndarray | None] = [None] * len(records)
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
        hidden = mx.stop_gradient(model(mx.array(tokens), None, None, "causal"))
        hidden_np = np.array(hidden.astype(mx.float32))
        for row, i in enumerate(group):
            p, n = len(records[i].prompt_ids), len(records[i].response_ids)
            out[i] = hidden_np[row, p - 1 : p - 1 + n]
        if on_batch is not None:
            on_batch(len(group))
        start = end
    return out  # type: ignore[return-value]


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


@dataclass
class TrainingData:
    """What `train_drafter` trains and scores on, from one distillation file."""

    train: tuple[np.ndarray, np.ndarray]  # (hidden (N, D), windows (N, T+1)) of the training records
    heldout: tuple[np.ndarray, np.ndarray]  # the same for the held-out records
    heldout_answers: list[tuple[np.ndarray, np.ndarray]]  # (response ids, hidden) per held-out record
    token_ids: np.ndarray | None  # the head's token subset (None: full vocabulary)
    ngrams: NgramTable | None  # the training answers' set phrases (`ngrams.py`); RNN drafters only
    coverage: float  # share of held-out targets inside the token subset
    train_records: int
    heldout_records: int


def prepare_data(
    model: nn.Module,
    distill_file: str | Path,
    hidden_dir: str | Path,
    recipe: Recipe,
    vocab_size: int,
    holdout_fraction: float,
    console: Any = None,
) -> TrainingData:
    """Read the distillation file, fill the hidden-state store for records that lack
    states, split, and where the recipe asks for them pick the head's token subset and
    tabulate the training answers' set phrases."""
    records = read_distill_file(distill_file)
    if not records:
        raise InputError(f"{distill_file}: no distillation records")
    hidden = stored_hidden(model, records, HiddenStore(hidden_dir), console)
    train_recs, held_recs = split_records(records, holdout_fraction)
    token_ids = None
    if recipe.head_subset:
        token_ids = select_token_subset(train_recs, recipe.head_subset, vocab_size)
    return TrainingData(
        train=assemble(train_recs, [hidden[r.id] for r in train_recs], recipe.depths),
        heldout=assemble(held_recs, [hidden[r.id] for r in held_recs], recipe.depths),
        heldout_answers=[(np.array(r.response_ids), hidden[r.id]) for r in held_recs],
        token_ids=token_ids,
        ngrams=build_ngram_table([r.response_ids for r in train_recs], vocab_size) if recipe.ngrams else None,
        coverage=subset_coverage(held_recs or train_recs, token_ids) if token_ids is not None else 1.0,
        train_records=len(train_recs),
        heldout_records=len(held_recs),
    )
