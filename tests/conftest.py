"""Shared fixtures: the embedded SmolLM2 model (loaded once) and tiny random Llamas (plain
factories and constants are in helpers.py)."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from redrafter_mlx.decoding.loop import generate_ar
from redrafter_mlx.formats.loading import LoadedModel, load
from redrafter_mlx.prompting import encode_prompt

from .helpers import PROMPTS, collect, tiny_config, write_random_llama


@pytest.fixture(scope="session")
def embedded() -> LoadedModel:
    return load("smollm2-135m", mx.float32)


@pytest.fixture(scope="session")
def embedded_folder(tmp_path_factory, embedded) -> Path:
    """The embedded model exported as an mlx-lm-loadable Hugging Face folder."""
    from redrafter_mlx.formats.export import export_hf_folder

    out = tmp_path_factory.mktemp("export") / "smollm2"
    weights = dict(tree_flatten(embedded.model.parameters()))
    return export_hf_folder(embedded.config, weights, embedded.tokenizer._tokenizer, out)


@pytest.fixture
def write_tiny_folder(embedded_folder):
    """Factory: write a random tiny Llama folder (config, weights, tokenizer) and return it."""

    def write(path: Path, config: dict | None = None, shards: int = 1, seed: int = 0) -> Path:
        return write_random_llama(path, config or tiny_config(), embedded_folder, seed, shards)

    return write


@pytest.fixture(scope="session")
def embedded_runs(embedded):
    """Greedy AR reference outputs (20 tokens, stopping at EOS) for the test prompts."""
    eos = embedded.tokenizer.eos_token_ids
    runs = []
    for text in PROMPTS:
        ids = encode_prompt(embedded.tokenizer, text)
        tokens, stats = collect(generate_ar(embedded.model, ids, max_tokens=20, eos_ids=eos))
        runs.append((ids, tokens, stats.finish_reason))
    assert {reason for *_, reason in runs} == {"stop", "length"}  # both endings exercised
    return runs
