"""Drafter: reference parameter names, state/head math, save/load, quantization, float16."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten

from redrafter_mlx.drafting.beam_search import beam_search
from redrafter_mlx.drafting.kinds.rnn import DrafterConfig, RecurrentDrafter, untie_head
from redrafter_mlx.drafting.kinds.rnn import load as load_drafter
from redrafter_mlx.drafting.kinds.rnn import save as save_drafter
from redrafter_mlx.drafting.kinds.rnn_heads import quantize_drafter, trim_head
from redrafter_mlx.errors import DrafterLoadError


@pytest.fixture(autouse=True)
def seeded_mlx_rng():
    """RecurrentDrafter(config) draws its init from MLX's global RNG: pin it so no test depends on
    which tests ran before it."""
    mx.random.seed(0)


def shapes(drafter: RecurrentDrafter) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in tree_flatten(drafter.parameters())}


def inputs(hidden: int, seed: int = 0, rows: int = 3) -> tuple[mx.array, mx.array, mx.array]:
    """h (rows, hidden), state (rows, hidden), embedding table (64, hidden)."""
    rng = np.random.default_rng(seed)
    h, s = rng.normal(0, 1, (2, rows, hidden)).astype(np.float32)
    return mx.array(h), mx.array(s), mx.array(rng.normal(0, 1, (64, hidden)).astype(np.float32))


def test_parameter_names_match_reference_checkpoints():
    config = DrafterConfig(vocab_size=100, hidden_size=8, num_draft_layers=2, exit_dim=12, rnn=True)
    assert shapes(RecurrentDrafter(config)) == {
        "input_proj.weight": (12, 16),
        "input_proj.bias": (12,),
        "lm_head.0.linear.weight": (12, 12),
        "lm_head.0.linear.bias": (12,),
        "lm_head.1.linear.weight": (12, 12),
        "lm_head.1.linear.bias": (12,),
        "lm_head.2.weight": (100, 12),
        "rnn_u.weight": (8, 8),
        "rnn_u.bias": (8,),
        "rnn_w.weight": (8, 8),
    }
    # exit_dim = 2 * hidden (the reference default) has no input_proj; rnn=False no rnn_*.
    plain = DrafterConfig(vocab_size=100, hidden_size=8, num_draft_layers=1)
    assert sorted(shapes(RecurrentDrafter(plain))) == [
        "lm_head.0.linear.bias",
        "lm_head.0.linear.weight",
        "lm_head.1.weight",
    ]


def test_tied_and_trimmed_heads_replace_the_vocabulary_weight():
    trimmed = DrafterConfig(vocab_size=100, hidden_size=8, num_draft_layers=1, token_subset_size=30)
    assert shapes(RecurrentDrafter(trimmed))["lm_head.1.weight"] == (30, 16)
    assert shapes(RecurrentDrafter(trimmed))["token_ids"] == (30,)
    tied = DrafterConfig(vocab_size=100, hidden_size=8, num_draft_layers=1, head_tied=True, token_subset_size=30)
    tied_shapes = shapes(RecurrentDrafter(tied))
    assert "lm_head.1.weight" not in tied_shapes
    assert tied_shapes["head_proj.weight"] == (8, 16)
    assert "token_ids" not in dict(tree_flatten(RecurrentDrafter(tied).trainable_parameters()))


def test_config_reads_reference_config_json():
    reference = {
        "architectures": ["Drafter"],
        "model_type": "recurrent_drafting_drafter",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "exit_dim": 8192,
        "num_draft_layers": 2,
        "rnn": True,
        "emb_norm": False,
        "rms_norm_eps": 1e-6,
        "num_lookback_tokens": -1,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.40.0",
    }
    config = DrafterConfig.from_dict(reference)
    assert (config.vocab_size, config.hidden_size, config.exit_dim, config.num_draft_layers, config.rnn) == (
        32000,
        4096,
        8192,
        2,
        True,
    )
    assert not config.has_input_proj and config.head_size == 32000
    assert DrafterConfig.from_dict(config.to_dict()) == config
    assert DrafterConfig.from_dict({**reference, "exit_dim": -1}).exit_dim == 8192


def test_state_update_follows_reference_formulas():
    """rnn: s' = silu(rnn_w E + rnn_u s + b_u) (rnn_w on the embedding, rnn_u on the state);
    otherwise s' = E + s."""
    h, s, table = inputs(8)
    e = table[:3]
    rnn = RecurrentDrafter(DrafterConfig(vocab_size=64, hidden_size=8, num_draft_layers=1, rnn=True))
    pre = e @ rnn.rnn_w.weight.T + s @ rnn.rnn_u.weight.T + rnn.rnn_u.bias
    np.testing.assert_allclose(rnn.update_state(s, e), pre * mx.sigmoid(pre), atol=1e-6)
    plain = RecurrentDrafter(DrafterConfig(vocab_size=64, hidden_size=8, num_draft_layers=1))
    np.testing.assert_allclose(plain.update_state(s, e), e + s, atol=1e-6)
    assert plain.init_state((2, 3)).shape == (2, 3, 8) and not plain.init_state((2,)).any().item()


def test_head_input_is_hidden_then_state():
    h, s, _ = inputs(8)
    drafter = RecurrentDrafter(DrafterConfig(vocab_size=64, hidden_size=8, num_draft_layers=0))
    expected = mx.concatenate([h, s], axis=-1) @ drafter.lm_head[0].weight.T
    np.testing.assert_allclose(drafter.logits(h, s), expected, atol=1e-5)


def test_trimmed_head_maps_back_to_vocabulary_ids():
    token_ids = mx.array([7, 3, 60, 12], dtype=mx.int32)
    config = DrafterConfig(vocab_size=64, hidden_size=8, num_draft_layers=1, token_subset_size=4)
    drafter = RecurrentDrafter(config, token_ids=token_ids)
    assert drafter.vocab_ids(mx.array([[0, 2], [3, 1]])).tolist() == [[7, 60], [12, 3]]
    untrimmed = RecurrentDrafter(DrafterConfig(vocab_size=64, hidden_size=8, num_draft_layers=1))
    assert untrimmed.vocab_ids(mx.array([5, 9], dtype=mx.uint32)).tolist() == [5, 9]


def test_tied_head_scores_the_embedding_rows_of_its_tokens():
    h, s, table = inputs(8)
    token_ids = mx.array([5, 0, 33], dtype=mx.int32)
    config = DrafterConfig(vocab_size=64, hidden_size=8, num_draft_layers=1, head_tied=True, token_subset_size=3)
    drafter = RecurrentDrafter(config, token_ids=token_ids)
    expected = drafter.head_proj(drafter.features(h, s)) @ table[token_ids].T
    np.testing.assert_allclose(drafter.logits(h, s, table), expected, atol=1e-5)
    layer = nn.Embedding(64, 8)
    layer.weight = table
    np.testing.assert_allclose(drafter.logits(h, s, layer), expected, atol=1e-5)
    with pytest.raises(ValueError, match="tied"):
        drafter.logits(h, s)


@pytest.mark.parametrize("trimmed", [False, True])
def test_tied_head_accepts_a_quantized_llm_embedding(trimmed):
    h, s, table = inputs(64)
    config = DrafterConfig(
        vocab_size=64,
        hidden_size=64,
        num_draft_layers=1,
        head_tied=True,
        token_subset_size=10 if trimmed else None,
    )
    drafter = RecurrentDrafter(config, token_ids=mx.arange(50, 60) if trimmed else None)
    layer = nn.Embedding(64, 64)
    layer.weight = table
    quantized = nn.QuantizedEmbedding.from_embedding(layer, group_size=32, bits=4)
    dequantized = mx.dequantize(quantized.weight, quantized.scales, quantized.biases, 32, 4)
    np.testing.assert_allclose(drafter.logits(h, s, quantized), drafter.logits(h, s, dequantized), rtol=1e-4, atol=1e-4)


def test_untie_head_is_the_same_function():
    h, s, table = inputs(64)
    layer = nn.Embedding(64, 64)
    layer.weight = table
    config = DrafterConfig(
        vocab_size=64, hidden_size=64, num_draft_layers=1, rnn=True, head_tied=True, token_subset_size=40
    )
    tied = RecurrentDrafter(config, token_ids=mx.arange(63, 23, -1))
    untied = untie_head(tied, layer)
    assert not untied.config.head_tied and untied.config.token_subset_size == 40
    np.testing.assert_allclose(untied.logits(h, s), tied.logits(h, s, layer), rtol=1e-4, atol=1e-4)
    a, _ = beam_search(tied, layer, h[0], mx.array(5), 3, 4)
    b, _ = beam_search(untied, layer, h[0], mx.array(5), 3, 4)
    assert a.tolist() == b.tolist()
    # No float rows to fold into with a quantized embedding: the tied head is kept, and runs.
    quantized = nn.QuantizedEmbedding.from_embedding(layer, group_size=32, bits=8)
    kept = untie_head(tied, quantized)
    assert kept is tied and kept.logits(h, s, quantized).shape == (3, 40)


@pytest.mark.parametrize("tied", [False, True])
def test_trimmed_head_scores_its_tokens_as_the_full_head_did(tmp_path, tied):
    h, s, table = inputs(8)
    config = DrafterConfig(vocab_size=64, hidden_size=8, num_draft_layers=2, rnn=True, head_tied=tied)
    full = RecurrentDrafter(config)
    kept = np.random.default_rng(2).permutation(64)[:24]
    trimmed = trim_head(full, kept)
    assert trimmed.config == DrafterConfig(**{**config.to_dict(), "token_subset_size": 24})
    np.testing.assert_array_equal(trimmed.token_ids, kept)
    want = np.array(full.logits(h, s, table))[:, kept]
    np.testing.assert_allclose(trimmed.logits(h, s, table), want, rtol=1e-6, atol=1e-6)
    beams, _ = beam_search(trimmed, table, h[0], mx.array(5), 4, 5, draft_top_k=8)
    assert set(np.array(beams[:, 1:]).ravel()) <= set(kept.tolist())
    loaded = load_drafter(save_drafter(trimmed, tmp_path / "d"))  # token_ids travel with it
    np.testing.assert_array_equal(loaded.logits(h, s, table), trimmed.logits(h, s, table))


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([], "non-empty 1-D integer"),
        ([[1, 2]], "non-empty 1-D integer"),
        ([1.0, 2.0], "non-empty 1-D integer"),
        ([3, 64], r"distinct ids in \[0, 64\)"),
        ([-1, 3], r"distinct ids in \[0, 64\)"),
        ([3, 5, 3], r"distinct ids in \[0, 64\)"),
    ],
)
def test_trim_head_refuses_ids_that_are_not_distinct_vocabulary_ids(ids, message):
    drafter = RecurrentDrafter(DrafterConfig(vocab_size=64, hidden_size=8, num_draft_layers=1))
    with pytest.raises(ValueError, match=message):
        trim_head(drafter, np.array(ids))


def test_a_trimmed_head_trims_to_some_of_its_own_tokens_and_a_quantized_one_not_at_all():
    ids = np.random.default_rng(4).permutation(64)[:20].astype(np.int32)
    config = DrafterConfig(vocab_size=64, hidden_size=32, num_draft_layers=1, token_subset_size=20)
    trimmed = RecurrentDrafter(config, token_ids=mx.array(ids))
    narrower = trim_head(trimmed, ids[[3, 0, 7]])
    np.testing.assert_array_equal(np.array(narrower.token_ids), ids[[3, 0, 7]])
    h, s, _ = inputs(32)
    np.testing.assert_allclose(np.array(narrower.logits(h, s)), np.array(trimmed.logits(h, s))[:, [3, 0, 7]], atol=1e-6)
    outside = np.setdiff1d(np.arange(64), ids)[:2]
    with pytest.raises(ValueError, match="trimmed to 20 tokens: it can only keep some of those"):
        trim_head(trimmed, np.concatenate([ids[:2], outside]))
    plain = RecurrentDrafter(DrafterConfig(vocab_size=64, hidden_size=32, num_draft_layers=1))
    quantized = quantize_drafter(plain, 8, 32)
    with pytest.raises(ValueError, match="before quantizing"):
        trim_head(quantized, np.arange(10))


CONFIGS = {
    "reference": dict(num_draft_layers=2, rnn=True, exit_dim=24),
    "trimmed": dict(num_draft_layers=1, rnn=False, token_subset_size=20),
    "tied_trimmed": dict(num_draft_layers=1, rnn=True, head_tied=True, token_subset_size=20),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_save_load_round_trip_gives_identical_logits(tmp_path, name):
    config = DrafterConfig(vocab_size=64, hidden_size=8, **CONFIGS[name])
    token_ids = mx.array(np.random.default_rng(1).permutation(64)[:20].astype(np.int32))
    drafter = RecurrentDrafter(config, token_ids=token_ids if config.token_subset_size else None)
    h, s, table = inputs(8)
    save_drafter(drafter, tmp_path / "d")
    loaded = load_drafter(tmp_path / "d")
    assert loaded.config == config
    np.testing.assert_array_equal(loaded.logits(h, s, table), drafter.logits(h, s, table))
    if config.token_subset_size:
        assert loaded.token_ids.dtype == mx.int32
        np.testing.assert_array_equal(loaded.token_ids, token_ids)


def saved(tmp_path, **overrides) -> tuple:
    """A saved reference-shaped drafter folder and its weights dict, for corruption tests."""
    config = DrafterConfig(vocab_size=64, hidden_size=8, num_draft_layers=1, rnn=True, **overrides)
    folder = save_drafter(RecurrentDrafter(config), tmp_path / "drafter")
    return folder, dict(mx.load(str(folder / "model.safetensors")))


def test_reference_checkpoint_extras_are_ignored(tmp_path):
    """The reference's unused emb_norm.weight loads without error and changes nothing."""
    folder, weights = saved(tmp_path)
    mx.save_safetensors(str(folder / "model.safetensors"), {**weights, "emb_norm.weight": mx.ones((8,))})
    loaded = dict(tree_flatten(load_drafter(folder).parameters()))
    assert loaded.keys() == weights.keys()  # emb_norm.weight dropped, nothing else
    assert all(mx.array_equal(loaded[k], weights[k]) for k in weights)


def test_missing_key_is_named(tmp_path):
    folder, weights = saved(tmp_path)
    del weights["rnn_u.bias"]
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    with pytest.raises(DrafterLoadError, match=r"missing key 'rnn_u.bias' \(config.json implies shape \(8,\)\)"):
        load_drafter(folder)


def test_unexpected_key_is_named(tmp_path):
    folder, weights = saved(tmp_path)
    mx.save_safetensors(str(folder / "model.safetensors"), {**weights, "lm_head.5.weight": mx.zeros((2, 2))})
    with pytest.raises(DrafterLoadError, match=r"unexpected key 'lm_head.5.weight' with shape \(2, 2\)"):
        load_drafter(folder)


def test_shape_mismatch_names_key_and_both_shapes(tmp_path):
    folder, weights = saved(tmp_path)
    weights["lm_head.1.weight"] = mx.zeros((50, 16))
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    pattern = r"shape mismatch for 'lm_head.1.weight': file has \(50, 16\), config.json implies \(64, 16\)"
    with pytest.raises(DrafterLoadError, match=pattern):
        load_drafter(folder)


def test_missing_files_and_bad_configs_are_reported(tmp_path):
    with pytest.raises(DrafterLoadError, match="not a drafter folder"):
        load_drafter(tmp_path / "nowhere")
    folder, _ = saved(tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(DrafterLoadError, match="no model.safetensors.*redrafter convert"):
        load_drafter(folder)
    (folder / "config.json").unlink()
    with pytest.raises(DrafterLoadError, match="no config.json"):
        load_drafter(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 64}))
    with pytest.raises(DrafterLoadError, match="model_type is 'llama'"):
        load_drafter(folder)
    (folder / "config.json").write_text(json.dumps({"vocab_size": 64, "hidden_size": 8}))
    with pytest.raises(DrafterLoadError, match="num_draft_layers"):
        load_drafter(folder)


def test_out_of_range_token_ids_are_rejected(tmp_path):
    folder, weights = saved(tmp_path, token_subset_size=4)
    weights["token_ids"] = mx.array([1, 2, 3, 64], dtype=mx.int32)
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    with pytest.raises(DrafterLoadError, match=r"token_ids.*\[0, 64\)"):
        load_drafter(folder)


def dequantized_copy(quantized: RecurrentDrafter) -> RecurrentDrafter:
    """A float drafter holding the quantized drafter's dequantized weights."""
    weights = dict(tree_flatten(quantized.parameters()))
    for name, m in quantized.named_modules():
        if isinstance(m, nn.QuantizedLinear):
            weights[f"{name}.weight"] = mx.dequantize(m.weight, m.scales, m.biases, m.group_size, m.bits)
            del weights[f"{name}.scales"], weights[f"{name}.biases"]
    float_config = DrafterConfig.from_dict({**quantized.config.to_dict(), "quantization": None})
    return RecurrentDrafter(float_config).load_weights(list(weights.items()))


def relative_error(x: mx.array, reference: mx.array) -> float:
    return float((mx.abs(x - reference).max() / mx.abs(reference).max()).item())


@pytest.mark.parametrize("group_size", [32, 64])
def test_quantized_drafter_round_trips_and_stays_close_to_float(tmp_path, group_size):
    config = DrafterConfig(vocab_size=64, hidden_size=32, num_draft_layers=2, rnn=True, exit_dim=128)
    drafter = RecurrentDrafter(config)
    h, s, table = inputs(32, rows=16)
    float_logits = drafter.logits(h, s)
    float_weights = {k: v for k, v in tree_flatten(drafter.parameters())}

    quantize_drafter(drafter, bits=4, group_size=group_size)
    quantized = {k for k, m in drafter.named_modules() if isinstance(m, nn.QuantizedLinear)}
    # Every Linear whose input width divides into groups is quantized (rnn_*: 32 wide,
    # so they stay float at group 64).
    assert {"input_proj", "lm_head.0.linear", "lm_head.2"} <= quantized
    assert ({"rnn_u", "rnn_w"} <= quantized) == (group_size == 32)
    folder = save_drafter(drafter, tmp_path / "q")
    assert json.loads((folder / "config.json").read_text())["quantization"] == {"group_size": group_size, "bits": 4}

    loaded = load_drafter(folder)
    np.testing.assert_array_equal(loaded.logits(h, s), drafter.logits(h, s))

    # The quantized layers compute exactly what their dequantized weights would ...
    dequantized = dequantized_copy(loaded)
    np.testing.assert_allclose(loaded.logits(h, s), dequantized.logits(h, s), rtol=1e-4, atol=1e-4)
    # ... and stay close to float: the logits' relative error is of the order of the
    # weights' own (measured here, not guessed), summed over the layers on the path.
    weight_error = max(
        relative_error(dict(tree_flatten(dequantized.parameters()))[k], float_weights[k])
        for k in float_weights
        if k.endswith("weight")
    )
    depth = config.num_draft_layers + 2  # input_proj, ResBlocks, head
    logit_error = relative_error(loaded.logits(h, s), float_logits)
    assert 0 < logit_error <= depth * weight_error, (logit_error, weight_error)
    beams, scores = beam_search(loaded, table, h[0], mx.array(3), beam_width=3, beam_length=4)
    assert beams.shape == (3, 4) and bool(mx.all(scores > -1e3).item())


def test_float16_drafter_runs_and_tracks_float32(tmp_path):
    config = DrafterConfig(vocab_size=64, hidden_size=16, num_draft_layers=2, rnn=True, token_subset_size=40)
    folder = save_drafter(RecurrentDrafter(config), tmp_path / "d")
    full, half = load_drafter(folder), load_drafter(folder, dtype=mx.float16)
    assert half.rnn_u.weight.dtype == mx.float16 and half.token_ids.dtype == mx.int32
    h, s, table = inputs(16)
    h16, s16, table16 = (x.astype(mx.float16) for x in (h, s, table))
    logits16 = half.logits(h16, s16)
    assert logits16.dtype == mx.float16
    reference = full.logits(h, s)
    scale = float(mx.abs(reference).max())
    np.testing.assert_allclose(logits16.astype(mx.float32), reference, atol=1e-2 * scale)
    beams, scores = beam_search(half, table16, h16[0], mx.array(3), beam_width=3, beam_length=4)
    assert beams.shape == (3, 4) and bool(mx.all(mx.isfinite(scores)).item())
