"""The shipped drafter's distillation data (`data/smollm2-135m-distill.jsonl.gz` in the
checkout, see the drafter's model card): the embedded LLM's own greedy answers to the shipped training prompts, and to
no eval prompt, so `redrafter train --skip-distill --distill-data` on it reproduces the drafter
and its n-gram table."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import redrafter_mlx
from redrafter_mlx.drafting.ngrams import build_ngram_table, load_ngram_table
from redrafter_mlx.formats.prompt_sets import CHECKOUT_DATA, TRAIN_SPLITS, follow_up_turns, load_prompts
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.training import Evaluation, split_records
from redrafter_mlx.training.distill_file import first_user_message, read_distill_file

DATA = CHECKOUT_DATA / "smollm2-135m-distill.jsonl.gz"
DRAFTER = Path(redrafter_mlx.__file__).parent / "assets" / "drafters" / "smollm2-135m"


@pytest.fixture(scope="module")
def records():
    return read_distill_file(DATA)


def test_answers_are_to_shipped_training_prompts_only(records, embedded):
    prompts = {r["id"]: r for split in TRAIN_SPLITS for r in load_prompts(split)}
    prompts |= {r["id"]: r for r in follow_up_turns(list(prompts.values()))}
    eval_turns = {turn for r in load_prompts("eval") for turn in r["turns"]}
    assert len(records) >= 2000 and len({r.id for r in records}) == len(records)
    for record in records:
        text = first_user_message(prompts[record.id])  # KeyError: not a training prompt
        assert text not in eval_turns
        assert record.prompt_ids == encode_prompt(embedded.tokenizer, text)
        assert record.temp == 0.0 and 0 < len(record.response_ids) <= 128


def test_answers_are_the_llms_greedy_continuations(records, embedded):
    """Teacher-forced, the LLM's argmax reproduces the stored answers (a seeded sample; the
    answers were decoded in padded batches, so a rare near-tie may flip one position)."""
    rng = np.random.default_rng(0)
    matches = total = 0
    for i in rng.choice(len(records), 6, replace=False):
        record = records[i]
        ids = record.prompt_ids + record.response_ids
        hidden = embedded.model(mx.array([ids]))[0, len(record.prompt_ids) - 1 : len(ids) - 1]
        predicted = np.array(mx.argmax(embedded.model.logits(hidden), axis=-1))
        matches += int((predicted == np.array(record.response_ids)).sum())
        total += len(record.response_ids)
    assert matches >= 0.99 * total


def test_the_shipped_ngram_table_is_built_from_this_data(records):
    """The shipped drafter's table is what `redrafter train` builds from this data's training split,
    and the drafter folder stays within the 40 MB the repository allows."""
    shipped = load_ngram_table(DRAFTER)
    train, _ = split_records(records, Evaluation.holdout_fraction)
    rebuilt = build_ngram_table([r.response_ids for r in train], shipped.vocab_size)
    assert mx.array_equal(shipped.keys, rebuilt.keys) and mx.array_equal(shipped.drafts, rebuilt.drafts)
    assert sum(f.stat().st_size for f in DRAFTER.iterdir()) <= 40 * 2**20
