"""Which tokens a trimmed drafter head keeps: the LLM's vocabulary ranked by frequency in text.

A head trimmed to K tokens (`DrafterConfig.token_subset_size`) can draft only those, so it
should keep the tokens the LLM emits most. Counting tokens in text tokenized with the LLM's
own tokenizer needs neither the LLM nor a network, and works for any tokenizer. Ties and
tokens the text never shows fall back to id order: in a BPE vocabulary lower ids are earlier
merges, i.e. more frequent in the tokenizer's own training text. The special tokens (EOS
above all) always rank first: they are few and end or structure every answer.

The default text, `token_corpus.txt.gz` (2.8 MB, 2.7M SmolLM2 tokens), is the training split
of the shipped SmolLM2 drafter's distillation answers (chat answers and code to 23,225
training prompts, none an eval prompt) decoded to text: assistant-style English and code, the
register any chat LLM writes in, and the only sizeable text the package holds.
`python -m data.token_corpus` (in the checkout) rebuilds it; `profiling/token_coverage.py`
measures how much of an LLM's output the top K cover.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "assets" / "token_corpus.txt.gz"
_CHUNK_CHARS = 4096  # plain text is tokenized in pieces of about this size, cut at newlines
_BATCH = 256  # documents per tokenizer call (it encodes a batch on all cores)


def read_corpus(path: str | Path) -> Iterator[str]:
    """The documents of a text file (in ~4K-character pieces: the fastest to tokenize) or of
    a JSONL file (every string in every record: a "text" field, prompt/response pairs, chat
    messages...); `.gz` is read compressed. Raises InputError for a missing file or an
    invalid JSONL line."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(f"token corpus {path}: no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as lines:
        if path.name.removesuffix(".gz").endswith(".jsonl"):
            yield from _jsonl_strings(lines, path)
        else:
            yield from _text_pieces(lines)


def _jsonl_strings(lines: Iterable[str], path: Path) -> Iterator[str]:
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield from _strings(json.loads(line))
            except json.JSONDecodeError as e:
                raise InputError(f"token corpus {path}, line {number}: invalid JSON ({e.msg})") from None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _text_pieces(lines: Iterable[str]) -> Iterator[str]:
    piece: list[str] = []
    size = 0
    for line in lines:
        piece.append(line)
        size += len(line)
        if size >= _CHUNK_CHARS:
            yield "".join(piece)
            piece, size = [], 0
    if piece:
        yield "".join(piece)


def count_tokens(tokenizer: Any, documents: Iterable[str], vocab_size: int) -> np.ndarray:
    """(vocab_size,) int64: how often each id occurs in `documents` tokenized by `tokenizer`
    (a Hugging Face tokenizer), without BOS/EOS; ids past vocab_size are dropped."""
    counts = np.zeros(vocab_size, np.int64)
    batch: list[str] = []
    for document in documents:
        batch.append(document)
        if len(batch) == _BATCH:
            counts += _count_batch(tokenizer, batch, vocab_size)
            batch = []
    if batch:
        counts += _count_batch(tokenizer, batch, vocab_size)
    return counts


def _count_batch(tokenizer: Any, texts: list[str], vocab_size: int) -> np.ndarray:
    # verbose=False: long documents are counted, not fed to a model, so no length warning
    encoded = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    ids = np.fromiter((i for row in encoded for i in row), np.int64)
    return np.bincount(ids, minlength=vocab_size)[:vocab_size]


def special_token_ids(tokenizer: Any, eos_ids: Iterable[int] = ()) -> set[int]:
    """The tokenizer's special tokens (BOS, EOS, pad, chat markers...) and the model's EOS ids."""
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return {*tokenizer.all_special_ids, *(i for i, token in added.items() if token.special), *eos_ids}


def rank_tokens(counts: np.ndarray, first: Iterable[int] = ()) -> np.ndarray:
    """Every id of a (V,) count table, best first: the `first` ids, then by count (high
    first), ties by id (low first). Returns (V,) int32."""
    vocab_size = counts.shape[0]
    forced = np.zeros(vocab_size, bool)
    forced[[i for i in first if 0 <= i < vocab_size]] = True
    return np.lexsort((np.arange(vocab_size), -counts, ~forced)).astype(np.int32)


def top_tokens(
    tokenizer: Any, vocab_size: int, k: int, corpus: str | Path = DEFAULT_CORPUS, eos_ids: Iterable[int] = ()
) -> np.ndarray:
    """The K ids a trimmed head should keep, best first: (K,) int32. Raises InputError when
    K is not in [1, vocab_size] or the corpus holds no token of this tokenizer."""
    if not 1 <= k <= vocab_size:
        raise InputError(f"the head can keep 1 to {vocab_size} tokens (the vocabulary), not {k}")
    counts = count_tokens(tokenizer, read_corpus(corpus), vocab_size)
    if not counts.any():
        raise InputError(f"token corpus {corpus}: no text to count tokens in")
    return rank_tokens(counts, special_token_ids(tokenizer, eos_ids))[:k]
