"""A SentencePiece tokenizer (`tokenizer.model`, no `tokenizer.json`: Vicuna, Llama 2) loads
and round-trips through the CLI: what `sentencepiece` is a dependency for."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest
import sentencepiece as spm
from mlx.utils import tree_flatten

from redrafter_mlx.loading import load

from .conftest import random_model, tiny_config
from .test_cli import run

CORPUS = ["A chat between a curious user and an artificial intelligence assistant.",
          "USER: What is the capital of France? ASSISTANT: Paris is the capital of France.",
          "the quick brown fox jumps over the lazy dog"]


@pytest.fixture(scope="module")
def tiny_vicuna(tmp_path_factory) -> tuple[Path, spm.SentencePieceProcessor]:
    """A random tiny Llama named like a Vicuna, with a freshly trained SentencePiece model."""
    root = tmp_path_factory.mktemp("spm")
    (root / "corpus.txt").write_text("\n".join(CORPUS * 20))
    spm.SentencePieceTrainer.train(input=str(root / "corpus.txt"), model_prefix=str(root / "tokenizer"),
                                   vocab_size=400, model_type="bpe", byte_fallback=True, unk_id=0, bos_id=1,
                                   eos_id=2, pad_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(root / "tokenizer.model"))
    folder = root / "tiny-vicuna"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes((root / "tokenizer.model").read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False}))  # a Llama tokenizer adds BOS
    config = tiny_config(vocab_size=sp.get_piece_size(), bos_token_id=1, eos_token_id=2)
    (folder / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(random_model(config).parameters())))
    return folder, sp


def test_the_sentencepiece_tokenizer_is_the_one_loaded(tiny_vicuna):
    folder, sp = tiny_vicuna
    loaded = load(str(folder))
    assert not (folder / "tokenizer.json").exists() and loaded.is_vicuna
    text = "What is the capital of Italy? Émile says ünïcode."
    assert loaded.tokenizer.encode(text, add_special_tokens=False) == sp.encode(text)
    assert loaded.tokenizer.decode(sp.encode(text)) == text  # byte fallback: any text round-trips


def test_generate_feeds_the_vicuna_prompt_through_sentencepiece(tiny_vicuna):
    folder, sp = tiny_vicuna
    result = run("generate", "-M", str(folder), "--mode", "ar", "-p", "Name a river.", "-m", "4", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    prompt = sp.decode(record["prompt_tokens"])
    assert record["prompt_tokens"][0] == sp.bos_id() and prompt.endswith("USER: Name a river. ASSISTANT:")
    assert record["num_tokens"] == 4
