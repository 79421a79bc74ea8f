"""Beam search against a slow, independent reference written here in numpy.

The reference runs the drafter forward pass itself from the drafter's weights (float64),
loops over beams and candidate tokens one by one, and sorts the candidates with Python's
stable sort (ties: lower parent beam, then lower token id). Weights are random floats, so
exact ties (where the two implementations may legitimately differ) have probability zero;
the seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten, tree_unflatten

from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.beam_search import INVALID_TOKEN, LOG_0, beam_search, choose_candidates
from redrafter_mlx.drafting.kinds.rnn import DrafterConfig, RecurrentDrafter
from redrafter_mlx.drafting.phase import propose

VOCAB, HIDDEN = 64, 16

VARIANTS = {
    "rnn": dict(num_draft_layers=1, rnn=True),
    "no_rnn": dict(num_draft_layers=1, rnn=False),
    "input_proj_2_layers": dict(num_draft_layers=2, rnn=True, exit_dim=24),
    "no_res_blocks": dict(num_draft_layers=0, rnn=True, exit_dim=20),
    "trimmed": dict(num_draft_layers=1, rnn=True, token_subset_size=40),
    "tied": dict(num_draft_layers=1, rnn=True, head_tied=True),
    "tied_trimmed": dict(num_draft_layers=2, rnn=False, head_tied=True, token_subset_size=40),
}


def random_drafter(seed: int, **overrides) -> tuple[RecurrentDrafter, np.ndarray]:
    """A drafter with N(0, (2/sqrt(fan_in))^2) weights (wide enough logit gaps that float32
    vs float64 never reorders candidates) and the LLM embedding table (V, hidden)."""
    rng = np.random.default_rng(seed)
    config = DrafterConfig(vocab_size=VOCAB, hidden_size=HIDDEN, **overrides)
    token_ids = None
    if config.token_subset_size is not None:
        token_ids = mx.array(rng.permutation(VOCAB)[: config.token_subset_size].astype(np.int32))
    drafter = RecurrentDrafter(config, token_ids=token_ids)
    weights = [
        (k, mx.array(rng.normal(0, 2 / np.sqrt(v.shape[-1]), v.shape).astype(np.float32)))
        for k, v in tree_flatten(drafter.parameters())
        if k != "token_ids"
    ]
    drafter.update(tree_unflatten(weights))
    embedding = rng.normal(0, 1, (VOCAB, HIDDEN)).astype(np.float32)
    return drafter, embedding


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


class NumpyDrafter:
    """The drafter's math, re-implemented from its weights in float64."""

    def __init__(self, drafter: RecurrentDrafter, embedding: np.ndarray):
        self.config = drafter.config
        self.w = {k: np.array(v).astype(np.float64) for k, v in tree_flatten(drafter.parameters())}
        self.embedding = embedding.astype(np.float64)
        self.token_ids = np.array(drafter.token_ids) if self.config.token_subset_size else np.arange(VOCAB)

    def update_state(self, state: np.ndarray, token: int) -> np.ndarray:
        e = self.embedding[token]
        if self.config.rnn:
            return silu(self.w["rnn_w.weight"] @ e + self.w["rnn_u.weight"] @ state + self.w["rnn_u.bias"])
        return e + state

    def logits(self, h: np.ndarray, state: np.ndarray) -> np.ndarray:
        x = np.concatenate([h, state])
        if "input_proj.weight" in self.w:
            x = self.w["input_proj.weight"] @ x + self.w["input_proj.bias"]
        n = self.config.num_draft_layers
        for i in range(n):
            x = x + silu(self.w[f"lm_head.{i}.linear.weight"] @ x + self.w[f"lm_head.{i}.linear.bias"])
        if self.config.head_tied:
            return self.embedding[self.token_ids] @ (self.w["head_proj.weight"] @ x)
        return self.w[f"lm_head.{n}.weight"] @ x


def warped_log_softmax(logits: np.ndarray, top_k: int) -> np.ndarray:
    """Reference top-k warp (keep logits >= the k-th largest) then log-softmax."""
    kth = np.sort(logits)[-min(top_k, logits.size)]
    warped = np.where(logits >= kth, logits, -np.inf)
    top = warped.max()
    return warped - top - np.log(np.exp(warped - top).sum())


def reference_beam_search(model: NumpyDrafter, h, g, width, length, top_k):
    """beams (W, L) and scores (W,) by explicit per-beam, per-candidate loops."""
    beams = [[g] for _ in range(width)]
    scores = [0.0] + [LOG_0] * (width - 1)
    states = [np.zeros(HIDDEN) for _ in range(width)]
    for _ in range(length - 1):
        candidates = []
        for b in range(width):
            state = model.update_state(states[b], beams[b][-1])
            log_probs = warped_log_softmax(model.logits(h, state), top_k)
            for t, lp in enumerate(log_probs):
                if np.isfinite(lp):
                    candidates.append((scores[b] + lp, b, t, state))
        candidates.sort(key=lambda c: -c[0])
        chosen = candidates[:width]
        beams = [beams[b] + [int(model.token_ids[t])] for _, b, t, _ in chosen]
        states = [state for *_, state in chosen]
        scores = [score for score, *_ in chosen]
    return np.array(beams), np.array(scores)


def run(drafter, embedding, h, g, width, length, top_k=50, search_width=None):
    beams, scores = beam_search(
        drafter, mx.array(embedding), mx.array(h), mx.array(g), width, length, top_k, search_width
    )
    return np.array(beams), np.array(scores)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_beam_search_matches_reference(variant):
    for seed in range(2):
        drafter, embedding = random_drafter(seed, **VARIANTS[variant])
        model = NumpyDrafter(drafter, embedding)
        rng = np.random.default_rng(100 + seed)
        h, g = rng.normal(0, 1, HIDDEN).astype(np.float32), int(rng.integers(VOCAB))
        for width in (1, 2, 3, 4):
            for length in (1, 2, 3, 5):
                beams, scores = run(drafter, embedding, h, g, width, length)
                ref_beams, ref_scores = reference_beam_search(model, h, g, width, length, 50)
                where = f"{variant} seed={seed} W={width} L={length}"
                assert beams.dtype == np.int32 and beams.shape == (width, length), where
                np.testing.assert_array_equal(beams, ref_beams, err_msg=where)
                np.testing.assert_allclose(scores, ref_scores, atol=1e-4, rtol=0, err_msg=where)


@pytest.mark.parametrize("top_k", [1, 5, 100])
def test_top_k_variants_match_reference(top_k):
    """k = 1 (greedy paths), a small k, and k > vocabulary (no warp at all)."""
    drafter, embedding = random_drafter(7, num_draft_layers=1, rnn=True)
    model = NumpyDrafter(drafter, embedding)
    h = np.random.default_rng(8).normal(0, 1, HIDDEN).astype(np.float32)
    width = min(3, top_k)  # W <= k: every beam is a real candidate (see the filler test)
    beams, scores = run(drafter, embedding, h, 5, width, 4, top_k)
    ref_beams, ref_scores = reference_beam_search(model, h, 5, width, 4, top_k)
    np.testing.assert_array_equal(beams, ref_beams)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-4, rtol=0)


def test_beam_width_one_is_greedy_drafting():
    drafter, embedding = random_drafter(3, num_draft_layers=2, rnn=True, exit_dim=24)
    model = NumpyDrafter(drafter, embedding)
    h = np.random.default_rng(4).normal(0, 1, HIDDEN).astype(np.float32)
    tokens, state, total = [9], np.zeros(HIDDEN), 0.0
    for _ in range(4):
        state = model.update_state(state, tokens[-1])
        log_probs = warped_log_softmax(model.logits(h, state), 50)
        tokens.append(int(np.argmax(log_probs)))
        total += log_probs.max()
    beams, scores = run(drafter, embedding, h, 9, 1, 5)
    np.testing.assert_array_equal(beams, [tokens])
    np.testing.assert_allclose(scores, [total], atol=1e-4)


def test_beam_length_one_returns_only_the_guaranteed_token():
    drafter, embedding = random_drafter(0, num_draft_layers=1, rnn=True)
    beams, scores = run(drafter, embedding, np.zeros(HIDDEN, np.float32), 11, 3, 1)
    np.testing.assert_array_equal(beams, [[11], [11], [11]])
    np.testing.assert_array_equal(scores, [0.0, LOG_0, LOG_0])


@pytest.mark.parametrize("width", [4, 6])
def test_width_above_top_k_fills_with_flagged_copies(width):
    """top_k = 2: step 1 has 2 real candidates, so W - 2 beams are fillers (score < LOG_0/2)
    repeating real prefixes; at W = 4 <= k**2 step 2 replaces them with real beams, at
    W = 6 two fillers remain. Real beams must equal the reference's."""
    top_k = 2
    drafter, embedding = random_drafter(5, num_draft_layers=1, rnn=True)
    model = NumpyDrafter(drafter, embedding)
    h = np.random.default_rng(6).normal(0, 1, HIDDEN).astype(np.float32)
    for length in (2, 3, 4):
        beams, scores = run(drafter, embedding, h, 1, width, length, top_k)
        ref_beams, ref_scores = reference_beam_search(model, h, 1, width, length, top_k)
        real = min(width, top_k ** (length - 1))
        np.testing.assert_array_equal(beams[:real], ref_beams[:real])
        np.testing.assert_allclose(scores[:real], ref_scores[:real], atol=1e-4, rtol=0)
        assert np.all(scores[:real] > LOG_0 / 2) and np.all(scores[real:] < LOG_0 / 2)
        real_prefixes = {tuple(b[:2]) for b in beams[:real]}
        assert all(tuple(b[:2]) in real_prefixes for b in beams[real:])


def test_batched_search_equals_per_row_search():
    drafter, embedding = random_drafter(2, num_draft_layers=1, rnn=True, token_subset_size=40)
    rng = np.random.default_rng(9)
    hs = rng.normal(0, 1, (3, HIDDEN)).astype(np.float32)
    gs = np.array([4, 17, 4], dtype=np.int32)
    beams, scores = run(drafter, embedding, hs, gs, 3, 4)
    assert beams.shape == (3, 3, 4) and scores.shape == (3, 3)
    for row in range(3):
        row_beams, row_scores = run(drafter, embedding, hs[row], gs[row], 3, 4)
        np.testing.assert_array_equal(beams[row], row_beams)
        np.testing.assert_allclose(scores[row], row_scores, atol=1e-5)


def test_invalid_shape_arguments_raise():
    drafter, embedding = random_drafter(0, num_draft_layers=1, rnn=True)
    with pytest.raises(ValueError, match="beam_width"):
        run(drafter, embedding, np.zeros(HIDDEN, np.float32), 0, 0, 3)


def prefix_log_probs(model: NumpyDrafter, h, beam, top_k=50) -> list[float]:
    """Summed warped drafter log-probs of beam[:2], beam[:3], ... (the reference's own pass)."""
    state, total, out = np.zeros(HIDDEN), 0.0, []
    inverse = {int(t): i for i, t in enumerate(model.token_ids)}
    for prev, token in zip(beam[:-1], beam[1:]):
        state = model.update_state(state, prev)
        total += warped_log_softmax(model.logits(h, state), top_k)[inverse[int(token)]]
        out.append(total)
    return out


def reference_choice(beams: list[list[int]], prefix_probs: list[list[float]], count: int) -> list[int]:
    """Greedy maximum coverage with Python sets: each pick is the beam whose drafted
    prefixes not yet chosen carry the most probability (the first such beam on ties)."""
    chosen, covered = [], set()
    for _ in range(count):
        gains = [
            sum(p for d, p in enumerate(probs) if tuple(beam[1 : d + 2]) not in covered)
            for beam, probs in zip(beams, prefix_probs)
        ]
        best = gains.index(max(gains))
        chosen.append(best)
        covered |= {tuple(beams[best][1 : d + 2]) for d in range(len(beams[best]) - 1)}
    return chosen


def test_choice_covers_the_second_likeliest_first_token():
    """Hand-computed: the 3 best-scoring beams all start with token 1 (p = 0.6), so they
    verify 0.6 + 0.24 + 0.21 + 0.15 = 1.20 expected drafted tokens. Replacing the third by
    the beam through token 2 (p = 0.35) verifies 0.6 + 0.24 + 0.21 + 0.35 + 0.105 = 1.505."""
    beams = mx.array([[[9, 1, 3], [9, 1, 4], [9, 1, 5], [9, 2, 6]]], dtype=mx.int32)
    probs = [[0.6, 0.24], [0.6, 0.21], [0.6, 0.15], [0.35, 0.105]]
    history = mx.array([[[0.0, *np.log(p)] for p in probs]], dtype=mx.float32)
    assert np.array(choose_candidates(beams, history, 3)).tolist() == [[0, 3, 1]]


@pytest.mark.parametrize("variant", ["rnn", "trimmed", "tied"])
def test_wide_search_verifies_the_best_covering_beams(variant):
    """search_width S > W: the W beams are the reference's greedy coverage choice among
    the reference's S-beam search, with those beams' scores."""
    drafter, embedding = random_drafter(11, **VARIANTS[variant])
    model = NumpyDrafter(drafter, embedding)
    for seed in range(3):
        h = np.random.default_rng(seed).normal(0, 1, HIDDEN).astype(np.float32)
        for width, search_width, length in [(1, 6, 4), (3, 8, 5), (4, 16, 3)]:
            wide, wide_scores = reference_beam_search(model, h, 7, search_width, length, 50)
            probs = [np.exp(prefix_log_probs(model, h, beam)) for beam in wide.tolist()]
            chosen = reference_choice(wide.tolist(), probs, width)
            beams, scores = run(drafter, embedding, h, 7, width, length, search_width=search_width)
            where = f"{variant} seed={seed} W={width} S={search_width} L={length}"
            np.testing.assert_array_equal(beams, wide[chosen], err_msg=where)
            np.testing.assert_allclose(scores, wide_scores[chosen], atol=1e-4, rtol=0, err_msg=where)


def test_search_width_at_most_beam_width_is_the_papers_search():
    drafter, embedding = random_drafter(12, num_draft_layers=1, rnn=True)
    h = np.random.default_rng(13).normal(0, 1, HIDDEN).astype(np.float32)
    paper = run(drafter, embedding, h, 3, 3, 5)
    for search_width in (1, 3):
        for got, want in zip(run(drafter, embedding, h, 3, 3, 5, search_width=search_width), paper):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("variant", ["rnn", "trimmed"])
def test_a_node_budget_verifies_the_likeliest_distinct_prefixes(variant):
    """The budgeted tree is the guaranteed token and the budget - 1 distinct drafted prefixes
    of highest drafter probability among the reference search's beams, found by listing
    every prefix; the rest of each beam is INVALID_TOKEN, and what is kept is a tree."""
    drafter, embedding = random_drafter(21, **VARIANTS[variant])
    model = NumpyDrafter(drafter, embedding)
    for seed in range(3):
        h = np.random.default_rng(seed).normal(0, 1, HIDDEN).astype(np.float32)
        for width, length, budget in [(4, 5, 6), (6, 4, 9), (3, 6, 2)]:
            wide, _ = reference_beam_search(model, h, 7, width, length, 50)
            probs = {}
            for beam in wide.tolist():
                for d, p in enumerate(np.exp(prefix_log_probs(model, h, beam))):
                    probs[tuple(beam[: d + 2])] = p
            wanted = set(sorted(probs, key=probs.get, reverse=True)[: budget - 1])
            shape = TreeShape(width, length, width, budget)
            beams = np.array(propose(drafter, mx.array(embedding), shape, mx.array(h)[None], mx.array([7]))[0])[0]
            kept = {tuple(b[: d + 2]) for b in beams.tolist() for d in range(length - 1) if b[d + 1] != INVALID_TOKEN}
            assert kept == wanted, f"{variant} seed={seed} W={width} L={length} N={budget}"
            valid = beams[:, 1:] != INVALID_TOKEN
            assert (np.cumprod(valid, axis=1) == valid).all()  # invalid tokens only end beams
            assert shape.max_packed == budget


def test_a_budget_that_covers_the_tree_changes_nothing():
    drafter, embedding = random_drafter(22, **VARIANTS["rnn"])
    h = mx.array(np.random.default_rng(5).normal(0, 1, HIDDEN).astype(np.float32))[None]
    full, _ = propose(drafter, mx.array(embedding), TreeShape(3, 4, 3), h, mx.array([7]))
    covered, _ = propose(drafter, mx.array(embedding), TreeShape(3, 4, 3, 10), h, mx.array([7]))
    assert np.array_equal(np.array(full), np.array(covered)) and TreeShape(3, 4, 3, 10).max_packed == 10
    with pytest.raises(ValueError, match="node budget"):
        TreeShape(3, 4, 3, 1)
