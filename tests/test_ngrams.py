"""The n-gram table (the LLM's set phrases): building, the lazy lookup against a plain-Python
reference, the lookup beam's fallback, and the drafter folder round trip."""

from __future__ import annotations

from collections import Counter

import mlx.core as mx
import numpy as np
import pytest

from redrafter_mlx.drafting.kinds.rnn import DrafterConfig, RecurrentDrafter
from redrafter_mlx.drafting.kinds.rnn import load as load_drafter
from redrafter_mlx.drafting.kinds.rnn import save as save_drafter
from redrafter_mlx.drafting.lookup import with_lookup_beam
from redrafter_mlx.drafting.ngrams import (
    MAX_NGRAM,
    MIN_COUNTS,
    MIN_NGRAM,
    NGRAMS_FILE,
    build_ngram_table,
    longest_ngram,
    ngram_draft,
)
from redrafter_mlx.errors import DrafterLoadError


def reference_table(answers: list[list[int]], width: int) -> dict[tuple[int, ...], list[int]]:
    """Every n-gram inside one answer and followed by a token there, seen >= MIN_COUNTS[n] times
    -> at each depth the most frequent next token among the occurrences that agreed so far
    (ties: the lowest; 0 once the occurrences ran out)."""
    occurrences: dict[tuple[int, ...], list[list[int]]] = {}
    for answer in answers:
        for n in range(MIN_NGRAM, MAX_NGRAM + 1):
            for end in range(n - 1, len(answer) - 1):
                occurrences.setdefault(tuple(answer[end - n + 1 : end + 1]), []).append(answer[end + 1 :])
    table = {}
    for gram, follows in occurrences.items():
        if len(follows) < MIN_COUNTS[len(gram)]:
            continue
        path = []
        for depth in range(width):
            counts = Counter(f[depth] for f in follows if len(f) > depth)
            if not counts:
                path += [0] * (width - depth)
                break
            token = min(counts, key=lambda t: (-counts[t], t))
            path.append(token)
            follows = [f for f in follows if len(f) > depth and f[depth] == token]
        table[gram] = path
    return table


def test_hand_example():
    table = build_ngram_table([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 5], [7, 2, 3, 9]], vocab_size=10, width=3)
    assert MIN_COUNTS[2] == MIN_COUNTS[3] == 1
    context = mx.array([[9, 9, 1, 2, 0, 0], [6, 6, 6, 2, 3, 0], [5, 5, 5, 5, 5, 5], [8, 1, 2, 3, 0, 0]])
    draft, found = ngram_draft(table, context, mx.array([4, 5, 6, 4]), 3)
    # "1 2" was followed by 3 4 twice and by 5 once; "2 3" by 4 twice, by 9 once, and then the
    # answers end; "5 5" never occurred; "1 2 3" (longest) by 4, and nothing after it.
    assert found.tolist() == [True, True, False, True]
    assert draft.tolist() == [[3, 4, 0], [4, 0, 0], [0, 0, 0], [4, 0, 0]]


def test_a_single_4_gram_is_not_kept_and_answers_do_not_run_into_each_other():
    table = build_ngram_table([[1, 2, 3, 4, 5], [4, 5], [4, 5]], vocab_size=10)
    draft, found = ngram_draft(table, mx.array([[1, 2, 3, 4], [4, 5, 0, 0], [9, 2, 3, 4]]), mx.array([4, 2, 4]), 2)
    # "1 2 3 4" was seen once, so "2 3 4" (also seen once) answers; "4 5" was never followed.
    assert found.tolist() == [True, False, True] and draft.tolist() == [[5, 0], [0, 0], [5, 0]]
    assert MIN_COUNTS[4] == 2 and MIN_COUNTS[3] == 1


@pytest.mark.parametrize("seed", range(3))
def test_lookup_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(3, 7))  # few symbols: many repeated n-grams
    answers = [rng.integers(0, vocab, size=int(rng.integers(1, 30))).tolist() for _ in range(12)]
    width = 5
    table = build_ngram_table(answers, vocab_size=vocab, width=width)
    expected_table = reference_table(answers, width=width)
    texts = rng.integers(0, vocab, size=(40, 12))
    lengths = rng.integers(1, 13, size=40)
    draft, found = ngram_draft(table, mx.array(texts), mx.array(lengths), width)
    for row, length in enumerate(lengths):
        text = texts[row, :length].tolist()
        grams = [tuple(text[-n:]) for n in range(MAX_NGRAM, MIN_NGRAM - 1, -1) if n <= len(text)]
        expected = next((expected_table[g] for g in grams if g in expected_table), None)
        assert found[row].item() == (expected is not None)
        if expected is not None:
            assert draft[row].tolist() == expected


def test_drafts_longer_than_the_stored_width_end_in_zeros():
    table = build_ngram_table([[1, 2, 3, 4, 5]] * 2, vocab_size=10, width=2)
    draft, _ = ngram_draft(table, mx.array([[1, 2]]), mx.array([2]), 4)
    assert draft.tolist() == [[3, 4, 0, 0]]


def test_keys_stay_exact_for_large_vocabularies():
    assert longest_ngram(49152) == 4 and longest_ngram(128256) == 3
    assert longest_ngram(2**21 - 2) == 3 and longest_ngram(2**21 - 1) == 2  # (V + 1)^3 = 2^63 overflows
    big = 128_000
    table = build_ngram_table([[big, 5, 7, 9]] * 2 + [[big + 1, 5, 7, 8]], vocab_size=128_256)
    draft, found = ngram_draft(table, mx.array([[big, 5, 7], [big + 1, 5, 7]]), mx.array([3, 3]), 1)
    # The 3-grams differ only in a token near the top of the vocabulary.
    assert found.tolist() == [True, True] and draft.tolist() == [[9], [8]]


def test_the_lookup_beam_falls_back_to_the_table_only_where_the_context_has_nothing():
    table = build_ngram_table([[3, 4, 5, 6]] * 2, vocab_size=10)
    beams = mx.array([[[4, 1, 1], [4, 2, 2]], [[4, 1, 1], [4, 2, 2]]], dtype=mx.int32)
    # Row 0: "4" never occurred before, so the table's "3 4" -> 5 6 is drafted. Row 1: "4"
    # occurred (followed by 8 9), and the context's copy wins.
    text = mx.array([[7, 3, 4, 0, 0], [4, 8, 9, 3, 4]])
    merged, found = with_lookup_beam(beams, text, mx.array([3, 5]), table)
    assert found.tolist() == [True, True] and merged.tolist() == [[[4, 1, 1], [4, 5, 6]], [[4, 1, 1], [4, 8, 9]]]
    assert with_lookup_beam(beams, text, mx.array([3, 5]))[0].tolist()[0] == beams.tolist()[0]
    # A single beam is the drafter's best guess: the table does not displace it.
    alone, _ = with_lookup_beam(beams[:, :1], text, mx.array([3, 5]), table)
    assert alone.tolist() == [[[4, 1, 1]], [[4, 8, 9]]]


def tiny_drafter() -> RecurrentDrafter:
    return RecurrentDrafter(DrafterConfig(vocab_size=10, hidden_size=8, num_draft_layers=1, exit_dim=8, rnn=True))


def test_the_table_travels_with_the_drafter_folder(tmp_path):
    drafter = tiny_drafter()
    drafter.ngrams = build_ngram_table([[1, 2, 3, 4]] * 2, vocab_size=10)
    save_drafter(drafter, tmp_path / "d")
    loaded = load_drafter(tmp_path / "d")
    assert loaded.ngrams is not None
    assert loaded.ngrams.keys.tolist() == drafter.ngrams.keys.tolist()
    assert loaded.ngrams.drafts.tolist() == drafter.ngrams.drafts.tolist()
    assert load_drafter(save_drafter(tiny_drafter(), tmp_path / "plain")).ngrams is None


def test_a_table_for_another_vocabulary_is_refused(tmp_path):
    drafter = tiny_drafter()
    drafter.ngrams = build_ngram_table([[1, 2, 3]] * 2, vocab_size=12)
    save_drafter(drafter, tmp_path / "d")
    with pytest.raises(DrafterLoadError, match="n-gram table is for vocab 12"):
        load_drafter(tmp_path / "d")
    (tmp_path / "d" / NGRAMS_FILE).write_bytes(b"not a table")
    with pytest.raises(DrafterLoadError):
        load_drafter(tmp_path / "d")
