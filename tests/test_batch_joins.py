"""How requests join a batch: prompts prefilled a budget per step while rows decode, the
prompt cache (a hit decodes what a miss decodes), and the batch policy's choice of tree."""

from __future__ import annotations

import mlx.core as mx
import pytest

from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.decoding.joining import MIN_CHUNK, PADDING, RIDING_SHARE, Join, Joins, Pacer, similar_lengths
from redrafter_mlx.decoding.loop import generate_ar
from redrafter_mlx.decoding.prompt_cache import PromptCache
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.models import llm
from redrafter_mlx.models.cache import BatchKVCache, KVCache
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_prompt

from .helpers import FLOAT32_RTOL, MORE_PROMPTS, collect, relative_error, run_batch

SHAPE = TreeShape(3, 4, 8)


def greedy(embedded, ids: list[int], n: int, eos_ids=None) -> list[int]:
    eos_ids = embedded.tokenizer.eos_token_ids if eos_ids is None else eos_ids
    tokens, _ = collect(generate_ar(embedded.model, ids, max_tokens=n, eos_ids=eos_ids))
    return tokens


def test_a_long_prompt_joins_a_budget_per_step_while_the_rows_keep_decoding(embedded):
    drafter = load_drafter_for(embedded, None)
    # No EOS: the short row runs on. Untimed: every chunk is the budget, whatever the steps take.
    decoder = BatchDecoder(embedded.model, drafter, SHAPE, prefill_budget=8, timed=False)
    short = encode_prompt(embedded.tokenizer, MORE_PROMPTS[0])
    long = encode_prompt(embedded.tokenizer, " ".join(MORE_PROMPTS))
    assert len(long) > 40
    decoder.add("short", Request(short, DecodingOptions(max_tokens=40)))
    decoder.step()  # nothing ran: the short prompt is prefilled whole and starts
    decoder.add("long", Request(long, DecodingOptions(max_tokens=12)))
    tokens = {"short": [], "long": []}
    steps_to_join = 0
    while "long" not in [row.handle for row in decoder.rows]:
        updates = decoder.step()
        assert any(u.handle == "short" and u.tokens for u in updates)  # the running row got tokens every step
        for u in updates:
            tokens[u.handle] += u.tokens
        steps_to_join += 1
    # The budget, 8 prompt tokens per step, each chunk in the short row's verify pass; the
    # join is admitted by the step after its last chunk.
    assert decoder.riding and steps_to_join == -(-len(long) // 8) + 1
    for handle, (rest, _) in run_batch(decoder, []).items():
        tokens[handle] += rest
    assert tokens["long"] == greedy(embedded, long, 12, eos_ids=())


def test_the_pacer_measures_the_rows_step_by_the_median_of_its_own_size():
    """A step that traced a compiled function (10x) does not set the rows' step time, and
    rows that left make it cheaper: a step of half the tokens is measured by its own steps
    where there are some, else scaled from the nearest size."""
    pacer = Pacer(256)
    for seconds in [0.10, 0.11, 1.0, 0.09, 0.10]:
        pacer.stepped(seconds, rows_tokens=16, carried=0, paced=0)
    assert pacer.step_s(16) == pytest.approx(0.10)
    assert pacer.step_s(8) == pytest.approx(0.05)  # none at 8 tokens yet: scaled down from 16
    assert pacer.step_s(32) == pytest.approx(0.10)  # never scaled up: a step has a fixed cost
    for seconds in [0.07, 0.06, 0.07]:
        pacer.stepped(seconds, rows_tokens=8, carried=0, paced=0)
    assert pacer.step_s(8) == pytest.approx(0.07)
    assert pacer.step_s(16) == pytest.approx(0.10)


def test_the_pacer_sizes_chunks_by_what_they_add_to_the_rows_step():
    """Steps that cost 0.10 s plus 5 ms a riding prompt token: chunks settle where they add
    RIDING_SHARE of the step, and stay there through a slow step and a chat turn."""
    step, per_token = 0.10, 0.005
    pacer = Pacer(256)
    for _ in range(3):
        pacer.stepped(step, rows_tokens=16, carried=0, paced=0)
    sizes = []
    for _ in range(20):
        chunk = pacer.tokens()
        pacer.stepped(step + per_token * chunk, rows_tokens=16, carried=chunk, paced=chunk)
        sizes.append(pacer.tokens())
    target = RIDING_SHARE * step / per_token  # 7 tokens
    assert all(b <= 1.5 * a + MIN_CHUNK for a, b in zip(sizes, sizes[1:]))  # 1.5x a step at most
    assert abs(sizes[-1] - target) <= MIN_CHUNK
    pacer.stepped(3 * step, rows_tokens=16, carried=sizes[-1], paced=sizes[-1])  # one slow step: smoothed
    assert pacer.tokens() >= sizes[-1] / 2
    settled = pacer.tokens()
    pacer.stepped(1.0, rows_tokens=16, carried=60, paced=0)  # a chat turn rode whole: it says nothing of chunks
    assert pacer.tokens() == settled and pacer.step_s(16) == pytest.approx(step)  # nor of the rows' step
    crowded = Pacer(256)
    crowded.stepped(step, rows_tokens=16, carried=0, paced=0)
    crowded.weigh(waiting=8, rows=2)  # four prompts wait per row: chunks may add four times as much
    for _ in range(20):
        chunk = crowded.tokens()
        crowded.stepped(step + per_token * chunk, rows_tokens=16, carried=chunk, paced=chunk)
    assert abs(crowded.tokens() - 4 * target) <= MIN_CHUNK


def test_a_long_join_starts_at_its_share_of_the_rows_tokens():
    pacer = Pacer(256)
    pacer.stepped(0.10, rows_tokens=40, carried=0, paced=0)
    assert pacer.tokens() == 64  # no join has been sized yet
    pacer.begin(rows_tokens=40)
    assert pacer.tokens() == int(RIDING_SHARE * 40) // MIN_CHUNK * MIN_CHUNK
    untimed = Pacer(32, timed=False)
    untimed.begin(rows_tokens=40)
    assert untimed.tokens() == 32  # ranks of a distributed server cut prompts alike


def test_chat_turns_ride_whole_and_a_long_prompt_in_paced_chunks(embedded):
    """Within the budget, prompts oldest first: each short one whole, then one chunk of the
    long one, sized by the pacer, and nothing after it."""
    joins = Joins(embedded.model)
    for handle, n in (("a", 20), ("b", 30), ("long", 300), ("c", 10)):
        joins.add(handle, list(range(1, n + 1)))
    pacer = Pacer(128)
    chunks, paced = joins.next_chunks(pacer, rows=8, rows_tokens=40)
    sizes = [(join.handle, segment.tokens.shape[1]) for join, segment in chunks]
    first = int(RIDING_SHARE * 40) // MIN_CHUNK * MIN_CHUNK
    assert sizes == [("a", 20), ("b", 30), ("long", first)] and paced == first
    for join, segment in chunks:  # as if the pass ran: commit what rode
        joins.rode(join, mx.zeros((1, segment.tokens.shape[1], 8)))
    assert [j.handle for j in joins.prefilled()] == ["a", "b"]
    chunks, paced = joins.next_chunks(pacer, rows=8, rows_tokens=40)
    assert [(j.handle, s.tokens.shape[1]) for j, s in chunks] == [("long", first)] and paced == first
    assert chunks[0][1].positions.tolist() == [list(range(first, 2 * first))]


def test_a_prompt_cache_hit_decodes_what_a_miss_decodes(embedded):
    drafter = load_drafter_for(embedded, None)
    cache = PromptCache(1 << 30)
    decoder = BatchDecoder(embedded.model, drafter, SHAPE, prompt_cache=cache)
    first = encode_prompt(embedded.tokenizer, MORE_PROMPTS[1])
    (answer, _), *_ = run_batch(decoder, [Request(first, DecodingOptions(max_tokens=24))]).values()
    assert len(cache) == 1
    second = first + answer + encode_prompt(embedded.tokenizer, MORE_PROMPTS[2])  # the next turn
    stats = {}
    (hit, _), *_ = run_batch(decoder, [Request(second, DecodingOptions(max_tokens=24))], stats=stats).values()
    assert stats[0].cached_tokens == len(first) + len(answer) - 1  # all but the answer's last token
    assert cache.hits == 1
    assert hit == greedy(embedded, second, 24)  # what prefilling the whole conversation gives
    assert len(cache) == 1  # the longer conversation superseded the first


def test_conversations_resumed_together_share_one_pass_and_decode_what_misses_decode(embedded, monkeypatch):
    drafter = load_drafter_for(embedded, None)
    decoder = BatchDecoder(embedded.model, drafter, SHAPE, prompt_cache=PromptCache(1 << 30))
    firsts = [encode_prompt(embedded.tokenizer, MORE_PROMPTS[i]) for i in (1, 3)]
    answers = [
        tokens
        for tokens, _ in run_batch(decoder, [Request(f, DecodingOptions(max_tokens=12)) for f in firsts]).values()
    ]
    turn = encode_prompt(embedded.tokenizer, MORE_PROMPTS[2])
    seconds = [first + answer + turn for first, answer in zip(firsts, answers)]
    passes = []
    run_together = embedded.model.run_together
    monkeypatch.setattr(embedded.model, "run_together", lambda *a, **k: passes.append(a) or run_together(*a, **k))
    for handle, prompt in enumerate(seconds):
        decoder.add(handle, Request(prompt, DecodingOptions(max_tokens=16)))
    admitted = {update.handle: update.tokens for update in decoder.admit()}
    assert sorted(admitted) == [0, 1] and len(passes) == 1  # both new turns in one pass
    assert [segment.tokens.shape[1] for segment in passes[0][0]] == [len(turn) + 1] * 2  # the answers' last token too
    rest = run_batch(decoder, [])
    for handle, prompt in enumerate(seconds):
        assert admitted[handle] + rest[handle][0] == greedy(embedded, prompt, 16)


def test_the_prompt_cache_stays_within_its_bytes_least_recently_used_first(embedded):
    first, second = list(range(100, 130)), list(range(200, 230))
    again = first[:20] + list(range(300, 310))  # starts like the first: a hit that refreshes it
    probe = PromptCache(1 << 30)
    run_batch(BatchDecoder(embedded.model, None, prompt_cache=probe), [Request(first, DecodingOptions(max_tokens=4))])
    cache = PromptCache(int(2.5 * probe.bytes))  # room for two such entries, not three
    decoder = BatchDecoder(embedded.model, None, prompt_cache=cache)
    for ids in (first, second, again):
        run_batch(decoder, [Request(ids, DecodingOptions(max_tokens=4))])
        assert cache.bytes <= cache.max_bytes
    assert cache.hits == 1
    assert [key[:30] for key in cache.entries] == [tuple(first), tuple(again)]  # the second, least recently used, went


def test_prompts_prefilled_together_hold_what_each_prefilled_alone_holds(embedded, monkeypatch):
    """Shared passes, rows padded on the right and cut in chunks (made short here so that one
    prompt spans three), leave each prompt the keys, values and states of its own prefill."""
    monkeypatch.setattr(llm, "PREFILL_CHUNK", 16)
    model = embedded.model
    prompts = [encode_prompt(embedded.tokenizer, p) for p in MORE_PROMPTS[:3]]
    prompts[1] = prompts[1][:5]
    prompts[2] = (prompts[2] * 3)[:40]
    together = llm.prefill_together(model, prompts, every_state=True)
    for ids, (cache, states) in zip(prompts, together):
        alone = KVCache(len(model.layers))
        expected = llm.prefill(model, mx.array(ids, mx.uint32), alone)
        assert cache.length == alone.length == len(ids)
        assert states.shape == (len(ids), model.args.hidden_size)
        assert relative_error(states[-len(expected) :], expected) < FLOAT32_RTOL
        for a, b in zip(cache.keys + cache.values, alone.keys + alone.values):
            assert relative_error(a[..., : len(ids), :], b[..., : len(ids), :]) < FLOAT32_RTOL
    last = llm.prefill_together(model, prompts)
    assert [s.shape[0] for _, s in last] == [1, 1, 1]
    assert all(mx.allclose(s, t[-1:]).item() for (_, s), (_, t) in zip(last, together))


def test_prompts_share_a_pass_only_with_prompts_of_similar_length():
    lengths = [40, 7, 9, 41, 300, 8, 44]
    joins = [Join(i, [1] * n, KVCache(1), 0) for i, n in enumerate(lengths)]
    groups = similar_lengths(joins)
    assert sorted(j.handle for g in groups for j in g) == list(range(len(lengths)))
    for group in groups:
        sizes = [len(j.prompt) for j in group]
        assert len(group) * max(sizes) <= (1 + PADDING) * sum(sizes)
    assert [[len(j.prompt) for j in g] for g in groups] == [[7, 8, 9], [40, 41, 44], [300]]


def test_segments_run_together_give_what_each_gives_alone(embedded):
    """A verify block of two rows and a joining prompt's chunk in ONE pass: each segment's
    hidden states and keys/values are those of its own forward."""
    model = embedded.model
    prompts = [encode_prompt(embedded.tokenizer, p) for p in MORE_PROMPTS[:3]]

    def rows_and_join():
        rows, singles = BatchKVCache(len(model.layers)), []
        for ids in prompts[:2]:
            singles.append(KVCache(len(model.layers)))
            llm.prefill(model, mx.array(ids, mx.uint32), singles[-1])
        rows.append(singles)
        join = KVCache(len(model.layers))
        llm.prefill(model, mx.array(prompts[2][:20], mx.uint32), join)
        return rows, join

    tree = mx.array([[[True, False, False], [True, True, False], [True, False, True]]] * 2)
    tokens = mx.array([[5, 6, 7], [8, 9, 10]], mx.uint32)
    chunk = mx.array([prompts[2][20:32]], mx.uint32)

    def segments(rows, join):
        positions = rows.offsets()[:, None] + mx.array([0, 1, 1], mx.int32)[None]
        chunk_positions = mx.arange(20, 32, dtype=mx.int32)[None]
        return [
            llm.Segment(tokens, rows, positions, rows.attention_mask(tree)),
            llm.Segment(chunk, join, chunk_positions),
        ]

    rows, join = rows_and_join()
    together = model.run_together(segments(rows, join))
    alone_rows, alone_join = rows_and_join()
    alone = [model(s.tokens, s.cache, s.positions, s.mask) for s in segments(alone_rows, alone_join)]
    for a, b in zip(together, alone):
        assert a.shape == b.shape and relative_error(a, b) < FLOAT32_RTOL
    for a, b in zip(rows.keys + join.keys, alone_rows.keys + alone_join.keys):
        assert relative_error(a, b) < FLOAT32_RTOL


@pytest.mark.parametrize("joins", [1, 2])
def test_joins_that_rode_whole_in_the_last_rows_step_are_admitted(embedded, joins):
    """The rows' last step carried the joins' whole prompts and then every row ended: the next
    step starts the joins from their prefilled caches (it once prefilled them again from an
    empty chunk, or ran them together as segments of no tokens: HTTP 500s under load)."""
    prompts = [encode_prompt(embedded.tokenizer, p) for p in MORE_PROMPTS[: 1 + joins]]
    decoder = BatchDecoder(embedded.model, None, prefill_budget=256, timed=False)  # plain: a token a step
    decoder.add("row", Request(prompts[0], DecodingOptions(max_tokens=3)))
    decoder.step()  # admitted with its first token, then its second
    for i, prompt in enumerate(prompts[1:]):
        decoder.add(i, Request(prompt, DecodingOptions(max_tokens=4)))
    last = decoder.step()  # the joins ride whole in the row's third and last step
    assert [u.finish_reason for u in last] == ["length"] and not decoder.rows
    assert all(join.cache.length == len(join.prompt) for join in decoder.joins.waiting)
    answers = run_batch(decoder, [])
    for i, prompt in enumerate(prompts[1:]):
        assert answers[i] == (greedy(embedded, prompt, 4), "length")
