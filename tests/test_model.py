"""The Llama forward verifies a packed token tree exactly like sequential per-branch runs."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models import llama as mlx_lm_llama
from mlx_lm.models.cache import make_prompt_cache

from redrafter_mlx.models import llama
from redrafter_mlx.models.llama import Model, ModelArgs

from .helpers import FLOAT32_RTOL, TREE_TOKENS, ancestors, random_model, relative_error, tiny_config


def verify_tree_vs_branches(model: Model, prefix: list[int], tree_tokens: list[int]) -> float:
    """The `relative_error` of one packed tree pass against per-branch sequential passes."""
    n = len(prefix)
    cache = model.make_cache()
    model(mx.array([prefix]), cache)
    cache.commit(n)
    depth = [len(ancestors(i)) - 1 for i in range(len(tree_tokens))]
    tree_mask = np.zeros((len(tree_tokens), n + len(tree_tokens)), dtype=bool)
    tree_mask[:, :n] = True
    for i in range(len(tree_tokens)):
        tree_mask[i, [n + a for a in ancestors(i)]] = True
    hidden = model(
        mx.array([tree_tokens]),
        cache,
        positions=mx.array([[n + d for d in depth]]),
        mask=mx.array(tree_mask)[None, None],
    )
    packed = model.logits(hidden)[0]
    paths = [ancestors(leaf) for leaf in (2, 3, 5)]
    references = [
        model.logits(model(mx.array([prefix + [tree_tokens[i] for i in path]]), model.make_cache()))[0, n:]
        for path in paths
    ]
    return relative_error(mx.concatenate([packed[mx.array(path)] for path in paths]), mx.concatenate(references))


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tie_word_embeddings": True},
        {"num_key_value_heads": 4, "attention_bias": True, "mlp_bias": True},
        {
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        },
    ],
    ids=["gqa", "tied", "mha-bias", "llama3-rope"],
)
def test_packed_tree_logits_match_sequential_branches_on_random_llama(overrides):
    model = random_model(tiny_config(vocab_size=512, **overrides))
    assert verify_tree_vs_branches(model, [5, 6, 7, 8, 9, 10, 3], TREE_TOKENS) <= FLOAT32_RTOL


def test_packed_tree_logits_match_sequential_branches_on_embedded_model(embedded):
    prefix = embedded.tokenizer.encode("The quick brown fox jumps over")
    tree = embedded.tokenizer.encode(" the lazy dog cat sleeps")[:6]
    assert verify_tree_vs_branches(embedded.model, prefix, tree) <= FLOAT32_RTOL


def test_forward_matches_mlx_lm_llama_with_cache():
    """Same weights in mlx-lm's Llama: identical logits for prefill and incremental steps."""
    config = tiny_config(vocab_size=300)
    ours = random_model(config)
    reference = mlx_lm_llama.Model(ModelArgs.from_dict(config))
    reference.load_weights(list(tree_flatten(ours.parameters())))
    tokens = mx.random.randint(0, 300, (1, 10), key=mx.random.key(1))
    ref_cache, cache = make_prompt_cache(reference), ours.make_cache()
    for start, end in [(0, 7), (7, 8), (8, 10)]:
        expected = reference(tokens[:, start:end], cache=ref_cache)
        got = ours.logits(ours(tokens[:, start:end], cache))
        cache.commit(end - start)
        assert mx.abs(expected - got).max().item() <= 1e-5


def test_compiled_short_blocks_match_the_plain_forward_and_see_new_weights(monkeypatch):
    """Decoding and verification blocks run compiled layers, prefill-length ones do not: both
    give the same states, and the compiled layers read weights loaded after their first trace."""
    config = tiny_config(vocab_size=300)
    model = random_model(config)
    prefix = mx.array([[5, 6, 7, 8, 9]])
    tree, positions = mx.array([TREE_TOKENS]), mx.array([[5, 6, 7, 7, 6, 7]])
    mask = mx.concatenate([mx.ones((6, 5), mx.bool_), mx.array(np.tril(np.ones((6, 6), bool)))], axis=1)[None, None]

    def forward(limit: int) -> mx.array:
        monkeypatch.setattr(llama, "COMPILED_MAX_TOKENS", limit)
        cache = model.make_cache()
        model(prefix, cache)
        cache.commit(prefix.shape[1])
        step = model(tree[:, :1], cache)  # one token, contiguous positions
        return mx.concatenate([step, model(tree, cache, positions, mask)], axis=1)

    compiled, plain = forward(64), forward(0)
    assert mx.abs(compiled - plain).max().item() <= 1e-6
    model.load_weights(list(tree_flatten(random_model(config, seed=1).parameters())))
    reloaded = forward(64)
    assert mx.abs(reloaded - forward(0)).max().item() <= 1e-6
    assert mx.abs(reloaded - compiled).max().item() > 1e-2
