"""ReDrafter decoding: exact greedy output, exact sampling, and one host read per step."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import make_sampler

from redrafter_mlx import sampling
from redrafter_mlx.decoding import loop as decoding
from redrafter_mlx.decoding.loop import generate_ar, generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.models.cache import KVCache
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.tuning import DraftPlan, StepPolicy
from redrafter_mlx.tuning.plan import deepest_calibrated
from redrafter_mlx.tuning.policy import PROBE_STEPS
from redrafter_mlx.verify.tree_attention import tree_layout

from .helpers import (
    PROMPTS,
    SEQ_LEN,
    TINY,
    TINY_PROMPT,
    TINY_VOCAB,
    chi_square_p_value,
    collect,
    count_host_reads,
    cpu_like,
    cpu_like_ms,
    exact_sequence_probabilities,
    random_drafter,
    sample_counts,
    scripted_plan,
)


@pytest.fixture(scope="module")
def long_answers(embedded, embedded_runs):
    """40 greedy tokens per prompt, generated through any EOS (what an oracle drafter knows)."""
    return [collect(generate_ar(embedded.model, ids, max_tokens=40))[0] for ids, _, _ in embedded_runs]


@pytest.mark.parametrize("beam_width", [1, 2, 4, 8])
@pytest.mark.parametrize("beam_length", [2, 3, 5])
def test_greedy_redrafter_matches_autoregressive_with_random_drafter(embedded, embedded_runs, beam_width, beam_length):
    drafter = random_drafter(49152, 576, tied=True)
    for ids, expected, reason in embedded_runs:
        tokens, stats = collect(
            generate_redrafter(
                embedded.model,
                drafter,
                ids,
                DraftPlan(TreeShape(beam_width, beam_length, beam_width)),
                max_tokens=20,
                eos_ids=embedded.tokenizer.eos_token_ids,
            )
        )
        assert tokens == expected
        assert stats.finish_reason == reason
        assert all(1 <= n <= beam_length for n in stats.accepted_per_step)
        assert all(n <= 1 + beam_width * (beam_length - 1) for n in stats.verified_tokens)


@pytest.mark.parametrize("search_width", [None, 16])  # the paper's beam search; choosing W of 16
@pytest.mark.parametrize("beam_width, beam_length", [(1, 5), (3, 5), (4, 3), (8, 2)])
def test_greedy_redrafter_matches_autoregressive_with_the_shipped_drafter(
    embedded, embedded_runs, beam_width, beam_length, search_width
):
    drafter = load_drafter_for(embedded, None)  # the trained drafter shipped for this model
    assert not drafter.config.head_tied  # stored tied, folded by the loader
    accepted = []
    for ids, expected, reason in embedded_runs:
        tokens, stats = collect(
            generate_redrafter(
                embedded.model,
                drafter,
                ids,
                DraftPlan(TreeShape(beam_width, beam_length, search_width or beam_width)),
                max_tokens=20,
                eos_ids=embedded.tokenizer.eos_token_ids,
            )
        )
        assert tokens == expected and stats.finish_reason == reason
        accepted += stats.accepted_per_step
    assert max(accepted) > 1  # the trained drafter really gets drafts accepted


@pytest.mark.parametrize("shape", [TreeShape(4, 5, 4, 6), TreeShape(6, 4, 16, 8), TreeShape(3, 3, 3, 2)])
def test_greedy_redrafter_with_a_node_budget_matches_autoregressive(embedded, embedded_runs, shape):
    """Budgeted trees (the likeliest prefixes, the rest of each beam invalid) verify at
    most N tokens and still decode exactly the greedy answer."""
    drafter = load_drafter_for(embedded, None)
    accepted = []
    for ids, expected, reason in embedded_runs:
        tokens, stats = collect(
            generate_redrafter(
                embedded.model, drafter, ids, DraftPlan(shape), max_tokens=20, eos_ids=embedded.tokenizer.eos_token_ids
            )
        )
        assert tokens == expected and stats.finish_reason == reason
        assert max(stats.verified_tokens) <= shape.node_budget
        accepted += stats.accepted_per_step
    assert max(accepted) > 1


def test_the_cache_is_compacted_only_when_the_accepted_beam_is_not_first(embedded, embedded_runs, monkeypatch):
    """The first beam's tokens sit in front of the verified block already: steps that accept
    it (or no draft) skip the gather, the others move their path, and the output stays AR's."""
    gathered = []
    original = KVCache.gather_pending
    monkeypatch.setattr(
        KVCache,
        "gather_pending",
        lambda cache, index: (gathered.append(index.reshape(-1).tolist()), original(cache, index)),
    )
    drafter = load_drafter_for(embedded, None)
    steps = 0
    for ids, expected, _ in embedded_runs:
        tokens, stats = collect(
            generate_redrafter(
                embedded.model,
                drafter,
                ids,
                DraftPlan(TreeShape(3, 5, 3)),
                max_tokens=20,
                eos_ids=embedded.tokenizer.eos_token_ids,
            )
        )
        assert tokens == expected
        steps += stats.steps
    assert 0 < len(gathered) < steps
    assert all(index[0] == 0 and index != list(range(len(index))) for index in gathered)


def test_padding_trees_to_longer_verify_lengths_changes_no_token(embedded, embedded_runs):
    """A calibration may pad a tree past its own size, where a longer verify is cheaper."""
    drafter = random_drafter(49152, 576, tied=True)
    for ids, expected, reason in embedded_runs:
        tokens, stats = collect(
            generate_redrafter(
                embedded.model,
                drafter,
                ids,
                DraftPlan(TreeShape(3, 5, 3), verify_lengths=[16] * 14),
                max_tokens=20,
                eos_ids=embedded.tokenizer.eos_token_ids,
            )
        )
        assert tokens == expected and stats.finish_reason == reason


@pytest.mark.parametrize("seed", [0, 1])
def test_switching_between_trees_and_plain_steps_changes_no_token(embedded, embedded_runs, seed):
    """Every switch the loop can meet (`ScriptedPolicy`), the drafter and the lookup told
    of the tokens plain steps emitted, and the cache contract kept."""
    drafter = load_drafter_for(embedded, None)
    plan = scripted_plan(TreeShape(2, 4, 2), seed)
    for ids, expected, reason in embedded_runs:
        cache = embedded.model.make_cache()
        tokens, stats = collect(
            generate_redrafter(
                embedded.model, drafter, ids, plan, max_tokens=20, eos_ids=embedded.tokenizer.eos_token_ids, cache=cache
            )
        )
        assert tokens == expected and stats.finish_reason == reason
        assert cache.length == len(ids) + len(tokens) - 1
        assert 0 < len(stats.tree_cells) < stats.steps  # both kinds of step ran
    assert sum(stats.accepted_per_step) > stats.steps  # drafts were accepted


def test_the_policy_stops_drafting_when_the_drafter_stops_predicting(
    embedded, embedded_runs, long_answers, monkeypatch
):
    """A drafter that knows the answer's first 12 tokens and then drafts nonsense: the real
    policy drafts long beams, then shorter ones, then decodes plainly (probing cheaply); the
    output is greedy AR's throughout.
    (Each step is timed as the calibration predicts, as on a machine that runs as calibrated,
    so that the choices depend on the acceptance alone.)"""
    calibration = cpu_like()
    start = calibration.best(beam_width=2, search_width=16)
    policy = StepPolicy(start, calibration, deepest_calibrated(calibration, start, None))
    plan = DraftPlan(start, calibration.verify_lengths(policy.longest.max_packed), calibration, policy)
    chosen = []
    choose, observe = policy.choose, policy.observe

    def as_calibrated(choice, rows, accepted, seconds, following):
        observe(choice, rows, accepted, cpu_like_ms(rows, choice) / 1e3, following)

    monkeypatch.setattr(policy, "choose", lambda rows, ends=None: chosen.append(choose(rows, ends)) or chosen[-1])
    monkeypatch.setattr(policy, "observe", as_calibrated)
    for (ids, _, _), answer in zip(embedded_runs, long_answers):
        monkeypatch.setattr(decoding, "make_draft_fn", knowing_draft(answer[:12], len(ids)))
        first = len(chosen)
        tokens, stats = collect(generate_redrafter(embedded.model, random_drafter(8, 576), ids, plan, max_tokens=40))
        assert tokens == answer
        drafted = "".join("." if c is None else f"{c.beam_width}{c.beam_length} " for c in chosen[first:])
        # long after the drafter stopped predicting: plain steps, and at most one probe
        assert sum(c is not None for c in chosen[first:][-12:]) <= PROBE_STEPS, drafted
        late = chosen[first:][-20:]  # what probing and the fading prior cost there, against plain steps
        assert sum(cpu_like_ms(1, c) for c in late) < 1.1 * len(late) * cpu_like_ms(1, None), drafted
        assert max(stats.accepted_per_step) >= 3  # while it predicted, beams were accepted whole


def knowing_draft(known: list[int], prompt_length: int):
    """A stand-in draft phase (`make_draft_fn`) whose first beam is the greedy answer where
    `known` covers it and nonsense after. (A test stand-in: it reads the text length.)"""

    def make(drafter, embedding, shape, draft_top_k=50, lookup=True):
        def draft(hidden, token, text, length):
            start = length.item() - prompt_length - 1  # the guaranteed token's place in the answer
            future = [token.item(), *known[start + 1 : start + shape.beam_length]]
            row = future + [(7 * i + 3) % 500 + 1 for i in range(shape.beam_length - len(future))]
            rows = [row] + [[row[0]] + [(t + w) % 500 + 1 for t in row[1:]] for w in range(1, shape.beam_width)]
            beams = mx.array(rows, dtype=mx.int32)
            return beams, tree_layout(beams)

        return draft

    return make


def oracle_draft(answer: list[int]):
    """A stand-in draft phase (`make_draft_fn`) that knows the greedy answer: beam 0 is
    right, the others diverge. Beam 0 is always accepted whole, so the i-th draft starts at
    answer[i * L]. (Not compiled: it counts its calls in Python.)
    """
    calls = []

    def make(drafter, embedding, shape, draft_top_k=50, lookup=True):
        return lambda hidden, token, text, length: draft(shape.beam_width, shape.beam_length)

    def draft(width, length):
        start = len(calls) * length
        calls.append(start)
        future = (answer + [0] * (start + length))[start : start + length]
        rows = []
        for w in range(width):
            row = list(future)
            cut = 1 + w % max(length - 1, 1) if w else length  # shared prefix, then wrong
            row[cut:] = [(t + w) % 500 + 1 for t in row[cut:]]
            rows.append(row)
        beams = mx.array(rows, dtype=mx.int32)
        return beams, tree_layout(beams)

    return make


@pytest.mark.parametrize("max_tokens", [7, 9, 30])  # 7 and 9 end mid-block, 30 at EOS
def test_multi_token_blocks_stop_at_eos_and_max_tokens_mid_block(
    embedded, embedded_runs, long_answers, monkeypatch, max_tokens
):
    eos = embedded.tokenizer.eos_token_ids
    for (ids, _, _), answer in zip(embedded_runs, long_answers):
        stop = next((i for i, t in enumerate(answer) if t in eos), len(answer))
        full = answer[: min(stop, max_tokens)]  # what greedy AR emits
        cache = embedded.model.make_cache()
        monkeypatch.setattr(decoding, "make_draft_fn", oracle_draft(answer))
        tokens, stats = collect(
            generate_redrafter(
                embedded.model,
                random_drafter(8, 576),
                ids,
                DraftPlan(TreeShape(3, 4, 3)),
                max_tokens=max_tokens,
                eos_ids=eos,
                cache=cache,
            )
        )
        assert tokens == full
        assert max(stats.accepted_per_step) == 4  # whole blocks were accepted
        assert cache.length == len(ids) + len(tokens) - 1  # the cache contract of generate_ar


def test_cache_is_reusable_for_a_second_turn(embedded, embedded_runs):
    """Continuing from a ReDrafter cache gives what a fresh AR run on the full history gives."""
    ids, first, _ = embedded_runs[1]
    drafter = random_drafter(49152, 576, seed=1, tied=True)
    cache = embedded.model.make_cache()
    collect(generate_redrafter(embedded.model, drafter, ids, max_tokens=len(first), cache=cache))
    follow_up = [first[-1]] + embedded.tokenizer.encode(" And two more?")
    continued, _ = collect(generate_redrafter(embedded.model, drafter, follow_up, max_tokens=8, cache=cache))
    fresh, _ = collect(generate_ar(embedded.model, ids + first[:-1] + follow_up, max_tokens=8))
    assert continued == fresh


@pytest.mark.parametrize("switching", [False, True])
def test_at_most_one_host_read_per_step(embedded, monkeypatch, switching):
    """Count every way MLX can hand a value to Python while ReDrafter decodes (the lookup
    with the shipped n-gram table included), with one tree or switching to plain steps."""
    drafter = random_drafter(49152, 576)
    drafter.ngrams = load_drafter_for(embedded, None).ngrams
    assert drafter.ngrams is not None
    ids = encode_prompt(embedded.tokenizer, PROMPTS[1])
    plan = scripted_plan(TreeShape(3, 5, 3)) if switching else DraftPlan(TreeShape(3, 5, 3))
    reads = count_host_reads(monkeypatch)
    _, stats = collect(generate_redrafter(embedded.model, drafter, ids, plan, max_tokens=12))
    assert stats.steps >= 5
    assert sum(reads.values()) <= stats.steps + 1, reads  # + 1: the first token after prefill


# --- exactness of sampling on a tiny model with an enumerable output space -------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "temperature,switching,shape",
    [
        (1.0, False, TreeShape(2, 3, 2)),
        (0.7, False, TreeShape(2, 3, 2)),
        (1.0, True, TreeShape(2, 3, 2)),
        (1.0, False, TreeShape(3, 3, 3, 4)),  # a node budget: 3 of the 6 drafted prefixes
    ],
)
def test_sampled_redrafter_has_the_llm_distribution(temperature, switching, shape):
    """Exact with one tree, with steps switching between trees and plain steps, and with a
    node budget."""
    probs = exact_sequence_probabilities(temperature)
    drafter = random_drafter(TINY_VOCAB, 32, seed=5)
    n = 1500
    mx.random.seed(1234)
    plan = scripted_plan(shape, plain_share=0.3) if switching else DraftPlan(shape)
    counts, accepted_drafts = sample_counts(
        lambda: generate_redrafter(
            TINY,
            drafter,
            TINY_PROMPT,
            plan,
            max_tokens=SEQ_LEN,
            sampler=make_sampler(temp=temperature),
        ),
        n,
    )
    assert sum(counts.values()) == n
    assert accepted_drafts > n // 4  # the tree walk, not just the LLM's own token, was exercised
    assert chi_square_p_value(counts, probs, n) > 1e-3
    # Control: the same test rejects a wrong distribution (a different temperature).
    wrong = exact_sequence_probabilities(temperature * 2)
    assert chi_square_p_value(counts, wrong, n) < 1e-6


def test_greedy_reads_raw_logits_and_samplers_read_log_probs():
    """Greedy skips the vocabulary-wide log-softmax (same argmax); samplers get log-probs."""
    logits = mx.array([[3.0, -1.0, 7.5, 0.25], [0.0, 2.0, 1.0, -4.0]])
    assert sampling.make_greedy_or_sampler() is sampling.greedy
    assert sampling.sampler_scores(sampling.greedy, logits) is logits
    sampler = sampling.make_greedy_or_sampler(temp=0.7)
    log_probs = np.array(sampling.sampler_scores(sampler, logits))
    np.testing.assert_allclose(np.exp(log_probs).sum(axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(np.array(sampling.greedy(logits)), log_probs.argmax(axis=-1))


@pytest.mark.slow
def test_lookup_accepts_what_the_answer_repeats_and_changes_no_token(embedded):
    """A random drafter gets nothing accepted; copying the answer's own repetitions does."""
    drafter = random_drafter(49152, 576, tied=True)
    ids = encode_prompt(embedded.tokenizer, "Write the word 'hello' ten times.")
    eos = embedded.tokenizer.eos_token_ids
    expected, _ = collect(generate_ar(embedded.model, ids, max_tokens=30, eos_ids=eos))
    per_step = {}
    for lookup in (False, True):
        tokens, stats = collect(
            generate_redrafter(
                embedded.model, drafter, ids, DraftPlan(TreeShape(3, 5, 3), lookup=lookup), max_tokens=30, eos_ids=eos
            )
        )
        assert tokens == expected
        per_step[lookup] = stats.tokens_per_step
    assert per_step[False] < 1.2 and per_step[True] > 2.0, per_step
