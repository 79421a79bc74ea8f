"""The tree step every decoder runs (`decoding.tree_step`): one row over a `KVCache` (as
`generate_redrafter` runs it) and the same rows together over a `BatchKVCache` (as
`BatchDecoder` runs them) verify and accept alike, and the kept keys/values continue the
answer as a sequential pass would."""

from __future__ import annotations

import mlx.core as mx

from redrafter_mlx.decoding.tree_step import Kept, keep_accepted, verify_trees
from redrafter_mlx.models.cache import BatchKVCache
from redrafter_mlx.models.llm import prefill
from redrafter_mlx.sampling import greedy
from redrafter_mlx.verify.tree_attention import TreeLayout, tree_layout

from .helpers import random_model, tiny_config

MODEL = random_model(tiny_config())
PROMPTS = [[5, 17, 230, 4], [9, 9, 41, 300, 12, 7, 88, 1000, 3], [77]]


def greedy_continuation(tokens: list[int], n: int) -> list[int]:
    """The next n greedy tokens after `tokens`, by plain sequential passes."""
    out = []
    for _ in range(n):
        logits = MODEL.logits(MODEL(mx.array([tokens + out]), MODEL.make_cache()))[0, -1]
        out.append(int(mx.argmax(logits).item()))
    return out


def trees_for(prompt: list[int]) -> tuple[int, list[int], mx.array]:
    """A root (the guaranteed token after `prompt`), the 4 tokens greedy decoding emits next,
    and three beams of 4 from the root: the first misses at its first draft, the second holds
    the greedy continuation (so its path is not in front of the block), the third shares the
    second's first draft, then misses."""
    root, *greedy_next = greedy_continuation(prompt, 5)
    wrong = (greedy_next[0] + 1) % 1000
    beams = [
        [root, wrong, 11, 12],
        [root, *greedy_next[:3]],
        [root, greedy_next[0], (greedy_next[1] + 1) % 1000, 13],
    ]
    return root, greedy_next, mx.array(beams, mx.int32)


def prefilled(prompt: list[int]):
    cache = MODEL.make_cache()
    prefill(MODEL, mx.array(prompt, mx.uint32), cache)
    return cache


def test_one_row_and_a_batch_verify_alike_and_keep_what_a_sequential_pass_would():
    roots, expected, rows = zip(*(trees_for(p) for p in PROMPTS))
    beams = mx.stack(rows)
    layout = TreeLayout.combine(lambda *a: mx.stack(a), *(tree_layout(b) for b in rows))
    size = int(layout.count.max().item())
    batch = BatchKVCache(len(MODEL.layers))
    batch.append([prefilled(p) for p in PROMPTS])
    together = verify_trees(MODEL, batch, beams, layout, size, [greedy] * len(PROMPTS))
    read_together = Kept.read(mx.concatenate(together.reads()).tolist(), len(PROMPTS), 4)
    for b, prompt in enumerate(PROMPTS):
        single = prefilled(prompt)
        one_row = TreeLayout.combine(lambda a, b=b: a[b : b + 1], layout)
        alone = verify_trees(MODEL, single, beams[b : b + 1], one_row, size, [greedy])
        count = int(layout.count[b].item())
        assert mx.abs(alone.logits[0, :count] - together.logits[b, :count]).max().item() < 1e-4
        kept = Kept.read(mx.concatenate(alone.reads()).tolist(), 1, 4)
        assert kept.tokens[0] == read_together.tokens[b] == list(expected[b])
        assert kept.accepted == [3] and kept.paths[0][0] == 0 and kept.paths[0] != [0, 1, 2, 3]
        keep_accepted(single, alone.paths, kept)
        assert single.length == len(prompt) + 4
        # The next token attends over the kept (gathered) keys: as after a sequential pass.
        following = MODEL.logits(MODEL(mx.array([[expected[b][-1]]]), single))[0, -1]
        sequence = [*prompt, roots[b], *expected[b]]
        sequential = MODEL.logits(MODEL(mx.array([sequence]), MODEL.make_cache()))[0, -1]
        assert mx.abs(following - sequential).max().item() < 1e-4
    keep_accepted(batch, together.paths, read_together)
    assert batch.lengths == [len(p) + 4 for p in PROMPTS]
