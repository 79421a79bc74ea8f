"""Training DFlash (`training/kinds/dflash.py`): each training block is the block the decoder
drafts (its context, positions and mask), the loss is the weighted block-wise cross-entropy
restated in NumPy, a trained drafter accepts drafts while decoding stays the LLM's own, a run
resumes exactly, and `redrafter train --kind dflash` writes a folder every command loads."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from scipy.special import logsumexp

from redrafter_mlx.drafting.kinds.dflash import DFlash
from redrafter_mlx.drafting.registry import load_drafter_folder
from redrafter_mlx.training import train_drafter
from redrafter_mlx.training.dataset import tapped_features
from redrafter_mlx.training.kinds.dflash import block_batch, block_loss, record_spans, target_layer_ids
from redrafter_mlx.training.start import make_drafter

from .helpers import (
    TRAINING_VOCAB,
    assert_refused,
    assert_resume_matches,
    greedy_records,
    greedy_tokens_per_step,
    random_model,
    randomised,
    tiny_config,
    train_cli,
    train_config,
)

BLOCK = 5


@pytest.fixture(scope="module")
def llm():
    """A 4-layer tiny Llama (a one-layer DFlash reads the output of its layer 2) and its data."""
    config = tiny_config(vocab_size=TRAINING_VOCAB, num_hidden_layers=4)
    model = random_model(config, seed=0)
    return model, config


def arrays(model, config, recipe, records):
    features = tapped_features(model, records, recipe.feature_layers(config))
    return recipe.arrays(records, [features[r.id] for r in records])


def dflash_cfg(**kw):
    return train_config(
        **({"kind": "dflash", "layers": 1, "block_size": BLOCK, "anchors": 3, "batch_positions": 96} | kw)
    )


def test_default_taps_are_z_labs():
    """One tap per draft layer, evenly over layers 1 .. n - 3 (the middle one for one layer)."""
    assert target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert target_layer_ids(30, 1) == [15] and target_layer_ids(30, 3) == [1, 14, 27]


def test_a_training_block_is_the_block_the_decoder_drafts(llm):
    """Each block of a training batch (several answers, several anchors each, padded) has the
    outputs a decoding session gives for that answer's prompt and accepted tokens up to its
    anchor: the context is every earlier position, the block starts at the anchor's token."""
    model, config = llm
    cfg = dflash_cfg()
    dflash = randomised(make_drafter(cfg.recipe, config, None, model=model))
    records = greedy_records(model, 3, seed=4, length=12)
    data = arrays(model, config, cfg.recipe, records)
    spans = record_spans(data[1])
    features, tokens, positions, seen, *_ = block_batch(data, spans, 3, np.random.default_rng(0), 7.0)
    tokens = mx.where(tokens < 0, dflash.mask_token_id, tokens)
    trained = np.array(dflash.blocks_hidden(model.embedding(tokens), positions, features, seen))
    checked = 0
    for r, (start, _) in enumerate(spans):
        record = records[r]
        sequence = record.prompt_ids + record.response_ids
        for j in range(tokens.shape[1] // BLOCK):
            anchor = int(positions[r, j * BLOCK].item())
            if anchor == 0:  # a padding block
                continue
            context = mx.array(data[0][start : start + anchor].astype(np.float32))
            session = dflash.open(model, sequence[:anchor], context)
            session.stage(mx.zeros((1,), mx.int32), context[-1:], mx.array(1))
            expected = session.block_hidden(mx.array([[sequence[anchor]]]), model.embedding)[0]
            np.testing.assert_allclose(trained[r, j * BLOCK : (j + 1) * BLOCK], np.array(expected), atol=1e-4)
            checked += 1
    assert checked >= 6


def test_the_loss_is_the_decayed_block_cross_entropy(llm):
    """Position k >= 1 of a block is scored on the token k after its anchor with weight
    exp(-(k - 1) / gamma); the loss is their weighted mean (recomputed from the logits)."""
    model, config = llm
    cfg = dflash_cfg(loss_decay=2.0)
    dflash = randomised(make_drafter(cfg.recipe, config, None, model=model))
    records = greedy_records(model, 4, seed=5, length=10)
    data = arrays(model, config, cfg.recipe, records)
    batch = block_batch(data, record_spans(data[1]), 2, np.random.default_rng(1), 2.0)
    features, tokens, positions, seen, index, targets, weights = batch
    hidden = dflash.blocks_hidden(
        model.embedding(mx.where(tokens < 0, dflash.mask_token_id, tokens)), positions, features, seen
    )
    logits = np.array(model.logits(hidden), np.float64).reshape(-1, TRAINING_VOCAB)
    flat_tokens, flat_positions = np.array(tokens).reshape(-1), np.array(positions).reshape(-1)
    expected_num = expected_den = 0.0
    for flat in range(len(logits)):
        k = flat % BLOCK
        block_start = flat - k
        anchor = flat_positions[block_start]
        r = flat // tokens.shape[1]
        record = records[r]
        sequence = record.prompt_ids + record.response_ids
        if k == 0 or flat_tokens[block_start] < 0 or anchor + k >= len(sequence):
            continue
        weight = np.exp(-(k - 1) / 2.0)
        expected_num += weight * (logsumexp(logits[flat]) - logits[flat, sequence[anchor + k]])
        expected_den += weight
    assert expected_den > 0 and len(np.array(index)) > 10
    np.testing.assert_allclose(block_loss(dflash, model, batch).item(), expected_num / expected_den, rtol=1e-4)


def test_trained_dflash_accepts_drafts_and_decodes_the_llms_own_text(llm, tmp_path):
    """Trained 150 steps on the LLM's own greedy answers, the loss falls; the folder it writes
    loads by its model_type and, decoding held-out prompts greedily, gives the LLM's output
    while accepting drafts (an untrained drafter's are rejected)."""
    model, config = llm
    cfg = dflash_cfg(steps=150, lr=1e-2, batch_positions=400, eval_every=150, save_dtype="float16")
    train_recs, held_recs = greedy_records(model, 80, seed=0), greedy_records(model, 8, seed=1)
    train, held = arrays(model, config, cfg.recipe, train_recs), arrays(model, config, cfg.recipe, held_recs)
    out = tmp_path / "drafter"
    train_drafter(model, config, train, held, tmp_path / "work", cfg, out_dir=out)
    losses = json.loads((tmp_path / "work" / "checkpoint" / "train_state.json").read_text())["losses"]
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5]), losses

    loaded = load_drafter_folder(out, mx.float32)
    assert type(loaded) is DFlash and loaded.config == cfg.recipe.drafter_config(config)
    assert not (out / "ngrams.safetensors").exists()

    untrained = greedy_tokens_per_step(model, make_drafter(cfg.recipe, config, None, seed=3, model=model), held_recs)
    trained = greedy_tokens_per_step(model, loaded, held_recs)
    assert trained > 1.3 and trained > untrained + 0.2, (trained, untrained)


def test_a_dflash_run_resumes_from_its_checkpoint_exactly(llm, tmp_path, monkeypatch):
    model, config = llm
    cfg = dflash_cfg(steps=8, checkpoint_every=4)
    data = arrays(model, config, cfg.recipe, greedy_records(model, 12, seed=2, length=12))
    folder = assert_resume_matches(monkeypatch, model, config, data, tmp_path, cfg)
    assert type(load_drafter_folder(folder, mx.float32)) is DFlash


def test_cli_trains_dflash_and_refuses_what_does_not_fit(tmp_path, write_tiny_folder):
    """`--kind dflash` with its flags writes a DFlash folder; other kinds' flags, its flags with
    another kind, and taps the LLM does not have are one line each, with nothing written."""
    two_layers = train_cli(tmp_path, write_tiny_folder(tmp_path / "small"))
    assert_refused(
        two_layers,
        tmp_path,
        [
            (["--kind", "dflash", "--predict", "2"], "--predict is for --kind redrafter, medusa or mlp-speculator"),
            (["--kind", "dflash", "--soft-targets", "0.5"], "--soft-targets is for --kind redrafter, medusa, "),
            (["--block-size", "4"], "--block-size is for --kind dflash, not redrafter"),
            (["--kind", "eagle", "--anchors", "2"], "--anchors is for --kind dflash, not eagle"),
            (["--kind", "dflash"], "a 3-layer DFlash reads layers [1, 0, -1], but the model has 2 layers"),
        ],
    )
    run = train_cli(tmp_path, write_tiny_folder(tmp_path / "model", tiny_config(num_hidden_layers=4)))
    args = ("--kind", "dflash", "--layers", "1", "--block-size", "4", "--anchors", "2", "--steps", "2")
    result = run("dflash", *args, "--eval-every", "2", "--mask-token-id", "5")
    assert result.exit_code == 0, result.output
    dflash = load_drafter_folder(tmp_path / "dflash", mx.float32)
    assert type(dflash) is DFlash and (dflash.block_size, dflash.mask_token_id, dflash.layer_ids) == (4, 5, (2,))
