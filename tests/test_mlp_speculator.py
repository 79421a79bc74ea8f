"""The MLP speculator kind: upstream checkpoints convert exactly, bad ones fail in one line
writing nothing, and decoding with it is exact (greedy identity, sampled distribution)."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import torch
from mlx_lm.sample_utils import make_sampler

from redrafter_mlx.decoding.loop import generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.beam_search import beam_search
from redrafter_mlx.drafting.kinds.mlp_speculator import MLPSpeculator
from redrafter_mlx.drafting.kinds.mlp_speculator import convert as convert_mlp_speculator
from redrafter_mlx.drafting.kinds.mlp_speculator import is_upstream as is_mlp_speculator_checkpoint
from redrafter_mlx.drafting.kinds.mlp_speculator import load as load_mlp_speculator
from redrafter_mlx.drafting.kinds.mlp_speculator import save as save_mlp_speculator
from redrafter_mlx.drafting.registry import load_drafter_folder
from redrafter_mlx.errors import DrafterLoadError, TargetExists
from redrafter_mlx.tuning import DraftPlan

from .helpers import (
    SEQ_LEN,
    SPECULATOR,
    TINY,
    TINY_PROMPT,
    chi_square_p_value,
    collect,
    exact_sequence_probabilities,
    random_speculator,
    sample_counts,
    write_speculator_upstream,
)

EMB, INNER, VOCAB, N = SPECULATOR


def upstream_state(folder: Path) -> tuple[Path, dict]:
    file = next(folder.glob("*.bin"))
    return file, torch.load(file, weights_only=True)


CASES = [(False, False, "hf-bin"), (False, True, "fms-pt"), (True, False, "hf-safetensors"), (True, True, "hf-bin")]


@pytest.mark.parametrize("tie, scale, layout", CASES)
def test_converted_checkpoint_has_the_upstream_logits(tmp_path, tie, scale, layout):
    model = write_speculator_upstream(tmp_path / "src", tie, scale, layout)
    llm = {"vocab_size": VOCAB, "hidden_size": EMB}
    out = convert_mlp_speculator(tmp_path / "src", tmp_path / "out", dtype=mx.float32, llm_config=llm)
    assert is_mlp_speculator_checkpoint(tmp_path / "src") and is_mlp_speculator_checkpoint(out)
    speculator = load_drafter_folder(out, mx.float32)
    assert isinstance(speculator, MLPSpeculator) and speculator.max_beam_length == N + 1
    stored = mx.load(str(out / "model.safetensors"))
    assert len(stored) == (6 if tie else 5 * N)  # tied: emb.0 proj.0 proj.1 head.0 ln.0.{weight,bias}

    hidden = torch.randn(2, 1, EMB) * 3
    tokens = torch.randint(0, VOCAB, (2, N))
    with torch.no_grad():
        expected = [x.numpy() for x in model(hidden, tokens)]
    state, step = speculator.draft_steps(mx.array(hidden.numpy()), None)
    for depth in range(N):
        state, logits = step(state, mx.array(tokens[:, depth : depth + 1].numpy()), depth)
        np.testing.assert_allclose(np.array(logits), expected[depth], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="at most 3 tokens"):
        step(state, mx.zeros((2, 1), mx.int32), N)


def _drop(state: dict) -> None:
    del state["speculator.head.1.weight"]


def _extra(state: dict) -> None:
    state["speculator.head.3.weight"] = torch.zeros(VOCAB, INNER)


def _shape(state: dict) -> None:
    state["speculator.proj.0.weight"] = torch.zeros(INNER, INNER)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (_drop, "missing key 'head.1.weight'"),
        (_extra, "unexpected key 'head.3.weight'"),
        (_shape, "shape mismatch for 'proj.0.weight'"),
    ],
)
def test_bad_checkpoint_fails_in_one_line_and_writes_nothing(tmp_path, mutate, message):
    write_speculator_upstream(tmp_path / "src", False, False, "hf-bin")
    file, state = upstream_state(tmp_path / "src")
    mutate(state)
    torch.save(state, file)
    with pytest.raises(DrafterLoadError, match=message) as error:
        convert_mlp_speculator(tmp_path / "src", tmp_path / "out", dtype=mx.float32)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["src"]


def test_tied_copies_that_differ_are_refused(tmp_path):
    write_speculator_upstream(tmp_path / "src", True, False, "hf-bin")
    file, state = upstream_state(tmp_path / "src")
    state["speculator.emb.2.weight"] = state["speculator.emb.2.weight"] + 1
    torch.save(state, file)
    with pytest.raises(DrafterLoadError, match="tie_weights is set but emb.0.weight, emb.1.weight, emb.2.weight"):
        convert_mlp_speculator(tmp_path / "src", tmp_path / "out", dtype=mx.float32)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "llm, message",
    [
        ({"vocab_size": VOCAB + 1, "hidden_size": EMB}, "vocab_size is 40 but the model's is 41"),
        ({"vocab_size": VOCAB, "hidden_size": 32}, "hidden_size is 24 but the model's is 32"),
    ],
)
def test_sizes_are_checked_against_the_llm(tmp_path, llm, message):
    write_speculator_upstream(tmp_path / "src", False, True, "fms-pt")
    with pytest.raises(DrafterLoadError, match=message):
        convert_mlp_speculator(tmp_path / "src", tmp_path / "out", dtype=mx.float32, llm_config=llm)
    assert not (tmp_path / "out").exists()


def test_existing_output_is_replaced_only_with_force(tmp_path):
    write_speculator_upstream(tmp_path / "src", True, True, "hf-bin")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(TargetExists):
        convert_mlp_speculator(tmp_path / "src", tmp_path / "out", dtype=mx.float32)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    convert_mlp_speculator(tmp_path / "src", tmp_path / "out", dtype=mx.bfloat16, force=True)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors"]
    assert load_mlp_speculator(tmp_path / "out", mx.bfloat16).head[0].weight.dtype == mx.bfloat16


def test_loader_checks_keys_and_detection_rejects_other_folders(tmp_path):
    speculator = random_speculator(EMB, INNER, VOCAB, N)
    save_mlp_speculator(speculator, tmp_path / "ours")
    weights = mx.load(str(tmp_path / "ours" / "model.safetensors"))
    del weights["ln.2.bias"]
    mx.save_safetensors(str(tmp_path / "ours" / "model.safetensors"), weights)
    with pytest.raises(DrafterLoadError, match="missing key 'ln.2.bias'"):
        load_mlp_speculator(tmp_path / "ours")
    (tmp_path / "rnn").mkdir()
    (tmp_path / "rnn" / "config.json").write_text(json.dumps({"model_type": "recurrent_drafting_drafter"}))
    assert not is_mlp_speculator_checkpoint(tmp_path / "rnn")
    assert not is_mlp_speculator_checkpoint(tmp_path / "absent")


def test_greedy_decoding_matches_autoregressive(embedded, embedded_runs):
    speculator = random_speculator(576, 256, 49152, 4, tie_weights=True, scale_input=True)
    speculator = speculator.for_target(embedded.model, "smollm2")
    eos = embedded.tokenizer.eos_token_ids
    for beam_width, beam_length in [(1, 5), (3, 4), (4, 3)]:
        for ids, expected, reason in embedded_runs:
            tokens, stats = collect(
                generate_redrafter(
                    embedded.model,
                    speculator,
                    ids,
                    DraftPlan(TreeShape(beam_width, beam_length, beam_width)),
                    max_tokens=20,
                    eos_ids=eos,
                )
            )
            assert tokens == expected and stats.finish_reason == reason
    with pytest.raises(DrafterLoadError, match="vocab 49152 / hidden 576, but tiny has vocab 5 / hidden 32"):
        speculator.for_target(TINY, "tiny")
    with pytest.raises(ValueError, match="beam length of at most 5"):
        beam_search(speculator, None, mx.zeros((576,)), mx.array(1), 2, 6)


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_decoding_has_the_llm_distribution(temperature):
    probs = exact_sequence_probabilities(temperature)
    speculator = random_speculator(32, 16, 5, 2, seed=5, scale_input=True)
    n = 1500
    mx.random.seed(4321)
    counts, accepted_drafts = sample_counts(
        lambda: generate_redrafter(
            TINY,
            speculator,
            TINY_PROMPT,
            DraftPlan(TreeShape(2, 3, 2)),
            max_tokens=SEQ_LEN,
            sampler=make_sampler(temp=temperature),
        ),
        n,
    )
    assert sum(counts.values()) == n
    assert accepted_drafts > n // 4  # drafted tokens were really accepted
    assert chi_square_p_value(counts, probs, n) > 1e-3
    # Control: the same test rejects a wrong distribution (a different temperature).
    assert chi_square_p_value(counts, exact_sequence_probabilities(temperature * 2), n) < 1e-6
