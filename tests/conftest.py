"""Shared fixtures: the embedded SmolLM2 model (loaded once) and tiny random Llamas."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from redrafter_mlx.decoding import GenerationStats, generate_ar
from redrafter_mlx.distill import DistillRecord
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.loading import LoadedModel, load
from redrafter_mlx.models.llama import Model, ModelArgs
from redrafter_mlx.training import assemble, prefill_hidden

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def tiny_config(**overrides) -> dict:
    """A small Llama that shares the embedded model's vocabulary (so its tokenizer works)."""
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": 49152,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "eos_token_id": 2,
    }
    return config | overrides


def llm_hidden_states(model: Model, records: list[DistillRecord], predict: int) -> tuple[np.ndarray, np.ndarray]:
    """(hidden (N, D), windows (N, T+1)) of every training position of `records`: what
    `training.prepare_data` builds from a distillation file, for in-memory records."""
    return assemble(records, prefill_hidden(model, records), predict)


def random_model(config: dict, seed: int = 0) -> Model:
    mx.random.seed(seed)
    model = Model(ModelArgs.from_dict(config))
    # Larger-than-default embeddings so logits are not all near-ties.
    model.model.embed_tokens.weight = mx.random.normal(model.model.embed_tokens.weight.shape) * 0.5
    mx.eval(model.parameters())
    return model


@pytest.fixture(scope="session")
def embedded() -> LoadedModel:
    return load("smollm2-135m", mx.float32)


@pytest.fixture(scope="session")
def embedded_folder(tmp_path_factory, embedded) -> Path:
    """The embedded model exported as an mlx-lm-loadable Hugging Face folder."""
    from redrafter_mlx.export import export_hf_folder

    out = tmp_path_factory.mktemp("export") / "smollm2"
    weights = dict(tree_flatten(embedded.model.parameters()))
    return export_hf_folder(embedded.config, weights, embedded.tokenizer._tokenizer, out)


@pytest.fixture
def write_tiny_folder(embedded_folder):
    """Factory: write a random tiny Llama folder (config, weights, tokenizer) and return it."""

    def write(path: Path, config: dict | None = None, shards: int = 1, seed: int = 0) -> Path:
        config = config or tiny_config()
        path.mkdir(parents=True, exist_ok=True)
        weights = dict(tree_flatten(random_model(config, seed).parameters()))
        names = sorted(weights)
        if shards == 1:
            mx.save_safetensors(str(path / "model.safetensors"), weights)
        else:
            index = {}
            for i in range(shards):
                part = {k: weights[k] for k in names[i::shards]}
                file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
                mx.save_safetensors(str(path / file), part)
                index |= {k: file for k in part}
            (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
        (path / "config.json").write_text(json.dumps(config))
        for name in TOKENIZER_FILES:
            if (embedded_folder / name).exists():
                shutil.copy(embedded_folder / name, path / name)
        return path

    return write


PROMPTS = ["What is the capital of France?", "Name three colours of the rainbow."]


def collect(steps) -> tuple[list[int], GenerationStats]:
    """All tokens of a decoder's steps, and its final stats."""
    tokens, stats = [], None
    for step in steps:
        tokens += step.tokens
        stats = step.stats
    return tokens, stats


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


def count_host_reads(monkeypatch) -> Counter:
    """A counter of every way MLX can hand a value to Python (item, tolist, bool/int/float/
    index conversion, numpy, mx.eval), filled as the test runs."""
    reads: Counter = Counter()

    def counting(name, original):
        def wrapper(*args, **kwargs):
            reads[name] += 1
            return original(*args, **kwargs)

        return wrapper

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__array__"):
        monkeypatch.setattr(mx.array, name, counting(name, getattr(mx.array, name)))
    monkeypatch.setattr(mx, "eval", counting("eval", mx.eval))
    return reads
