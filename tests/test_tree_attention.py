"""Dynamic tree attention: dedup semantics, packing, and exact packed verification."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from redrafter_mlx.drafting.beam_search import INVALID_TOKEN
from redrafter_mlx.verify.tree_attention import bucket, dedup_prefix, pack, tree_layout

from .helpers import random_model, tiny_config

VOCAB = 64
MODEL = random_model(tiny_config(vocab_size=VOCAB), seed=7)


def test_dedup_prefix_reproduces_the_paper_example():
    beams = mx.array([[91, 92, 93, 95], [91, 92, 94, 96], [91, 92, 93, 97]])
    assert dedup_prefix(beams).tolist() == [[0, 0, 0, 0], [0, 0, 1, 1], [0, 0, 0, 2]]


def reference_prefix_tree(beams: np.ndarray) -> np.ndarray:
    """Slow definition: the smallest beam with the same prefix."""
    width, length = beams.shape
    return np.array(
        [
            [next(j for j in range(width) if (beams[j, : k + 1] == beams[i, : k + 1]).all()) for k in range(length)]
            for i in range(width)
        ]
    )


@st.composite
def shared_prefix_beams(draw, cut: bool = False):
    """Beams that start with one guaranteed token and copy random prefixes of each other;
    with `cut`, each beam then ends early at random, its rest INVALID_TOKEN (a node budget)."""
    width = draw(st.integers(1, 6))
    length = draw(st.integers(1, 5))
    tokens = st.integers(0, 5)  # few token values: collisions and shared prefixes are common
    rows = []
    for i in range(width):
        row = [draw(tokens) for _ in range(length)]
        if i and draw(st.booleans()):
            source = rows[draw(st.integers(0, i - 1))]
            keep = draw(st.integers(1, length))
            row[:keep] = source[:keep]
        rows.append(row)
    guaranteed = draw(tokens)
    for row in rows:
        row[0] = guaranteed
        if cut:
            kept = draw(st.integers(1, length))
            row[kept:] = [INVALID_TOKEN] * (length - kept)
    return np.array(rows, dtype=np.int32)


@settings(max_examples=60, deadline=None)
@given(shared_prefix_beams())
def test_layout_matches_slow_definition(beams):
    layout = tree_layout(mx.array(beams))
    assert np.array_equal(np.array(dedup_prefix(mx.array(beams))), reference_prefix_tree(beams))
    unpack = np.array(layout.unpack_index)
    unique_prefixes = {tuple(beams[w, : k + 1]) for w in range(beams.shape[0]) for k in range(beams.shape[1])}
    assert layout.count.item() == len(unique_prefixes)
    # Same slot <=> same prefix.
    for w1 in range(beams.shape[0]):
        for w2 in range(beams.shape[0]):
            for k in range(beams.shape[1]):
                same = (beams[w1, : k + 1] == beams[w2, : k + 1]).all()
                assert (unpack[w1, k] == unpack[w2, k]) == same


@settings(max_examples=25, deadline=None)
@given(shared_prefix_beams(), st.integers(0, 3))
def test_packed_verification_equals_per_beam_sequential_verification(beams, extra_padding):
    prefix = [3, 17, 42, 8, 23]
    width, length = beams.shape
    layout = tree_layout(mx.array(beams))
    count = layout.count.item()
    size = count + extra_padding
    packed = pack(mx.array(beams), layout, size)
    cache = MODEL.make_cache()
    MODEL(mx.array([prefix]), cache)
    cache.commit(len(prefix))
    hidden = MODEL(
        packed.tokens[None],
        cache,
        positions=(packed.depth + len(prefix))[None],
        mask=cache.attention_mask(packed.mask[None]),
    )
    packed_logits = MODEL.logits(hidden)[0]
    unpacked = packed_logits[layout.unpack_index]  # (W, L, V)
    for w in range(width):
        sequence = mx.array([prefix + beams[w].tolist()])
        expected = MODEL.logits(MODEL(sequence, MODEL.make_cache()))[0, len(prefix) :]
        assert mx.abs(unpacked[w] - expected).max().item() <= 1e-4


def test_bucket_rounds_up_and_caps():
    assert [bucket(c, 13) for c in (1, 4, 5, 12, 13)] == [4, 4, 8, 12, 13]


@settings(max_examples=40, deadline=None)
@given(shared_prefix_beams(cut=True), st.integers(0, 2))
def test_tokens_outside_a_node_budget_are_neither_packed_nor_seen(beams, extra_padding):
    """Budgeted beams end in INVALID_TOKEN: the packed tree holds exactly their distinct
    valid prefixes, and its verify pass still equals each beam's own sequential pass."""
    prefix = [5, 11, 2]
    width, length = beams.shape
    layout = tree_layout(mx.array(beams))
    valid = {tuple(b[: k + 1]) for b in beams.tolist() for k in range(length) if b[k] != INVALID_TOKEN}
    assert layout.count.item() == len(valid)
    packed = pack(mx.array(beams), layout, len(valid) + extra_padding)
    assert INVALID_TOKEN not in packed.tokens.tolist()
    cache = MODEL.make_cache()
    MODEL(mx.array([prefix]), cache)
    cache.commit(len(prefix))
    hidden = MODEL(
        packed.tokens[None], cache, (packed.depth + len(prefix))[None], cache.attention_mask(packed.mask[None])
    )
    unpacked = MODEL.logits(hidden)[0][layout.unpack_index]
    for w in range(width):
        kept = int((beams[w] != INVALID_TOKEN).sum())
        sequence = mx.array([prefix + beams[w, :kept].tolist()])
        expected = MODEL.logits(MODEL(sequence, MODEL.make_cache()))[0, len(prefix) :]
        assert mx.abs(unpacked[w, :kept] - expected).max().item() <= 1e-4
