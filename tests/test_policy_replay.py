"""The step policy's offline replay (`profiling.policy_replay`): choices held fixed take the
time their steps add up to, and the real policy, replayed, decodes plainly where nothing is
accepted and drafts where everything is."""

from __future__ import annotations

import sys

import pytest

from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.profiling import policy_replay
from redrafter_mlx.profiling.policy_replay import choice_key, hindsight, parse_choice, replay, summary
from redrafter_mlx.tuning import StepPolicy

START = TreeShape(2, 3, 2)


def world(accepted: int | None, tokens: int = 41) -> dict:
    """Two answers; each tree accepts `accepted` drafts at every position (None: all it
    drafts); a plain step takes 10 ms, a tree 10 + 2 x its packed tokens, our AR 10."""
    choices = StepPolicy(START).choices
    trees = [c for c in choices if c is not None]
    table = {choice_key(t): [t.beam_length - 1 if accepted is None else accepted] * (tokens - 1) for t in trees}
    times = {"ar": [10.0], "plain": [10.0], **{choice_key(t): [10.0 + 2 * t.max_packed] for t in trees}}
    return {
        "choices": [choice_key(c) for c in choices],
        "answers": [{"tokens": tokens, "accepted": table}] * 2,
        "times": times,
    }


def test_a_choice_held_fixed_takes_the_time_its_steps_add_up_to():
    """41 tokens: our AR's 40 steps take 400 ms. A W=1 L=3 chain whose two drafts are always
    accepted takes 3 tokens a step: 14 steps (the last one keeps none), of 10 + 2 x 3 ms."""
    results = replay(world(None), lambda: StepPolicy(START), seeds=1, rounds=1)
    assert summary(results["plain"])["geomean"] == pytest.approx(1.0)
    assert summary(results[choice_key(TreeShape(1, 3, 1))])["geomean"] == pytest.approx(400 / (14 * 16), abs=1e-3)
    none_accepted = replay(world(0), lambda: StepPolicy(START), seeds=1, rounds=1)
    assert summary(none_accepted[choice_key(START)])["geomean"] == pytest.approx(400 / (40 * (10 + 2 * 5)), abs=1e-3)


def test_the_replayed_policy_drafts_where_everything_is_accepted_and_not_where_nothing_is():
    easy = {k: summary(v) for k, v in replay(world(None), lambda: StepPolicy(START), 3, 2).items()}
    best_fixed = max(v["geomean"] for k, v in easy.items() if k != "policy")
    assert easy["policy"]["geomean"] > 0.8 * best_fixed > easy["plain"]["geomean"]
    hard = {k: summary(v) for k, v in replay(world(0), lambda: StepPolicy(START), 3, 2).items()}
    assert 0.8 * hard["plain"]["geomean"] < hard["policy"]["geomean"] < hard["plain"]["geomean"]


def test_choices_read_back_from_their_keys():
    for choice in StepPolicy(TreeShape(6, 4, 16, 8)).choices:
        assert parse_choice(choice_key(choice)) == choice


def test_record_never_overwrites_a_file(tmp_path, monkeypatch):
    kept = tmp_path / "world.json"
    kept.write_text("mine")
    command = ["policy_replay", "record", "--prompts-file", str(kept), "-o", str(kept)]
    monkeypatch.setattr(sys, "argv", command)
    with pytest.raises(SystemExit, match="exists"):
        policy_replay.main()
    assert kept.read_text() == "mine"


def test_hindsight_takes_the_best_choice_at_each_step():
    """A W=1 L=3 chain accepts both drafts at even positions and none at odd ones, every step
    costs 10 ms: from an even position the chain emits 3 tokens and lands on an odd one, where
    any step emits 1. So 12 tokens after the prefill's take 6 steps, our AR's 12."""
    answer = world(0, tokens=13)
    chain = choice_key(TreeShape(1, 3, 1))
    answer["times"] = {k: [10.0] for k in answer["times"]}
    table = [2 if p % 2 == 0 else 0 for p in range(12)]
    answer["answers"] = [{"tokens": 13, "accepted": {**answer["answers"][0]["accepted"], chain: table}}]
    assert hindsight(answer) == pytest.approx([120 / 60])
