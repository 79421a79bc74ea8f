"""EAGLE: the converted upstream layout against an independent torch forward, its drafting
against plain forwards, load errors, greedy identity and exact sampling."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import make_sampler

from redrafter_mlx.beam_search import beam_search, top_k_log_probs
from redrafter_mlx.decoding import generate_redrafter
from redrafter_mlx.drafter import DrafterLoadError
from redrafter_mlx.drafting.eagle import Eagle, convert_eagle, is_eagle_checkpoint, load_eagle
from redrafter_mlx.drafting.kinds import load_drafter_folder

from .conftest import collect, random_model, tiny_config
from .test_redrafter import (
    SEQ_LEN, TINY, TINY_PROMPT, TINY_VOCAB, chi_square_p_value, exact_sequence_probabilities, sample_counts,
)

torch = pytest.importorskip("torch")

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
          "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": 64, "max_position_embeddings": 256,
          "hidden_act": "silu", "torch_dtype": "float16"}


def upstream_state_dict(config: dict, seed: int = 0) -> dict[str, "torch.Tensor"]:
    """Random weights under the upstream key names (cnets1.py `Model`)."""
    g = torch.Generator().manual_seed(seed)
    h, inter, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = h // config["num_attention_heads"] * config["num_key_value_heads"]

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    state = {"embed_tokens.weight": rand(v, h), "fc.weight": rand(h, 2 * h), "fc.bias": rand(h)}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        state |= {p + "self_attn.q_proj.weight": rand(h, h), p + "self_attn.k_proj.weight": rand(kv, h),
                  p + "self_attn.v_proj.weight": rand(kv, h), p + "self_attn.o_proj.weight": rand(h, h),
                  p + "mlp.gate_proj.weight": rand(inter, h), p + "mlp.up_proj.weight": rand(inter, h),
                  p + "mlp.down_proj.weight": rand(h, inter), p + "post_attention_layernorm.weight": 1 + rand(h)}
        if i:
            state[p + "input_layernorm.weight"] = 1 + rand(h)
    return state


def torch_eagle(state: dict, config: dict, tokens: list[int], features: np.ndarray) -> np.ndarray:
    """The upstream forward restated: fc(cat(embed, feature)), Llama layers (the first without
    its input norm), rotate-half RoPE at positions 0..T-1, causal attention; no final norm."""
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    eps, theta = config["rms_norm_eps"], config["rope_theta"]

    def norm(x, w):
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    x = torch.tensor(features, dtype=torch.float32)
    t, h = x.shape
    dim = h // heads
    x = torch.cat([state["embed_tokens.weight"][torch.tensor(tokens)], x], -1) @ state["fc.weight"].T + state["fc.bias"]
    inv = 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)
    angles = torch.arange(t).float()[:, None] * inv[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def rope(q):
        half = q.shape[-1] // 2
        return q * cos + torch.cat([-q[..., half:], q[..., :half]], -1) * sin

    causal = torch.ones(t, t).tril().bool()
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        a = norm(x, state[p + "input_layernorm.weight"]) if i else x
        q = (a @ state[p + "self_attn.q_proj.weight"].T).view(t, heads, dim).transpose(0, 1)
        k = (a @ state[p + "self_attn.k_proj.weight"].T).view(t, kv_heads, dim).transpose(0, 1)
        v = (a @ state[p + "self_attn.v_proj.weight"].T).view(t, kv_heads, dim).transpose(0, 1)
        k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
        scores = (rope(q) @ rope(k).transpose(1, 2)) / dim**0.5
        attn = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + attn.transpose(0, 1).reshape(t, h) @ state[p + "self_attn.o_proj.weight"].T
        m = norm(x, state[p + "post_attention_layernorm.weight"])
        gate = m @ state[p + "mlp.gate_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * (m @ state[p + "mlp.up_proj.weight"].T)) @ state[p + "mlp.down_proj.weight"].T
    return x.numpy()


@pytest.fixture
def upstream(tmp_path):
    folder = tmp_path / "EAGLE-tiny"
    folder.mkdir()
    state = upstream_state_dict(CONFIG)
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
    np.testing.assert_allclose(np.array(ours), torch_eagle(state, CONFIG, tokens, features), atol=1e-4)


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("layers.0.mlp.up_proj.weight"), "missing key 'layers.0.mlp.up_proj.weight'"),
    (lambda s: s.__setitem__("fc.weight", torch.zeros(32, 48)), "shape mismatch for 'fc.weight'"),
    (lambda s: s.__setitem__("layers.0.input_layernorm.weight", torch.ones(32)), "unexpected key 'layers.0.input_layernorm"),
])
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
    beams, scores = beam_search(session, None, hidden[-1], mx.array(block[kept - 1]), 3, 4, top_k=5)
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


def random_eagle(vocab: int, hidden: int, heads: int, kv_heads: int, seed: int = 0) -> Eagle:
    mx.random.seed(seed)
    eagle = Eagle({"model_type": "eagle_drafter", "hidden_size": hidden, "intermediate_size": 2 * hidden,
                   "num_attention_heads": heads, "num_key_value_heads": kv_heads, "num_hidden_layers": 1,
                   "rms_norm_eps": 1e-5, "vocab_size": vocab, "rope_theta": 10000.0})
    mx.eval(eagle.parameters())
    return eagle


@pytest.mark.parametrize("width, length", [(1, 5), (3, 4), (4, 3)])
def test_greedy_eagle_matches_autoregressive(embedded, embedded_runs, width, length):
    eagle = random_eagle(49152, 576, 9, 3).for_target(embedded.model, "smollm2")
    for ids, expected, reason in embedded_runs:
        tokens, stats = collect(generate_redrafter(embedded.model, eagle, ids, beam_width=width, beam_length=length,
                                                   max_tokens=20, eos_ids=embedded.tokenizer.eos_token_ids))
        assert tokens == expected and stats.finish_reason == reason


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_eagle_has_the_llm_distribution(temperature):
    probs = exact_sequence_probabilities(temperature)
    eagle = random_eagle(TINY_VOCAB, 32, 4, 2, seed=3)
    n = 1500
    mx.random.seed(99)
    counts, accepted_drafts = sample_counts(
        lambda: generate_redrafter(TINY, eagle, TINY_PROMPT, beam_width=2, beam_length=3, max_tokens=SEQ_LEN,
                                   sampler=make_sampler(temp=temperature), lookup=False),
        n,
    )
    assert accepted_drafts > n // 4
    assert chi_square_p_value(counts, probs, n) > 1e-3
    assert chi_square_p_value(counts, exact_sequence_probabilities(temperature * 2), n) < 1e-6
