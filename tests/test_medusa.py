"""Medusa drafters: upstream checkpoints converted and checked against a PyTorch forward,
one-line load errors, exact beam search, and exact greedy and sampled decoding.

The PyTorch heads below restate upstream's module (FasterDecoding/Medusa
`medusa/model/medusa_model.py`: `medusa_head`, an nn.ModuleList of
nn.Sequential(ResBlock..., Linear(bias=False))) independently of redrafter_mlx.
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np
import pytest
import torch
from mlx_lm.sample_utils import make_sampler
from torch import nn

from redrafter_mlx.decoding.loop import generate_redrafter
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.beam_search import beam_search
from redrafter_mlx.drafting.kinds.medusa import Medusa
from redrafter_mlx.drafting.kinds.medusa import convert as convert_medusa
from redrafter_mlx.drafting.kinds.medusa import is_upstream as is_medusa_checkpoint
from redrafter_mlx.drafting.kinds.medusa import load as load_medusa
from redrafter_mlx.drafting.kinds.medusa import save as save_medusa
from redrafter_mlx.drafting.registry import load_drafter_folder
from redrafter_mlx.errors import DrafterLoadError, InputError, TargetExists
from redrafter_mlx.tuning import DraftPlan

from .helpers import (
    SEQ_LEN,
    TINY,
    TINY_PROMPT,
    TorchResBlock,
    chi_square_p_value,
    collect,
    exact_sequence_probabilities,
    random_medusa,
    sample_counts,
    write_medusa_upstream,
)

VOCAB, HIDDEN, HEADS = 40, 16, 3
LLM = {"vocab_size": VOCAB, "hidden_size": HIDDEN}


def torch_heads(layers: int, seed: int = 0) -> nn.ModuleList:
    torch.manual_seed(seed)
    return nn.ModuleList(
        nn.Sequential(*[TorchResBlock(HIDDEN) for _ in range(layers)], nn.Linear(HIDDEN, VOCAB, bias=False))
        for _ in range(HEADS)
    )


@pytest.mark.parametrize("fmt, layers", [("pt", 1), ("safetensors", 2), ("pt", 0)])
def test_converted_heads_match_the_torch_forward(tmp_path, fmt, layers):
    heads = torch_heads(layers)
    src = write_medusa_upstream(tmp_path / "upstream", heads.state_dict(), fmt, layers)
    assert is_medusa_checkpoint(src)
    out = convert_medusa(src, tmp_path / "mlx", dtype=mx.float32, llm_config=LLM)
    assert not is_medusa_checkpoint(out)
    assert set(mx.load(str(out / "model.safetensors"))) == set(heads.state_dict())  # upstream's keys
    medusa = load_drafter_folder(out, mx.float32)
    assert isinstance(medusa, Medusa)
    assert (medusa.config.num_heads, medusa.config.num_layers, medusa.max_beam_length) == (HEADS, layers, HEADS + 1)

    context = torch.randn(2, 1, HIDDEN)
    state, step = medusa.draft_steps(mx.array(context.numpy()), None)
    with torch.no_grad():
        for h in range(HEADS):
            state, logits = step(state, mx.zeros((2, 3), mx.int32), h)
            assert state == () and logits.shape == (2, 1, VOCAB)
            np.testing.assert_allclose(np.array(logits), heads[h](context).numpy(), atol=1e-4, rtol=0)
        with pytest.raises(InputError, match=f"{HEADS} heads: beam length at most {HEADS + 1}"):
            step(state, mx.zeros((2, 3), mx.int32), HEADS)


def test_a_weights_file_converts_and_a_saved_drafter_reloads(tmp_path):
    heads = torch_heads(1, seed=3)
    src = write_medusa_upstream(tmp_path / "upstream", heads.state_dict(), "safetensors")
    out = convert_medusa(src / "medusa_lm_head.safetensors", tmp_path / "mlx", dtype=mx.bfloat16)
    medusa = load_medusa(out, mx.float32)
    again = load_medusa(save_medusa(medusa, tmp_path / "again"), mx.float32)
    x = mx.random.normal((4, HIDDEN))
    for h in range(HEADS):
        np.testing.assert_array_equal(np.array(again.head_logits(x, h)), np.array(medusa.head_logits(x, h)))
        np.testing.assert_allclose(
            np.array(medusa.head_logits(x, h)), heads[h](torch.tensor(np.array(x))).detach().numpy(), atol=0.05
        )


def _drop(key: str):
    return lambda s: {k: v for k, v in s.items() if k != key}


BROKEN = {
    "missing key '1.0.linear.bias'": _drop("1.0.linear.bias"),
    "unexpected key 'lm_head.weight'": lambda s: s | {"lm_head.weight": torch.zeros(VOCAB, HIDDEN)},
    "shape mismatch for '2.0.linear.weight'": lambda s: s | {"2.0.linear.weight": torch.zeros(HIDDEN, HIDDEN + 1)},
    "heads have differing layer counts": lambda s: _drop("2.1.weight")(s) | {"2.2.weight": s["2.1.weight"]},
    "no Medusa heads": lambda s: {k: v for k, v in s.items() if k.endswith("bias")},
}


@pytest.mark.parametrize("problem", list(BROKEN))
def test_a_broken_checkpoint_is_one_line_and_writes_nothing(tmp_path, problem):
    src = write_medusa_upstream(tmp_path / "upstream", BROKEN[problem](torch_heads(1).state_dict()))
    with pytest.raises(DrafterLoadError, match=problem) as error:
        convert_medusa(src, tmp_path / "mlx", dtype=mx.float32, llm_config=LLM)
    assert "\n" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["upstream"]  # no OUT, no staging folder


def test_a_wrong_vocabulary_an_existing_out_and_a_tampered_folder_are_refused(tmp_path):
    src = write_medusa_upstream(tmp_path / "upstream", torch_heads(1).state_dict())
    with pytest.raises(DrafterLoadError, match=f"vocab_size is {VOCAB} but the model's is 41"):
        convert_medusa(src, tmp_path / "mlx", dtype=mx.float32, llm_config=LLM | {"vocab_size": 41})
    assert not (tmp_path / "mlx").exists()

    out = tmp_path / "mlx"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(TargetExists):
        convert_medusa(src, out, dtype=mx.float32)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    convert_medusa(src, out, dtype=mx.float32, force=True)
    assert not (out / "keep.txt").exists()

    weights = mx.load(str(out / "model.safetensors"))
    mx.save_safetensors(str(out / "model.safetensors"), {k: v for k, v in weights.items() if k != "0.1.weight"})
    with pytest.raises(DrafterLoadError, match="missing key '0.1.weight'") as error:
        load_medusa(out, mx.float32)
    assert "\n" not in str(error.value)
    with pytest.raises(DrafterLoadError, match="was built for vocab 40 / hidden 16"):
        random_medusa(VOCAB, HIDDEN, HEADS).for_target(TINY, "tiny")


@pytest.mark.parametrize("top_k", [6, 3])
def test_beam_search_returns_the_top_paths_of_the_heads_product(top_k):
    vocab, width, length = 6, 5, 4
    medusa = random_medusa(vocab, 8, heads=3, seed=2)
    hidden = mx.random.normal((2, 8)) * 3
    beams, scores = beam_search(medusa, None, hidden, mx.array([1, 4]), width, length, draft_top_k=top_k)
    for b in range(2):
        log_probs = []
        for h in range(length - 1):
            logits = np.array(medusa.head_logits(hidden[b], h), dtype=np.float64)
            logits[np.argsort(-logits)[top_k:]] = -np.inf  # the top-k warp
            log_probs.append(logits - np.logaddexp.reduce(logits))
        paths = sorted(
            itertools.product(range(vocab), repeat=length - 1), key=lambda p: -sum(lp[t] for lp, t in zip(log_probs, p))
        )[:width]
        assert np.array(beams[b, :, 1:]).tolist() == [list(p) for p in paths]
        assert np.array(beams[b, :, 0]).tolist() == [[1, 4][b]] * width
        expected = [sum(lp[t] for lp, t in zip(log_probs, p)) for p in paths]
        np.testing.assert_allclose(np.array(scores[b]), expected, atol=1e-5)
    with pytest.raises(InputError, match="beam length at most 4"):
        beam_search(medusa, None, hidden, mx.array([1, 4]), width, 5)


@pytest.fixture(scope="module")
def embedded_medusa(embedded) -> Medusa:
    return random_medusa(49152, 576, heads=4).for_target(embedded.model, embedded.name)


@pytest.mark.parametrize("beam_width, beam_length", [(1, 5), (3, 4), (4, 3)])
def test_greedy_medusa_matches_autoregressive(embedded, embedded_runs, embedded_medusa, beam_width, beam_length):
    for ids, expected, reason in embedded_runs:
        tokens, stats = collect(
            generate_redrafter(
                embedded.model,
                embedded_medusa,
                ids,
                DraftPlan(TreeShape(beam_width, beam_length, beam_width)),
                max_tokens=20,
                eos_ids=embedded.tokenizer.eos_token_ids,
            )
        )
        assert tokens == expected and stats.finish_reason == reason
        assert all(1 <= n <= beam_length for n in stats.accepted_per_step)


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_medusa_has_the_llm_distribution(temperature):
    probs = exact_sequence_probabilities(temperature)
    medusa = random_medusa(TINY.args.vocab_size, TINY.args.hidden_size, heads=2, seed=5)
    n = 1500
    mx.random.seed(1234)
    counts, accepted_drafts = sample_counts(
        lambda: generate_redrafter(
            TINY,
            medusa,
            TINY_PROMPT,
            DraftPlan(TreeShape(2, 3, 2)),
            max_tokens=SEQ_LEN,
            sampler=make_sampler(temp=temperature),
        ),
        n,
    )
    assert sum(counts.values()) == n
    assert accepted_drafts > n // 4  # drafted tokens, not only the LLM's own, were accepted
    assert chi_square_p_value(counts, probs, n) > 1e-3
    # Control: the same test rejects a wrong distribution (a different temperature).
    assert chi_square_p_value(counts, exact_sequence_probabilities(temperature * 2), n) < 1e-6
