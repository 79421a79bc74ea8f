"""The MLP speculator kind: upstream checkpoints convert exactly, bad ones fail in one line
writing nothing, and decoding with it is exact (greedy identity, sampled distribution)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import torch
from mlx_lm.sample_utils import make_sampler

from redrafter_mlx.beam_search import beam_search
from redrafter_mlx.decoding import generate_redrafter
from redrafter_mlx.drafter import DrafterLoadError
from redrafter_mlx.drafting.kinds import load_drafter_folder
from redrafter_mlx.drafting.mlp_speculator import (
    MLPSpeculator,
    MLPSpeculatorConfig,
    convert_mlp_speculator,
    is_mlp_speculator_checkpoint,
    load_mlp_speculator,
    save_mlp_speculator,
)

from .conftest import collect
from .test_redrafter import (
    SEQ_LEN,
    TINY,
    TINY_PROMPT,
    chi_square_p_value,
    exact_sequence_probabilities,
    sample_counts,
)

EMB, INNER, VOCAB, N = 24, 16, 40, 3


class TorchSpeculator(torch.nn.Module):
    """An independent re-statement of fms-extras' MLPSpeculator forward (and its tying)."""

    def __init__(self, tie: bool, scale: bool):
        super().__init__()
        self.scale = scale
        self.emb = torch.nn.ModuleList([torch.nn.Embedding(VOCAB, INNER) for _ in range(N)])
        self.proj = torch.nn.ModuleList(
            [torch.nn.Linear(EMB if i == 0 else INNER, INNER, bias=False) for i in range(N)]
        )
        self.head = torch.nn.ModuleList([torch.nn.Linear(INNER, VOCAB, bias=False) for _ in range(N)])
        self.ln = torch.nn.ModuleList([torch.nn.Module() for _ in range(N)])
        for ln in self.ln:
            ln.weight = torch.nn.Parameter(1 + 0.3 * torch.randn(INNER))
            ln.bias = torch.nn.Parameter(0.3 * torch.randn(INNER))
        if tie:
            for i in range(1, N):
                self.emb[i].weight = self.emb[0].weight
                self.head[i].weight = self.head[0].weight
                self.ln[i].weight, self.ln[i].bias = self.ln[0].weight, self.ln[0].bias
            for i in range(2, N):
                self.proj[i].weight = self.proj[1].weight

    @staticmethod
    def rms(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    def forward(self, state: torch.Tensor, tokens: torch.Tensor) -> list[torch.Tensor]:
        """state (B, 1, EMB), tokens (B, N): g then the drafted tokens -> N logits (B, 1, V)."""
        state_weight = 0.5 ** (0.5 / N)
        emb_weight = math.sqrt((1 - state_weight**2) * (INNER / 2))
        if self.scale:
            state = self.rms(state) / 2**0.5
        out = []
        for i in range(N):
            state = self.proj[i](state) + self.emb[i](tokens[:, i : i + 1]) * (emb_weight / state_weight)
            ln = self.ln[i]
            state = torch.nn.functional.gelu(self.rms(state) * ln.weight + ln.bias)
            out.append(self.head[i](state))
        return out


def write_upstream(folder: Path, tie: bool, scale: bool, layout: str) -> TorchSpeculator:
    """An upstream checkpoint folder: layout "hf-bin" (`speculator.` keys, torch.save),
    "fms-pt" (bare keys, torch.save) or "hf-safetensors" (shared tensors stored once)."""
    torch.manual_seed(int(tie) * 2 + int(scale))
    model = TorchSpeculator(tie, scale)
    folder.mkdir(parents=True)
    config = {"model_type": "mlp_speculator", "architectures": ["MLPSpeculatorPreTrainedModel"],
              "emb_dim": EMB, "inner_dim": INNER, "n_predict": N, "vocab_size": VOCAB,
              "top_k_tokens_per_head": [4, 3, 2], "n_candidates": 5, "tie_weights": tie, "scale_input": scale}
    (folder / "config.json").write_text(json.dumps(config))
    if layout == "fms-pt":
        torch.save(model.state_dict(), folder / "model.pt")
    elif layout == "hf-bin":
        torch.save({f"speculator.{k}": v for k, v in model.state_dict().items()}, folder / "pytorch_model.bin")
    else:
        from safetensors.torch import save_model

        wrapper = torch.nn.Module()
        wrapper.speculator = model
        save_model(wrapper, str(folder / "model.safetensors"))
    return model


def upstream_state(folder: Path) -> tuple[Path, dict]:
    file = next(folder.glob("*.bin"))
    return file, torch.load(file, weights_only=True)


def random_speculator(emb: int, inner: int, vocab: int, n: int, seed: int = 0, **flags: bool) -> MLPSpeculator:
    mx.random.seed(seed)
    config = MLPSpeculatorConfig(emb_dim=emb, inner_dim=inner, n_predict=n, vocab_size=vocab, **flags)
    speculator = MLPSpeculator(config)
    mx.eval(speculator.parameters())
    return speculator


CASES = [(False, False, "hf-bin"), (False, True, "fms-pt"), (True, False, "hf-safetensors"), (True, True, "hf-bin")]


@pytest.mark.parametrize("tie, scale, layout", CASES)
def test_converted_checkpoint_has_the_upstream_logits(tmp_path, tie, scale, layout):
    model = write_upstream(tmp_path / "src", tie, scale, layout)
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


@pytest.mark.parametrize("mutate, message", [
    (_drop, "missing key 'head.1.weight'"),
    (_extra, "unexpected key 'head.3.weight'"),
    (_shape, "shape mismatch for 'proj.0.weight'"),
])
def test_bad_checkpoint_fails_in_one_line_and_writes_nothing(tmp_path, mutate, message):
    write_upstream(tmp_path / "src", False, False, "hf-bin")
    file, state = upstream_state(tmp_path / "src")
    mutate(state)
    torch.save(state, file)
    with pytest.raises(DrafterLoadError, match=message) as error:
        convert_mlp_speculator(tmp_path / "src", tmp_path / "out", dtype=mx.float32)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["src"]


def test_tied_copies_that_differ_are_refused(tmp_path):
    write_upstream(tmp_path / "src", True, False, "hf-bin")
    file, state = upstream_state(tmp_path / "src")
    state["speculator.emb.2.weight"] = state["speculator.emb.2.weight"] + 1
    torch.save(state, file)
    with pytest.raises(DrafterLoadError, match="tie_weights is set but emb.0.weight, emb.1.weight, emb.2.weight"):
        convert_mlp_speculator(tmp_path / "src", tmp_path / "out", dtype=mx.float32)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("llm, message", [
    ({"vocab_size": VOCAB + 1, "hidden_size": EMB}, "vocab_size is 40 but the model's is 41"),
    ({"vocab_size": VOCAB, "hidden_size": 32}, "hidden_size is 24 but the model's is 32"),
])
def test_sizes_are_checked_against_the_llm(tmp_path, llm, message):
    write_upstream(tmp_path / "src", False, True, "fms-pt")
    with pytest.raises(DrafterLoadError, match=message):
        convert_mlp_speculator(tmp_path / "src", tmp_path / "out", dtype=mx.float32, llm_config=llm)
    assert not (tmp_path / "out").exists()


def test_existing_output_is_replaced_only_with_force(tmp_path):
    write_upstream(tmp_path / "src", True, True, "hf-bin")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
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
            tokens, stats = collect(generate_redrafter(embedded.model, speculator, ids, beam_width=beam_width,
                                                       beam_length=beam_length, max_tokens=20, eos_ids=eos))
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
        lambda: generate_redrafter(TINY, speculator, TINY_PROMPT, beam_width=2, beam_length=3, max_tokens=SEQ_LEN,
                                   sampler=make_sampler(temp=temperature)),
        n,
    )
    assert sum(counts.values()) == n
    assert accepted_drafts > n // 4  # drafted tokens were really accepted
    assert chi_square_p_value(counts, probs, n) > 1e-3
    # Control: the same test rejects a wrong distribution (a different temperature).
    assert chi_square_p_value(counts, exact_sequence_probabilities(temperature * 2), n) < 1e-6
