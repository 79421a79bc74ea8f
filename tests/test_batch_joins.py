"""How requests join a batch: prompts prefilled a budget per step while rows decode, the
prompt cache (a hit decodes what a miss decodes), and the batch policy's choice of tree."""

from __future__ import annotations

import pytest

from redrafter_mlx.decoding.batch import BatchDecoder, Request
from redrafter_mlx.decoding.loop import generate_ar
from redrafter_mlx.decoding.prompt_cache import PromptCache
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.tuning.batch_policy import BatchPolicy, batch_options

from .helpers import MORE_PROMPTS, collect, run_batch

SHAPE = TreeShape(3, 4, 8)


def greedy(embedded, ids: list[int], n: int, eos_ids=None) -> list[int]:
    eos_ids = embedded.tokenizer.eos_token_ids if eos_ids is None else eos_ids
    tokens, _ = collect(generate_ar(embedded.model, ids, max_tokens=n, eos_ids=eos_ids))
    return tokens


def test_a_long_prompt_joins_a_budget_per_step_while_the_rows_keep_decoding(embedded):
    drafter = load_drafter_for(embedded, None)
    decoder = BatchDecoder(embedded.model, drafter, SHAPE, prefill_budget=8)  # no EOS: the short row runs on
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
    assert steps_to_join == -(-len(long) // 8)  # the budget, 8 prompt tokens per step
    for handle, (rest, _) in run_batch(decoder, []).items():
        tokens[handle] += rest
    assert tokens["long"] == greedy(embedded, long, 12, eos_ids=())


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


def test_the_policy_drafts_nothing_where_trees_cost_more_than_they_gain():
    policy = BatchPolicy(batch_options(SHAPE))
    assert policy.options[0] is None and SHAPE in policy.options
    for rows, option in [(8, o) for o in policy.options for _ in range(4)]:  # a pass costs 3 ms per token
        packed = 1 if option is None else option.max_packed
        policy.observe(option, rows, [0] * rows, (40 + 3 * rows * packed) / 1e3, option)
    assert policy.best(8) is None  # nothing accepted: every tree loses
    for option in policy.options[1:]:
        for _ in range(40):  # every draft accepted
            policy.observe(option, 1, [option.beam_length - 1], 0.1, None)
    assert policy.best(1) == max(policy.options[1:], key=lambda o: o.beam_length / (40 + 3 * o.max_packed))


@pytest.mark.parametrize("rows", [1, 8])
def test_the_policy_probes_every_option_before_it_chooses(rows):
    policy = BatchPolicy(batch_options(SHAPE))
    runs = [policy.choose(rows) for _ in range(3 * len(policy.options))]
    assert runs == [o for o in policy.options for _ in range(3)]
