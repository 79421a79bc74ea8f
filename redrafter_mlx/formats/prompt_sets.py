"""Chat prompt sets (the eval split ships in `assets/`, see `assets/PROMPTS.md`).

Only the held-out eval set ships with the package: ``load_prompts("eval")`` is what
``redrafter bench`` and ``redrafter tune`` run. The training splits (``"train"``,
``"train-extra"``, ``"train-written"`` ... ``"-7"``) are several megabytes that only
``redrafter train`` reads, so they live beside their builders in the checkout's top-level
``data/`` folder, out of the wheel. Each record is a dict with ``id``, ``category``, ``prompt``
(the last user message), ``turns`` (every user message in order, so ``turns[-1] == prompt``),
``multi_turn`` and ``source``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError

# Hand-written training batches, in order: split -> its source file in the checkout's data/. A
# new batch is one more line here (its own split, so the ids of answers distilled before never change).
WRITTEN_SOURCES = {
    "train-written": "handwritten_bulk.jsonl",
    "train-written-2": "handwritten_bulk_2.jsonl",
    "train-written-3": "handwritten_bulk_3.jsonl",
    "train-written-4": "handwritten_bulk_4.jsonl",
    "train-written-5": "handwritten_bulk_5.jsonl",
    "train-written-6": "handwritten_bulk_6.jsonl",
    "train-written-7": "handwritten_bulk_7.jsonl",
}
# What a drafter may be trained on, in `redrafter train`'s default order: every split but eval.
TRAIN_SPLITS = ("train", "train-extra", *WRITTEN_SOURCES)
EVAL_SPLIT = "eval"
SPLITS = {split: f"{split.replace('-', '_')}_prompts.jsonl" for split in (*TRAIN_SPLITS, EVAL_SPLIT)}
CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
# The eval split ships here; the training splits are in the checkout's top-level data/ folder
# (absent from an installed wheel).
PACKAGE_DATA = Path(__file__).resolve().parents[1] / "assets"
CHECKOUT_DATA = Path(__file__).resolve().parents[2] / "data"


def split_file(split: str) -> Path:
    """The file of one prompt split (a key of SPLITS): the eval split from the installed
    package, a training split from the checkout's data/ folder (FileNotFoundError without one)."""
    try:
        name = SPLITS[split]
    except KeyError:
        raise InputError(f"unknown split {split!r}; expected one of {sorted(SPLITS)}") from None
    if split == EVAL_SPLIT:
        return PACKAGE_DATA / name
    path = CHECKOUT_DATA / name
    if not path.is_file():
        raise FileNotFoundError(
            f"the {split!r} prompts are not installed with the package: they are in the "
            "data/ folder of a redrafter-mlx git checkout (installed with pip install -e .)"
        )
    return path


def load_prompts(split: str) -> list[dict]:
    """Read one prompt split (a key of SPLITS); see `split_file` for where each one lives."""
    text = split_file(split).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def follow_up_turns(records: list[dict]) -> list[dict]:
    """Each later user message (turn k > 1) as a one-turn record with id ``"<id>/k"``.
    Distillation answers a record's first turn; these add the follow-ups, alone, which is
    how the eval prompts are run (their last message), so the drafter also learns the LLM's
    answers to follow-up-style requests."""
    out: list[dict] = []
    for record in records:
        for k, turn in enumerate(record.get("turns", [])[1:], 2):
            out.append({**record, "id": f"{record['id']}/{k}", "prompt": turn, "turns": [turn], "multi_turn": False})
    return out


def balanced_subset(records: list[dict], n: int) -> list[dict]:
    """The first n records taken round-robin over categories (a stable, category-balanced sample)."""
    by_category: dict[str, list[dict]] = {}
    for record in records:
        by_category.setdefault(record["category"], []).append(record)
    queues = list(by_category.values())
    picked: list[dict] = []
    while len(picked) < min(n, len(records)):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    return picked


__all__ = [
    "CATEGORIES",
    "CHECKOUT_DATA",
    "EVAL_SPLIT",
    "PACKAGE_DATA",
    "SPLITS",
    "TRAIN_SPLITS",
    "WRITTEN_SOURCES",
    "balanced_subset",
    "follow_up_turns",
    "load_prompts",
    "split_file",
]
