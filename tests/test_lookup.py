"""Context lookup: the copied draft against a plain-Python reference, and its beam."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from redrafter_mlx.drafting.lookup import MAX_NGRAM, MIN_NGRAM, TextBuffer, lookup_draft, with_lookup_beam


def reference_draft(text: list[int], width: int) -> list[int] | None:
    """Longest n-gram first, latest earlier occurrence first; the copy reads its own output
    once it passes the end of the text (a repetition still going on)."""
    for n in range(MAX_NGRAM, MIN_NGRAM - 1, -1):
        tail = text[len(text) - n :]
        for start in range(len(text) - n - 1, -1, -1):  # a token must follow the occurrence
            if len(text) >= n and text[start : start + n] == tail:
                grown = list(text)
                for i in range(width):
                    grown.append(grown[start + n + i])
                return grown[len(text) :]
    return None


def test_hand_example_copies_periodically():
    # ... 5 6 7 5 6 -> "5 6" occurred at 0, followed by 7 5 6; the copy then repeats 7.
    draft, found = lookup_draft(mx.array([[5, 6, 7, 5, 6, 9, 9]]), mx.array([5]), 4)
    assert found.tolist() == [True] and draft.tolist() == [[7, 5, 6, 7]]
    # The longest match wins over a later, shorter one: "2 3" occurred at 0; "3" alone at 4.
    draft, found = lookup_draft(mx.array([[2, 3, 8, 1, 3, 4, 2, 3]]), mx.array([8]), 2)
    assert draft.tolist() == [[8, 1]]
    _, found = lookup_draft(mx.array([[1, 2, 3, 4]]), mx.array([4]), 3)  # nothing repeats
    assert found.tolist() == [False]


@pytest.mark.parametrize("seed", range(3))
def test_lookup_draft_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        size = int(rng.integers(1, 40))
        texts = rng.integers(0, int(rng.integers(2, 9)), size=(5, size))  # few symbols: many matches
        lengths = rng.integers(1, size + 1, size=5)
        draft, found = lookup_draft(mx.array(texts), mx.array(lengths), 4)
        for row, length in enumerate(lengths):
            expected = reference_draft(texts[row, :length].tolist(), 4)  # ignores what lies past length
            assert found[row].item() == (expected is not None)
            if expected is not None:
                assert draft[row].tolist() == expected


def test_lookup_beam_replaces_only_the_last_beam_and_only_on_a_match():
    beams = mx.array([[[9, 1, 1], [9, 2, 2]], [[4, 3, 3], [4, 5, 5]]], dtype=mx.int32)
    text = mx.array([[9, 7, 8, 9, 0], [1, 2, 3, 4, 0]])  # row 0 ends "9": copy "7 8"; row 1 repeats nothing
    merged, found = with_lookup_beam(beams, text, mx.array([4, 4]))
    assert merged.tolist() == [[[9, 1, 1], [9, 7, 8]], [[4, 3, 3], [4, 5, 5]]]
    assert found.tolist() == [True, False]


def test_text_buffer_stages_before_it_commits():
    text = TextBuffer([1, 2], room=6)
    text.stage(mx.array([3, 4, 5]))  # say one drafted token was accepted, then the LLM's 4
    text.commit(2)
    text.stage(mx.array([6]))  # overwrites the junk 5
    text.commit(1)
    assert text.length == 5 and text.tokens[0, : text.length].tolist() == [1, 2, 3, 4, 6]
