"""EAGLE: the converted upstream layout against an independent torch forward, its drafting
against plain forwards, load errors, greedy identity and exact sampling."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import make_sampler

from redrafter_mlx.decoding.loop import generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.beam_search import beam_search, top_k_log_probs
from redrafter_mlx.drafting.kinds.eagle import Eagle
from redrafter_mlx.drafting.kinds.eagle import convert as convert_eagle
from redrafter_mlx.drafting.kinds.eagle import is_upstream as is_eagle_checkpoint
from redrafter_mlx.drafting.kinds.eagle import load as load_eagle
from redrafter_mlx.drafting.registry import load_drafter_folder
from redrafter_mlx.errors import DrafterLoadError
from redrafter_mlx.tuning import DraftPlan

from .helpers import (
    FLOAT32_RTOL,
    SEQ_LEN,
    TINY,
    TINY_PROMPT,
    TINY_VOCAB,
    chi_square_p_value,
    collect,
    eagle_upstream_state,
    exact_sequence_probabilities,
    random_eagle,
    random_model,
    relative_error,
    sample_counts,
    tiny_config,
    torch_eagle,
)

torch = pytest.importorskip("torch")

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "vocab_size": 64,
    "max_position_embeddings": 256,
    "hidden_act": "silu",
    "torch_dtype": "float16",
}


@pytest.fixture
def upstream(tmp_path):
    folder = tmp_path / "EAGLE-tiny"
    folder.mkdir()
    state = eagle_upstream_state(CONFIG)
    torch.save(state, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(CONFIG))
    return folder, state


def test_converted_eagle_matches_the_upstream_forward(upstream, tmp_path):
    folder, state = upstream
    assert is_eagle_checkpoint(folder)
    out = convert_eagle(folder, tmp_path / "eagle", dtype=mx.float32, llm_config={"vocab_size": 64, "hidden_size": 32})
    eagle = load_drafter_folder(out, mx.float32)
    assert isinstance(eagle, Eagle)
    rng = np.random.default_rng(0)
    tokens, features = rng.integers(0, 64, 7).tolist(), rng.normal(size=(7, 32)).astype(np.float32)
    ours = eagle(mx.array([tokens]), mx.array(features[None]), None, 0, "causal")[0]
    assert relative_error(ours, torch_eagle(state, CONFIG, tokens, features)) < FLOAT32_RTOL


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.pop("layers.0.mlp.up_proj.weight"), "missing key 'layers.0.mlp.up_proj.weight'"),
        (lambda s: s.__setitem__("fc.weight", torch.zeros(32, 48)), "shape mismatch for 'fc.weight'"),
        (
            lambda s: s.__setitem__("layers.0.input_layernorm.weight", torch.ones(32)),
            "unexpected key 'layers.0.input_layernorm",
        ),
    ],
)
def test_wrong_upstream_weights_are_one_line_and_write_nothing(upstream, tmp_path, change, message):
    folder, state = upstream
    change(state)
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(DrafterLoadError, match=message) as error:
        convert_eagle(folder, tmp_path / "eagle", dtype=mx.float32)
    assert "\n" not in str(error.value) and not (tmp_path / "eagle").exists()


def test_an_eagle_for_another_model_is_refused(upstream, tmp_path):
    folder, _ = upstream
    with pytest.raises(DrafterLoadError, match="vocab_size is 64 but the model's is 49152"):
        convert_eagle(folder, tmp_path / "eagle", dtype=mx.float32, llm_config={"vocab_size": 49152, "hidden_size": 32})
    assert not (tmp_path / "eagle").exists()
    out = convert_eagle(folder, tmp_path / "eagle", dtype=mx.float32)
    with pytest.raises(DrafterLoadError, match="was built for vocab 64 / hidden 32"):
        load_eagle(out, mx.float32).for_target(random_model(tiny_config()), "tiny")


def test_eagle_beam_scores_equal_plain_forwards(upstream, tmp_path):
    """Each beam's score = its tokens' log-probs when EAGLE re-reads the whole text plainly,
    each drafted token paired with the feature EAGLE guessed at its parent."""
    folder, _ = upstream
    eagle = load_eagle(convert_eagle(folder, tmp_path / "eagle", dtype=mx.float32), mx.float32)
    target = random_model(tiny_config(vocab_size=64, hidden_size=32, intermediate_size=64), seed=2)
    rng = np.random.default_rng(1)
    text = rng.integers(0, 64, 6).tolist()
    hidden = mx.array(rng.normal(size=(6, 32)).astype(np.float32))
    session = eagle.open(target, text, hidden)
    block, kept = [9, 4, 17], 2
    block_features = mx.array(rng.normal(size=(3, 32)).astype(np.float32))
    session.stage(mx.array(block, mx.int32), block_features, mx.array(kept))
    beams, scores = beam_search(session, None, hidden[-1], mx.array(block[kept - 1]), 3, 4, draft_top_k=5)
    pairs_tokens = text[1:] + block[:kept]
    pairs_features = np.concatenate([np.array(hidden[:-1]), np.array(block_features[:kept])])
    for beam, score in zip(np.array(beams).tolist(), np.array(scores).tolist()):
        tokens, features, want = list(pairs_tokens), pairs_features, 0.0
        for d in range(1, 4):
            out = eagle(mx.array([tokens]), mx.array(features[None]), None, 0, "causal")[0, -1]
            values, ids = top_k_log_probs(target.logits(out), 5)
            want += dict(zip(np.array(ids).tolist(), np.array(values).tolist()))[beam[d]]
            tokens, features = tokens + [beam[d]], np.concatenate([features, np.array(out)[None]])
        assert score == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize("width, length", [(1, 5), (3, 4), (4, 3)])
def test_greedy_eagle_matches_autoregressive(embedded, embedded_runs, width, length):
    eagle = random_eagle(49152, 576, 9, 3).for_target(embedded.model, "smollm2")
    for ids, expected, reason in embedded_runs:
        tokens, stats = collect(
            generate_redrafter(
                embedded.model,
                eagle,
                ids,
                DraftPlan(TreeShape(width, length, width)),
                max_tokens=20,
                eos_ids=embedded.tokenizer.eos_token_ids,
            )
        )
        assert tokens == expected and stats.finish_reason == reason


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_eagle_has_the_llm_distribution(temperature):
    probs = exact_sequence_probabilities(temperature)
    eagle = random_eagle(TINY_VOCAB, 32, 4, 2, seed=3)
    n = 1500
    mx.random.seed(99)
    counts, accepted_drafts = sample_counts(
        lambda: generate_redrafter(
            TINY,
            eagle,
            TINY_PROMPT,
            DraftPlan(TreeShape(2, 3, 2), lookup=False),
            max_tokens=SEQ_LEN,
            sampler=make_sampler(temp=temperature),
        ),
        n,
    )
    assert accepted_drafts > n // 4
    assert chi_square_p_value(counts, probs, n) > 1e-3
    assert chi_square_p_value(counts, exact_sequence_probabilities(temperature * 2), n) < 1e-6
