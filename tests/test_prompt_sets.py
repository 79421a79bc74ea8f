"""The chat prompt sets: size, schema, no train/eval leakage, deterministic regeneration; the
eval split ships, the training splits and builders stay in the checkout's data/ folder."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from data import build_prompts as bp
from data.eval_set import RESERVED_TERMS
from redrafter_mlx.formats import prompt_sets as prompt_sets
from redrafter_mlx.formats.prompt_sets import (
    CATEGORIES,
    SPLITS,
    TRAIN_SPLITS,
    WRITTEN_SOURCES,
    follow_up_turns,
    load_prompts,
    split_file,
)

KEYS = {"id", "category", "prompt", "turns", "multi_turn", "source"}


@pytest.fixture(scope="module")
def train() -> list[dict]:
    return load_prompts("train")


@pytest.fixture(scope="module")
def all_train(train) -> list[dict]:
    """Every prompt a drafter may be trained on: the train split, the extra draw and the
    hand-written batches."""
    return [r for split in TRAIN_SPLITS for r in load_prompts(split)]


@pytest.fixture(scope="module")
def evals() -> list[dict]:
    return load_prompts("eval")


def test_counts(train, evals):
    assert len(train) >= 2000
    assert len(evals) >= 80


def test_categories(train, evals):
    tc, ec = Counter(r["category"] for r in train), Counter(r["category"] for r in evals)
    for cat in CATEGORIES:
        assert tc[cat] >= 150, (cat, tc[cat])
        assert ec[cat] >= 10, (cat, ec[cat])
    allowed = set(bp.ALL_CATEGORIES)
    assert set(tc) <= allowed and set(ec) <= allowed


def test_every_prompt_file_is_a_split():
    """A prompt file or hand-written batch in data/ that no split names would be silently left
    out of training; the package holds the eval split and nothing to build it from."""
    folder = Path(bp.__file__).parent
    assert {p.name for p in folder.glob("train*_prompts.jsonl")} == {SPLITS[s] for s in TRAIN_SPLITS}
    assert {p.name for p in folder.glob("handwritten_bulk*.jsonl")} == set(WRITTEN_SOURCES.values())
    shipped = sorted(p.name for p in prompt_sets.PACKAGE_DATA.iterdir() if p.name.endswith(".jsonl"))
    assert shipped == [SPLITS["eval"]]


def test_training_splits_outside_a_checkout_are_a_clear_error(monkeypatch, tmp_path):
    """From an installed wheel (no data/ folder beside the package) the eval split still
    loads, and a training split says where to get it."""
    monkeypatch.setattr(prompt_sets, "CHECKOUT_DATA", tmp_path / "data")
    assert len(load_prompts("eval")) >= 80
    with pytest.raises(FileNotFoundError, match="'train-extra' prompts are not installed.*git checkout"):
        load_prompts("train-extra")


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_schema(split):
    rows = load_prompts(split)
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    for r in rows:
        assert set(r) == KEYS, r["id"]
        assert isinstance(r["id"], str) and r["id"].startswith(split)
        assert isinstance(r["prompt"], str) and r["prompt"].strip()
        turns = r["turns"]
        assert isinstance(turns, list) and 1 <= len(turns) <= 2
        assert all(isinstance(t, str) and t.strip() for t in turns)
        assert turns[-1] == r["prompt"]
        assert r["multi_turn"] is (len(turns) == 2)
        assert isinstance(r["source"], str) and r["source"]
    assert sum(r["multi_turn"] for r in rows) >= 0.05 * len(rows)


def test_eval_is_hand_written(evals):
    assert {r["source"] for r in evals} == {"handwritten"}


def test_no_duplicates_inside_train(all_train):
    assert len({r["id"] for r in all_train}) == len(all_train)
    prompts = [bp.normalize(r["prompt"]) for r in all_train]
    assert len(set(prompts)) == len(prompts)
    turns = [bp.normalize(t) for r in all_train for t in r["turns"]]
    assert len(set(turns)) == len(turns)


def test_no_train_eval_overlap(all_train, evals):
    train_turns = [t for r in all_train for t in r["turns"]]
    eval_turns = [t for r in evals for t in r["turns"]]
    # exact and normalized text
    assert not set(train_turns) & set(eval_turns)
    assert not {bp.normalize(t) for t in train_turns} & {bp.normalize(t) for t in eval_turns}
    # near-identical: content-word Jaccard similarity stays below the builder's threshold
    train_sets = [bp.content_words(t) for t in train_turns]
    for et in eval_turns:
        e = bp.content_words(et)
        for s, tt in zip(train_sets, train_turns, strict=True):
            inter = len(e & s)
            if inter:
                assert inter / len(e | s) < bp.SIM_THRESHOLD, (et, tt)


def test_reserved_eval_terms_absent_from_train(all_train):
    guard = bp.EvalGuard([], RESERVED_TERMS)
    hits = [
        (r["id"], m.group(1)) for r in all_train for t in r["turns"] if (m := guard.reserved.search(bp.normalize(t)))
    ]
    assert not hits


def test_template_share(train):
    per_source = Counter(r["source"] for r in train if r["source"].startswith("template:"))
    assert len(per_source) >= 100
    assert max(per_source.values()) <= bp.MAX_TEMPLATE_SHARE * len(train)


def test_sources(train):
    kinds = Counter(r["source"].split(":")[0] for r in train)
    assert set(kinds) == {"template", "handwritten", "humaneval"}
    assert kinds["humaneval"] >= 150
    assert "MIT License" in (bp.DATA_DIR / "HUMANEVAL_LICENSE.txt").read_text(encoding="utf-8")


def test_extra_split_is_a_larger_template_draw(train):
    extra = load_prompts("train-extra")
    assert len(extra) >= len(train)
    assert all(r["source"].startswith("template:") for r in extra)
    assert {r["category"] for r in extra} == {r["category"] for r in train}


@pytest.mark.parametrize("split", WRITTEN_SOURCES)
def test_written_splits_are_hand_written(split):
    written = load_prompts(split)
    assert len(written) >= 1000
    assert {r["source"] for r in written} == {"handwritten"}
    per_category = Counter(r["category"] for r in written)
    assert set(per_category) == set(bp.ALL_CATEGORIES)
    assert min(per_category.values()) >= 50


def test_follow_up_turns_stand_alone():
    records = [
        {"id": "a", "category": "math", "prompt": "x", "turns": ["x"], "multi_turn": False, "source": "s"},
        {"id": "b", "category": "writing", "prompt": "z", "turns": ["y", "z"], "multi_turn": True, "source": "s"},
    ]
    out = follow_up_turns(records)
    assert [(r["id"], r["prompt"], r["turns"], r["multi_turn"], r["category"]) for r in out] == [
        ("b/2", "z", ["z"], False, "writing")
    ]
    assert records[1]["turns"] == ["y", "z"]  # the input is left alone


@pytest.mark.slow
def test_regeneration_is_byte_identical(tmp_path):
    paths = bp.build(tmp_path)
    assert set(paths) == set(SPLITS)
    for split, path in paths.items():
        assert path.read_bytes() == split_file(split).read_bytes(), f"{split} prompts differ from a fresh build"


def test_unknown_split():
    with pytest.raises(ValueError):
        load_prompts("validation")


def test_check_written_lists_every_problem_of_a_new_batch(tmp_path):
    eval_turn = load_prompts("eval")[0]["turns"][0]
    train_turn = load_prompts("train")[0]["turns"][0]
    lines = [
        {"category": "writing", "turns": ["Compose a limerick about a quokka who sells umbrellas in a desert town."]},
        {"category": "writing", "turns": [eval_turn]},
        {"category": "math", "turns": [train_turn]},
        {"category": "poetry", "turns": ["A category that does not exist."]},
    ]
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n", encoding="utf-8")
    problems = bp.check_written([batch])
    assert [p.split(":")[1] for p in problems] == ["2", "3", "4", "5"]
    assert "rejected (exact)" in problems[0] and "rejected (duplicate)" in problems[1]
    with pytest.raises(ValueError, match="rejected \\(exact\\)"):  # the build refuses what the check reports
        bp.build_train_written([], str(batch), "train-written-x")
    assert bp.main(["--check", str(batch)]) == 1
