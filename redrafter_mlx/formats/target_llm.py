"""The LLM a drafter is converted for, read without loading its weights: its config (to check
the drafter's sizes against), its tokenizer, and the tokens a trimmed drafter head keeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DrafterLoadError
from .checkpoint import CONFIG_FILE, first_line
from .gguf import read_gguf
from .loading import ModelLoadError, eos_ids, resolve
from .token_ranking import DEFAULT_CORPUS, top_tokens


def check_llm_config(config: Any, llm_config: dict[str, Any]) -> None:
    """The drafter reads the LLM's hidden states and drafts its token ids: the `vocab_size` and
    `hidden_size` of a drafter's config (any kind's) must be the LLM's. Raises DrafterLoadError."""
    for name in ("vocab_size", "hidden_size"):
        ours, theirs = getattr(config, name), llm_config.get(name)
        if theirs is None:
            raise DrafterLoadError(f"the model's config has no {name} to check the drafter against")
        if ours != theirs:
            raise DrafterLoadError(f"drafter {name} is {ours} but the model's is {theirs}")


def read_llm_config(name: str) -> dict[str, Any]:
    """The LLM's config alone (alias, path or hub id): a folder's config.json or a .gguf file's
    metadata (no weights are loaded into memory)."""
    path = _llm_path(name)
    if path.is_file():
        return read_gguf(path).config
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise ModelLoadError(f"{path}: no config.json")
    try:
        return json.loads(config_file.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{config_file}: invalid JSON ({e})") from None


def read_llm_tokenizer(name: str) -> Any:
    """The LLM's Hugging Face tokenizer alone: a folder's tokenizer files or a .gguf file's
    metadata."""
    path = _llm_path(name)
    if path.is_file():
        return read_gguf(path).tokenizer
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as e:  # transformers raises many types (OSError, ValueError, config validation...)
        raise ModelLoadError(f"{path}: no usable tokenizer ({first_line(e)})") from None


def head_tokens_for(name: str, llm_config: dict[str, Any], k: int, corpus: str | Path = DEFAULT_CORPUS) -> np.ndarray:
    """The K token ids of LLM `name` (config `llm_config`) a trimmed head keeps, ranked by
    frequency in `corpus` tokenized with the LLM's tokenizer: (K,) int32, best first."""
    vocab_size = llm_config.get("vocab_size")
    if not isinstance(vocab_size, int):
        raise ModelLoadError("the model's config has no vocab_size to rank its tokens in")
    return top_tokens(read_llm_tokenizer(name), vocab_size, k, corpus, eos_ids(llm_config))


def _llm_path(name: str) -> Path:
    """A folder or .gguf file for an LLM alias, path or hub id (fetched whole by `resolve`)."""
    path = resolve(name)
    if path.is_file() and path.suffix != ".gguf":
        raise ModelLoadError(f"{path}: expected a folder or a .gguf file")
    return path
