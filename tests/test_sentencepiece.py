"""A SentencePiece tokenizer (`tokenizer.model`, no `tokenizer.json`: Vicuna, Llama 2) loads
and round-trips through the CLI: what `sentencepiece` is a dependency for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sentencepiece as spm

from redrafter_mlx.formats.loading import load

from .helpers import run_redrafter, tiny_config, write_random_llama, write_sentencepiece_tokenizer


@pytest.fixture(scope="module")
def tiny_vicuna(tmp_path_factory) -> tuple[Path, spm.SentencePieceProcessor]:
    """A random tiny Llama named like a Vicuna, with a freshly trained SentencePiece model."""
    root = tmp_path_factory.mktemp("spm")
    sp = spm.SentencePieceProcessor(model_file=str(write_sentencepiece_tokenizer(root)))
    config = tiny_config(vocab_size=sp.get_piece_size(), bos_token_id=1, eos_token_id=2)
    return write_random_llama(root / "tiny-vicuna", config, tokenizer_from=root), sp


def test_the_sentencepiece_tokenizer_is_the_one_loaded(tiny_vicuna):
    folder, sp = tiny_vicuna
    loaded = load(str(folder))
    assert not (folder / "tokenizer.json").exists() and loaded.is_vicuna
    text = "What is the capital of Italy? Émile says ünïcode."
    assert loaded.tokenizer.encode(text, add_special_tokens=False) == sp.encode(text)
    assert loaded.tokenizer.decode(sp.encode(text)) == text  # byte fallback: any text round-trips


def test_generate_feeds_the_vicuna_prompt_through_sentencepiece(tiny_vicuna):
    folder, sp = tiny_vicuna
    result = run_redrafter("generate", "-M", str(folder), "--mode", "ar", "-p", "Name a river.", "-m", "4", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    prompt = sp.decode(record["prompt_tokens"])
    assert record["prompt_tokens"][0] == sp.bos_id() and prompt.endswith("USER: Name a river. ASSISTANT:")
    assert record["num_tokens"] == 4
