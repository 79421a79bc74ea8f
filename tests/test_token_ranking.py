"""Ranking an LLM's vocabulary by token frequency in text, for trimmed drafter heads."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from redrafter_mlx.errors import InputError
from redrafter_mlx.formats.target_llm import read_llm_tokenizer
from redrafter_mlx.formats.token_ranking import DEFAULT_CORPUS, top_tokens

from .helpers import word_corpus, write_word_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> PreTrainedTokenizerFast:
    return AutoTokenizer.from_pretrained(str(write_word_tokenizer(tmp_path_factory.mktemp("tok"), 96)))


def test_tokens_rank_by_count_then_id_with_special_tokens_first(tmp_path, tokenizer):
    text, ranking = word_corpus(96)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text)
    for k in (1, 3, 40, 96):
        assert top_tokens(tokenizer, 96, k, corpus).tolist() == ranking[:k]


def test_model_eos_ids_rank_with_the_special_tokens(tmp_path, tokenizer):
    text, ranking = word_corpus(96)
    (tmp_path / "corpus.txt").write_text(text)
    last = ranking[-1]  # a rare word the model's config calls EOS
    got = top_tokens(tokenizer, 96, 4, tmp_path / "corpus.txt", eos_ids=[last]).tolist()
    assert got == [0, 1, 2, last]


def test_jsonl_corpus_counts_every_string_of_every_record(tmp_path, tokenizer):
    text, ranking = word_corpus(96, seed=1)
    lines = text.splitlines()
    records = [
        {"text": lines[0]},
        {"prompt": lines[1], "turns": [{"role": "user", "content": lines[2]}], "n": 3},
        *({"response": line} for line in lines[3:]),
    ]
    corpus = tmp_path / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in records) + "\n\n")
    # "user" is not a word of this vocabulary: it counts as <unk>, already ranked first
    assert top_tokens(tokenizer, 96, 96, corpus).tolist() == ranking


def test_shipped_corpus_ranks_the_embedded_vocabulary():
    tokenizer = read_llm_tokenizer("smollm2-135m")
    kept = top_tokens(tokenizer, 49152, 8192, DEFAULT_CORPUS, eos_ids=[2])
    assert len(set(kept.tolist())) == 8192
    assert set(kept[:17].tolist()) == set(range(17))  # SmolLM2's special tokens are ids 0-16
    common = tokenizer.encode(" the answer is", add_special_tokens=False)
    assert set(common) <= set(kept[:1000].tolist())


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "no such file"),
        ("bad_json", "line 2: invalid JSON"),
        ("empty", "no text to count tokens in"),
        ("k_too_big", "the head can keep 1 to 96 tokens (the vocabulary), not 97"),
        ("k_zero", "the head can keep 1 to 96 tokens (the vocabulary), not 0"),
    ],
)
def test_bad_corpus_or_size_is_an_input_error(tmp_path, tokenizer, case, message):
    corpus = tmp_path / ("corpus.jsonl" if case == "bad_json" else "corpus.txt")
    writes = {"bad_json": '{"text": "w3"}\n{"text": \n', "empty": "", "k_too_big": "w3", "k_zero": "w3"}
    if case in writes:
        corpus.write_text(writes[case])
    k = {"k_too_big": 97, "k_zero": 0}.get(case, 8)
    with pytest.raises(InputError, match=re.escape(message)):
        top_tokens(tokenizer, 96, k, corpus)
