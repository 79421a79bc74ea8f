"""Batched decoding (`redrafter_mlx/batch.py`): every row's output is its batch-1 output,
rows join and leave between steps, one host read per step, and sampling is exact per row
with each request's own seed."""

from __future__ import annotations

import random
from collections import Counter

import mlx.core as mx
import pytest

from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.decoding.loop import generate_ar
from redrafter_mlx.decoding.steps import answer_part
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.kinds.draft_llm import DraftLLM
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.models import attention as attention_module
from redrafter_mlx.models import llama as llama_module
from redrafter_mlx.models.cache import CHUNK
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.tuning import StepPolicy

from .helpers import (
    MORE_PROMPTS,
    TINY,
    TINY_PROMPT,
    TINY_VOCAB,
    ScriptedPolicy,
    chi_square_p_value,
    collect,
    count_host_reads,
    exact_sequence_probabilities,
    random_drafter,
    random_eagle,
    random_medusa,
    random_model,
    random_speculator,
    run_batch,
    tiny_config,
)


@pytest.fixture(scope="module")
def references(embedded):
    """Greedy AR answers of MORE_PROMPTS with per-prompt lengths (some end at EOS)."""
    eos = embedded.tokenizer.eos_token_ids
    out = []
    for i, text in enumerate(MORE_PROMPTS):
        ids = encode_prompt(embedded.tokenizer, text)
        tokens, stats = collect(generate_ar(embedded.model, ids, max_tokens=16 + 4 * i, eos_ids=eos))
        out.append((ids, 16 + 4 * i, tokens, stats.finish_reason))
    assert {reason for *_, reason in out} == {"stop", "length"}
    return out


DRAFTERS = {
    "shipped": lambda embedded: load_drafter_for(embedded, None),
    "random-rnn": lambda embedded: random_drafter(49152, 576, tied=True),
    "medusa": lambda embedded: random_medusa(49152, 576, 4).for_target(embedded.model, "smollm2"),
    "mlp": lambda embedded: random_speculator(576, 256, 49152, 4).for_target(embedded.model, "smollm2"),
    "none": lambda embedded: None,
    "eagle": lambda embedded: random_eagle(49152, 576, 9, 3).for_target(embedded.model, "smollm2"),
    "draft-llm": lambda embedded: DraftLLM(embedded.model),  # the model itself: most drafts accepted
}


# All rows at once, and one row joining every 2 steps (rows join and leave mid-batch); one
# budgeted tree (5 of its 10 tokens verified).
CASES = [
    ("shipped", 0, TreeShape(3, 4, 8)),
    ("shipped", 2, TreeShape(3, 4, 8)),
    ("shipped", 2, TreeShape(3, 4, 8, 5)),
    ("random-rnn", 2, TreeShape(3, 4, 8)),
    ("medusa", 2, TreeShape(3, 4, 8)),
    ("mlp", 2, TreeShape(3, 4, 8)),
    ("none", 2, TreeShape(3, 4, 8)),
    ("eagle", 2, TreeShape(3, 4, 8)),
    ("draft-llm", 1, TreeShape(2, 3, 2)),
    ("shipped", 1, "policy"),
    ("medusa", 2, "policy"),
]


def policy_for(shape: TreeShape) -> StepPolicy:
    """A policy that switches among its choices as it probes them."""
    return StepPolicy(shape)


@pytest.mark.parametrize("kind, join_every, shape", CASES)
def test_every_row_decodes_what_greedy_decoding_gives_alone(embedded, references, kind, join_every, shape):
    drafter = DRAFTERS[kind](embedded)
    policy = policy_for(TreeShape(3, 4, 8)) if shape == "policy" else None
    shape = TreeShape(3, 4, 8) if policy else shape
    eos = embedded.tokenizer.eos_token_ids
    decoder = BatchDecoder(embedded.model, drafter, shape, eos_ids=eos, policy=policy)
    requests = [Request(ids, DecodingOptions(max_tokens=n)) for ids, n, _, _ in references]
    results = run_batch(decoder, requests, join_every)
    for handle, (_, _, tokens, reason) in enumerate(references):
        assert results[handle] == (tokens, reason), handle
    assert not decoder.rows and decoder.cache.rows == 0


def test_rows_attending_in_blocks_over_their_own_lengths_decode_greedily(embedded, references, monkeypatch):
    """Attention written out in blocks of a few rows, each over its own rows' keys only (as
    a batch holding one long conversation runs): every row's answer is still its own."""
    monkeypatch.setattr(attention_module, "WRITTEN_OUT", 0)
    monkeypatch.setattr(attention_module, "BLOCK", 9 * 10 * 64)
    trimmed = []
    real = attention_module.attention

    def spy(q, k, v, scale, mask, extents=None):
        trimmed.append(extents is not None and max(extents) > min(extents))
        return real(q, k, v, scale, mask, extents)

    monkeypatch.setattr(llama_module, "attention", spy)
    eos = embedded.tokenizer.eos_token_ids
    decoder = BatchDecoder(embedded.model, load_drafter_for(embedded, None), TreeShape(3, 4, 8), eos_ids=eos)
    requests = [Request(ids, DecodingOptions(max_tokens=n)) for ids, n, _, _ in references]
    results = run_batch(decoder, requests, join_every=2)
    for handle, (_, _, tokens, reason) in enumerate(references):
        assert results[handle] == (tokens, reason), handle
    assert any(trimmed)


def test_rows_accept_different_lengths_in_one_step(embedded, references):
    """The shipped drafter accepts more on some rows than others: cache lengths diverge."""
    decoder = BatchDecoder(embedded.model, load_drafter_for(embedded, None), TreeShape(3, 4, 8))
    for handle, (ids, *_) in enumerate(references):
        decoder.add(handle, Request(ids, DecodingOptions(max_tokens=12)))
    decoder.step()
    accepted = [row.stats.accepted_per_step[-1] for row in decoder.rows]
    assert len(set(accepted)) > 1, accepted
    assert decoder.cache.lengths == [
        len(references[row.handle][0]) + sum(row.stats.accepted_per_step) for row in decoder.rows
    ]


def test_a_removed_row_leaves_at_once_and_the_others_go_on(embedded, references):
    decoder = BatchDecoder(
        embedded.model, load_drafter_for(embedded, None), TreeShape(3, 4, 8), eos_ids=embedded.tokenizer.eos_token_ids
    )
    for handle, (ids, n, *_) in enumerate(references):
        decoder.add(handle, Request(ids, DecodingOptions(max_tokens=n)))
    decoder.step()
    gone = decoder.remove(1)
    assert gone.finish_reason == "cancelled" and sorted(row.handle for row in decoder.rows) == [0, 2, 3, 4]
    assert decoder.remove(1) is None
    tokens = {row.handle: [] for row in decoder.rows}
    while decoder.rows:
        for update in decoder.step():
            tokens[update.handle] += update.tokens
    for handle in tokens:  # the rest of each answer, after what the first steps emitted
        expected = references[handle][2]
        assert expected[len(expected) - len(tokens[handle]) :] == tokens[handle]


def test_when_a_long_row_leaves_the_cache_shrinks_to_what_the_others_need(embedded, references):
    long_prompt = encode_prompt(embedded.tokenizer, " ".join(MORE_PROMPTS * 12))
    assert len(long_prompt) > CHUNK
    decoder = BatchDecoder(
        embedded.model, load_drafter_for(embedded, None), TreeShape(3, 4, 8), eos_ids=embedded.tokenizer.eos_token_ids
    )
    decoder.add("long", Request(long_prompt, DecodingOptions(max_tokens=40)))
    for handle, (ids, n, *_) in enumerate(references[:3]):
        decoder.add(handle, Request(ids, DecodingOptions(max_tokens=n)))
    tokens = {handle: [] for handle in range(3)}
    for update in decoder.step():
        tokens.get(update.handle, []).extend(update.tokens)
    grown = decoder.cache.capacity
    assert grown > CHUNK and len(decoder.rows) == 4
    decoder.remove("long")
    longest = max(decoder.cache.lengths)
    assert decoder.cache.capacity == max(CHUNK, -(-longest // CHUNK) * CHUNK) < grown
    while decoder.rows:
        for update in decoder.step():
            tokens[update.handle] += update.tokens
    assert all(tokens[handle] == references[handle][2] for handle in tokens)


def test_at_most_one_host_read_per_step_for_the_whole_batch(embedded, references, monkeypatch):
    decoder = BatchDecoder(embedded.model, load_drafter_for(embedded, None), TreeShape(3, 4, 8))
    for handle, (ids, *_) in enumerate(references[:4]):
        decoder.add(handle, Request(ids, DecodingOptions(max_tokens=10)))
    decoder.step()  # admits the four (a read each: its first token) and verifies them once
    assert len(decoder.rows) == 4
    reads = count_host_reads(monkeypatch)
    steps = 0
    while decoder.rows:
        decoder.step()
        steps += 1
    assert steps >= 3
    assert sum(reads.values()) <= steps, reads


def test_joins_prefilled_together_are_admitted_with_one_host_read(embedded, references, monkeypatch):
    """A burst of joins (a server's first requests) drafts its first trees together: one read
    for every first token and tree size, not one a row."""
    decoder = BatchDecoder(embedded.model, load_drafter_for(embedded, None), TreeShape(3, 4, 8))
    for handle, (ids, *_) in enumerate(references[:4]):
        decoder.add(handle, Request(ids, DecodingOptions(max_tokens=10)))
    prefilled = list(decoder.joins.advance(None))
    monkeypatch.setattr(decoder.joins, "advance", lambda pacer: iter(prefilled))
    reads = count_host_reads(monkeypatch)
    updates = decoder.admit()
    assert sum(reads.values()) == 1, reads
    assert {u.handle: u.tokens for u in updates} == {h: references[h][2][:1] for h in range(4)}
    assert len(decoder.rows) == decoder.cache.rows == 4


class TreesPayBelow(StepPolicy):
    """The largest tree every step, paying only in batches of fewer than `rows` rows."""

    def __init__(self, shape: TreeShape, rows: int):
        super().__init__(shape)
        self.rows = rows

    def choose(self, rows: int, ends=None):
        return self.longest

    def drafting_pays(self, rows: int, choice) -> bool:
        return choice is None or rows < self.rows


def test_a_burst_of_joins_turns_trees_drafted_for_fewer_rows_into_a_plain_step(embedded, references):
    """A request alone drafts the tree that pays for one row; when a burst joins it, that tree
    at the batch's new size would cost several plain steps: the step is plain instead, and
    every row still decodes its greedy answer."""
    eos = embedded.tokenizer.eos_token_ids
    shape = TreeShape(3, 4, 8)
    decoder = BatchDecoder(
        embedded.model, load_drafter_for(embedded, None), shape, eos_ids=eos, policy=TreesPayBelow(shape, 4)
    )
    requests = [Request(ids, DecodingOptions(max_tokens=n)) for ids, n, _, _ in references]
    tokens: dict[int, list[int]] = {}
    reasons: dict[int, str] = {}
    decoder.add(0, requests[0])
    steps, cut = 0, 0
    while decoder.busy or steps < 2:
        if steps == 2:
            for handle, request in enumerate(requests[1:], 1):
                decoder.add(handle, request)
        before = len(decoder.rows)
        updates = decoder.admit()
        if before and len(decoder.rows) > before:
            plain = decoder.choice is None and all(row.count == 1 for row in decoder.rows)
            assert plain == (len(decoder.rows) >= 4)
            cut += plain
        for update in [*updates, *decoder.verify()]:
            tokens.setdefault(update.handle, []).extend(update.tokens)
            reasons[update.handle] = update.finish_reason or reasons.get(update.handle)
        steps += 1
    assert cut
    for handle, (_, _, expected, reason) in enumerate(references):
        assert (tokens[handle], reasons[handle]) == (expected, reason), handle


class Recording(StepPolicy):
    """The step policy, recording what each `choose` was told: (rows, ends)."""

    def __init__(self, shape: TreeShape):
        super().__init__(shape)
        self.asked: list[tuple[int, list[int] | None]] = []

    def choose(self, rows: int, ends=None):
        self.asked.append((rows, ends))
        return super().choose(rows, ends)


@pytest.mark.parametrize("backlog", [0, 2])
def test_the_policy_is_told_each_rows_tokens_to_go_only_while_the_batch_drains(embedded, references, backlog):
    """Requests that all joined at once, none waiting: each choice knows every row's tokens to
    go after the step under way (a plain step keeps them in step). With requests waiting to
    take an ending row's place (a server's backlog), it does not: a row that ends early is
    replaced. Either way every row decodes its greedy answer."""
    shape = TreeShape(3, 4, 8)
    policy = Recording(shape)
    decoder = BatchDecoder(
        embedded.model, load_drafter_for(embedded, None), shape, eos_ids=embedded.tokenizer.eos_token_ids, policy=policy
    )
    decoder.backlog = backlog
    requests = [Request(ids, DecodingOptions(max_tokens=n)) for ids, n, _, _ in references]
    results = run_batch(decoder, requests)
    for handle, (_, _, tokens, reason) in enumerate(references):
        assert results[handle] == (tokens, reason), handle
    if backlog:
        assert all(ends is None for _, ends in policy.asked)
        return
    assert policy.asked[0] == (len(requests), [n - 1 for _, n, _, _ in references])  # the burst's first trees
    assert all(ends is not None and len(ends) == rows and min(ends) >= 1 for rows, ends in policy.asked)
    assert any(len(set(ends)) > 1 for _, ends in policy.asked[1:])


def test_answers_of_one_or_two_tokens_in_a_draining_burst_end_at_their_length(embedded, references):
    """A burst whose requests allow 1, 2 and 5 tokens: the one-token answer ends with its first
    token (at admission), and each choice is told at least one token to go for every row (a
    row with none left takes no further step, and an end of 0 would value every step at 0)."""
    shape = TreeShape(3, 4, 8)
    policy = Recording(shape)
    decoder = BatchDecoder(
        embedded.model, load_drafter_for(embedded, None), shape, eos_ids=embedded.tokenizer.eos_token_ids, policy=policy
    )
    limits = [1, 2, 5]
    requests = [Request(ids, DecodingOptions(max_tokens=n)) for (ids, *_), n in zip(references, limits)]
    results = run_batch(decoder, requests)
    for handle, (n, (_, _, tokens, _)) in enumerate(zip(limits, references)):
        assert results[handle] == (tokens[:n], "length"), handle
    assert policy.asked[0][1] == [1, 1, 4]
    assert all(min(ends) >= 1 for _, ends in policy.asked)


def test_a_draining_bursts_tokens_to_go_stop_at_the_context():
    """A request allowing more tokens than the model's context has room for after its prompt
    ends there ("length"), and the policy is told the room, not the request's max_tokens."""
    small = random_model(
        tiny_config(vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64, max_position_embeddings=12), seed=11
    )
    shape = TreeShape(2, 3, 2)
    policy = Recording(shape)
    decoder = BatchDecoder(small, random_drafter(TINY_VOCAB, 32, seed=5), shape, policy=policy)
    requests = [
        Request(TINY_PROMPT, DecodingOptions(max_tokens=100)),
        Request(OTHER_PROMPT, DecodingOptions(max_tokens=3)),
    ]
    results = run_batch(decoder, requests)
    room = 12 - len(TINY_PROMPT)
    assert [len(tokens) for tokens, _ in results.values()] == [room, 3]
    assert results[0][1] == "length"
    assert policy.asked[0] == (2, [room - 1, 2])


def test_stateful_drafters_keep_a_session_per_row_and_ignore_the_policy(embedded):
    eagle = random_eagle(49152, 576, 9, 3).for_target(embedded.model, "smollm2")
    decoder = BatchDecoder(embedded.model, eagle, TreeShape(3, 4, 8), policy=policy_for(TreeShape(3, 4, 8)))
    for handle, text in enumerate(MORE_PROMPTS[:3]):
        decoder.add(handle, Request(encode_prompt(embedded.tokenizer, text), DecodingOptions(max_tokens=8)))
    decoder.step()
    sessions = [row.session for row in decoder.rows]
    assert len(sessions) == 3 and len({id(s) for s in sessions}) == 3 and decoder.policy is None


OTHER_PROMPT = [2, 4]  # a shorter prompt in the same batch: rows of different lengths


SAMPLED_DRAFTERS = {
    "rnn": lambda: random_drafter(TINY_VOCAB, 32, seed=5),
    "eagle": lambda: random_eagle(TINY_VOCAB, 32, 4, 2, seed=3),
    "draft-llm": lambda: DraftLLM(TINY),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, temperature, switching",
    [("rnn", 1.0, False), ("rnn", 0.7, False), ("rnn", 0.7, True), ("eagle", 0.7, False), ("draft-llm", 1.0, False)],
)
def test_sampled_rows_have_the_llm_distribution_each_from_its_own_seed(kind, temperature, switching):
    drafter = SAMPLED_DRAFTERS[kind]()
    policy = ScriptedPolicy(TreeShape(2, 3, 2)) if switching else None
    random.seed(8)  # unseeded rows (a seed would keep the served shape) draw the same in every run
    decoder = BatchDecoder(TINY, drafter, TreeShape(2, 3, 2), lookup=False, policy=policy)
    rounds, seqs = 375, 3
    counts = {tuple(TINY_PROMPT): Counter(), tuple(OTHER_PROMPT): Counter()}
    accepted_drafts = 0
    cells = set()
    for r in range(rounds):
        prompts = [TINY_PROMPT, OTHER_PROMPT] * 4
        requests = [
            Request(p, DecodingOptions(max_tokens=seqs, temp=temperature, seed=None if switching else 8 * r + i))
            for i, p in enumerate(prompts)
        ]
        finished = {}
        for handle, (tokens, _) in run_batch(decoder, requests, stats=finished).items():
            counts[tuple(prompts[handle])][tuple(tokens)] += 1
        accepted_drafts += sum(sum(s.accepted_per_step) - s.steps for s in finished.values())
        cells.update(c for s in finished.values() for c in s.tree_cells)
    assert accepted_drafts > rounds  # the tree walk, not just the LLM's own token, was exercised
    if policy is not None:  # the batch ran plain steps (1 cell) and trees of several shapes
        assert {1, 2, 3, 4, 6} <= cells, cells
    n = 4 * rounds
    for prompt, observed in counts.items():
        probs = exact_sequence_probabilities(temperature, prompt)
        assert sum(observed.values()) == n
        assert chi_square_p_value(observed, probs, n) > 1e-3, prompt
        assert chi_square_p_value(observed, exact_sequence_probabilities(temperature * 2, prompt), n) < 1e-6


def test_each_row_draws_from_its_own_seed():
    """Rows with the same prompt and seed sample the same answer in one batch, and other
    seeds draw other answers (one global generator would give the twins different ones)."""
    drafter = random_drafter(TINY_VOCAB, 32, seed=5)
    seeds = [77, 1, 77, 2, 3, 4]
    requests = [Request(TINY_PROMPT, DecodingOptions(max_tokens=8, temp=1.0, seed=s)) for s in seeds]
    results = run_batch(BatchDecoder(TINY, drafter, TreeShape(2, 3, 2), lookup=False), requests)
    assert results[0] == results[2]
    assert len({tuple(results[h][0]) for h in (0, 1, 3, 4, 5)}) > 2


def test_the_readmes_batch_example_runs_and_matches_generate(capsys):
    import ast
    import re
    from pathlib import Path

    from redrafter_mlx.api import generate, load

    section = (Path(__file__).parent.parent / "README.md").read_text().split("## Serving", 1)[1]
    code = next(block for block in re.findall(r"```python\n(.*?)```", section, re.S) if "BatchDecoder" in block)
    exec(compile(code, "README.md", "exec"), {})
    printed = ast.literal_eval(capsys.readouterr().out.strip())
    pipeline = load("smollm2-135m")
    shape = pipeline.plan().shape
    tree = dict(beam_width=shape.beam_width, beam_length=shape.beam_length, search_width=shape.search_width)
    assert printed == {
        h: generate(pipeline, text, max_tokens=48, **tree)
        for h, text in enumerate(["Name three rivers.", "What is RoPE?"])
    }


def test_an_eos_just_past_max_tokens_ends_the_answer_at_its_length():
    """A step that accepts the last allowed token and an EOS after it: plain decoding stops at
    max_tokens before it draws the EOS, so the answer ends with "length", not "stop"."""
    assert answer_part([5, 6, 0], {0}, room=2) == ([5, 6], False)
    assert answer_part([5, 6, 0], {0}, room=3) == ([5, 6], True)
    assert answer_part([5, 0, 7], {0}, room=1) == ([5], False)


def test_a_keyed_draw_of_a_position_does_not_depend_on_how_many_are_drawn():
    """A tree is padded to its batch's longest: position i must draw the same token from the
    same key whatever the padding (MLX's own draws depend on the shape drawn)."""
    scores = mx.random.normal((12, 50), key=mx.random.key(3))
    for seed in range(10):
        sample = DecodingOptions(temp=1.0).sampler(mx.random.key(seed))
        full = sample(scores).tolist()
        assert sample(scores[:5]).tolist() == full[:5] and sample(scores[:1]).tolist() == full[:1]


def test_a_seeded_row_answers_beside_other_rows_what_it_answers_alone():
    drafter = random_drafter(TINY_VOCAB, 32, seed=5)

    def answers(requests: list[Request]) -> dict:
        return run_batch(BatchDecoder(TINY, drafter, TreeShape(4, 4, 4), lookup=False), requests)

    others = [Request([4, 1, 2, 3, 0, 1], DecodingOptions(max_tokens=12)), Request([2], DecodingOptions(max_tokens=9))]
    for seed in range(12):
        seeded = Request(TINY_PROMPT, DecodingOptions(max_tokens=8, temp=1.0, seed=seed))
        assert answers([seeded, *others])[0] == answers([seeded])[0], seed
