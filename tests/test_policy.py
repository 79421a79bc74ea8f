"""The step policy on simulated steps, for one row and for batches: it drafts longer where
everything is accepted, decodes plainly where nothing is or where the machine makes trees
slow, probes within its budget, drafts again once drafting pays, and takes its timings and
acceptance only from steps that can tell them."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest

from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.tuning import Choice, StepPolicy
from redrafter_mlx.tuning.acceptance import capped_tokens, last_row_gain
from redrafter_mlx.tuning.choices import features
from redrafter_mlx.tuning.plan import deepest_calibrated
from redrafter_mlx.tuning.policy import MAX_PROBE_INTERVAL, PROBE_BUDGET, PROBE_STEPS, TREE_MARGIN

from .helpers import cpu_like, cpu_like_ms

SHAPE = TreeShape(3, 4, 8)


def calibrated_policy(accept: float = 0.6) -> StepPolicy:
    """The policy `plan_drafting` builds from a CPU-like calibration."""
    calibration = cpu_like(accept)
    start = calibration.best(beam_width=3, search_width=16)
    return StepPolicy(start, calibration, deepest_calibrated(calibration, start, None))


def drive(
    policy: StepPolicy,
    steps: int,
    accepted: Callable[[TreeShape], int],
    ms: Callable[[int, Choice], float] = cpu_like_ms,
    rows: int = 1,
) -> list[Choice]:
    """`steps` simulated steps of `rows` rows: each row of a tree step accepts
    `accepted(tree)` drafts; a step takes `ms(rows, choice)`."""
    chosen = [policy.choose(rows)]
    for _ in range(steps):
        choice = chosen[-1]
        chosen.append(policy.choose(rows))  # as decoding does: the next step is drafted, then this one read
        drafts = [0 if choice is None else accepted(choice)] * rows
        policy.observe(choice, rows, drafts, ms(rows, choice) / 1e3, chosen[-1])
    return chosen[:-1]


def speed(
    chosen: list[Choice], accepted: Callable[[TreeShape], int], ms: Callable[[int, Choice], float] = cpu_like_ms
) -> float:
    """Tokens per millisecond of one row's steps `chosen`."""
    tokens = sum(1 + (0 if c is None else accepted(c)) for c in chosen)
    return tokens / sum(ms(1, c) for c in chosen)


def best_fixed(policy: StepPolicy, accepted: Callable[[TreeShape], int], ms=cpu_like_ms) -> float:
    """The speed of the best choice run every step."""
    return max(speed([c], accepted, ms) for c in policy.choices)


def test_everything_accepted_drafts_longer_and_nothing_accepted_decodes_plainly():
    policy = calibrated_policy(accept=0.3)  # a weaker drafter: the calibration's best is a middle length
    assert 2 < policy.start.beam_length < policy.longest.beam_length
    assert policy.choose(1) == policy.start  # no evidence yet: the calibration's choice
    policy.reset()
    chosen = drive(policy, 12, lambda tree: tree.beam_length - 1)  # repetitive text
    assert chosen[-1] is not None and chosen[-1].beam_length > policy.start.beam_length
    policy.reset()
    chosen = drive(policy, 200, lambda tree: 0)  # a drafter out of its depth
    assert speed(chosen[10:], lambda tree: 0) > (1 - 2 * PROBE_BUDGET) * speed([None], lambda tree: 0)


def test_while_a_tree_wins_its_probes_try_other_trees_never_plain_steps():
    """A plain step's yield is known and its time follows the trees': probing one while a tree
    wins would give up a tree's tokens and teach nothing about the text."""
    policy = calibrated_policy()
    chosen = drive(policy, 300, lambda tree: tree.beam_length - 1)  # every draft accepted
    assert None not in chosen
    assert len(set(chosen)) > 2  # the best tree, and other trees' probes


def test_an_answers_first_misses_do_not_switch_drafting_off():
    """The calibration's rate weighs as several drafts: two steps that accept nothing are
    not enough to call the drafter useless."""
    policy = calibrated_policy()
    for _ in range(2):
        choice = policy.choose(1)
        assert choice is not None
        policy.observe(choice, 1, [0], cpu_like_ms(1, choice) / 1e3, choice)
    assert policy.choose(1) is not None


def test_the_policy_decodes_plainly_while_the_drafter_never_accepts_and_drafts_again_when_it_does():
    policy = calibrated_policy()
    never = drive(policy, 200, lambda tree: 0)
    assert never[20:].count(None) > 0.5 * len(never[20:])  # the rest: probes, of the cheapest chains
    assert any(c is not None for c in never[20:]), "the policy never looks back at drafting"
    # probes lose at most about their budget against plain decoding
    assert speed(never[20:], lambda tree: 0) > (1 - 2 * PROBE_BUDGET) * speed([None], lambda tree: 0)
    whole = lambda tree: tree.beam_length - 1  # noqa: E731 (every draft accepted)
    again = drive(policy, 3 * MAX_PROBE_INTERVAL, whole)
    first_tree = next(i for i, c in enumerate(again) if c is not None)
    assert first_tree <= MAX_PROBE_INTERVAL
    settled = again[first_tree + MAX_PROBE_INTERVAL :]  # a probe or two later
    assert settled.count(None) <= 0.1 * len(settled)
    assert speed(settled, whole) > 0.9 * best_fixed(policy, whole)


def test_a_machine_that_slows_trees_more_than_plain_steps_decodes_plainly():
    """The calibration says trees win; this machine's trees take 3x their time (busy)."""
    policy = calibrated_policy()
    accept = lambda tree: min(tree.beam_length - 1, 4)  # noqa: E731 (the text runs 4 drafts deep)
    busy = lambda rows, c: cpu_like_ms(rows, c) * (1 if c is None else 3)  # noqa: E731
    slow_trees = drive(policy, 200, accept, busy)
    assert all(c is None or c.beam_width == 1 for c in slow_trees[100:])  # plain steps, and chains where they pay
    assert speed(slow_trees[100:], accept, busy) > 0.9 * best_fixed(policy, accept, busy)
    fresh = calibrated_policy()
    as_calibrated = drive(fresh, 200, accept)
    assert as_calibrated[20:].count(None) < 0.2 * len(as_calibrated[20:])
    assert speed(as_calibrated[100:], accept) > 0.9 * best_fixed(fresh, accept)  # a probe found the chains


def test_untimed_choices_take_the_calibration_times_this_machine_is_slower_by():
    """Plain steps run at twice the calibrated time: a tree never timed is expected at about
    twice its calibrated time too."""
    policy = calibrated_policy()
    for _ in range(4):
        policy.observe(None, 1, [], 2 * cpu_like_ms(1, None) / 1e3, None)
    tree = policy.start
    assert policy.measured(1, tree) is None
    assert policy.ms(1, tree) == pytest.approx(2 * cpu_like_ms(1, tree), rel=0.25)


def test_without_a_calibration_both_kinds_are_timed_then_the_faster_wins():
    policy = StepPolicy(SHAPE)
    assert policy.known_ms(1, SHAPE) is None
    same_cost = lambda rows, c: 100.0 if c is None else 120.0  # noqa: E731
    fast_trees = drive(policy, 60, lambda tree: 3, same_cost)  # 4 tokens in 1.2x
    assert fast_trees[:6] == [SHAPE] * 3 + [None] * 3  # each kind run long enough to be timed
    assert fast_trees[10:].count(None) < 0.1 * len(fast_trees[10:])
    policy.reset()
    slow_trees = drive(policy, 120, lambda tree: 0, same_cost)
    assert speed(slow_trees[20:], lambda tree: 0, same_cost) > (1 - 2 * PROBE_BUDGET) * speed(
        [None], lambda tree: 0, same_cost
    )


def test_the_drafters_deepest_beam_bounds_the_lengths():
    calibration = cpu_like()
    start = TreeShape(3, 3, 16)
    assert deepest_calibrated(calibration, start, None) > 4
    policy = StepPolicy(start, calibration, deepest_calibrated(calibration, start, 4))
    assert sorted({t.beam_length for t in policy.trees}) == [2, 3, 4]
    assert {t.beam_width for t in policy.trees} == {1, 3}


def test_a_step_is_timed_only_inside_a_run_at_its_batch_size():
    """The first step at a new (B, choice) traces compiled functions for its shapes: slow once,
    it would make the choice look slow at that batch size for as long as it is not run again."""
    policy = StepPolicy(SHAPE)
    for seconds in (0.9, 0.1, 0.1):
        policy.observe(SHAPE, 8, [1] * 8, seconds, SHAPE)
    assert policy.measured(8, SHAPE) == pytest.approx(100)  # the run's first step is not timed
    policy.observe(SHAPE, 7, [1] * 7, 0.9, SHAPE)  # a row left: new shapes
    assert policy.measured(7, SHAPE) is None
    policy.observe(SHAPE, 7, [1] * 7, 0.08, SHAPE)
    assert policy.measured(7, SHAPE) == pytest.approx(80)


def test_a_probe_ends_when_the_batch_size_changes():
    """A probe runs a choice a few steps at one batch size. Begun with one row (where a wide
    tree is cheap), it must not run on into a burst of 16 joins: there its steps would be
    dear, and timed at no batch size."""
    policy = StepPolicy(SHAPE)
    assert policy.choose(1) == SHAPE
    assert policy.choose(1) == SHAPE  # the probe's run
    assert policy.choose(16) is None  # rows joined: the plain step's probe begins
    assert policy.choose(16) is None


def test_the_expected_tokens_follow_the_acceptance_of_a_steady_text():
    """Rows accepting 0, 1, 2 and 3 drafts of a chain of 4 in turn: a draft is accepted at
    depth 1 by 3 rows in 4, at 2 by 2, at 3 by 1, so a step yields 1 + 1.5 tokens per row on
    average; a chain of 3 stops at depth 2, 1 + 1.25."""
    policy = StepPolicy(SHAPE)
    chain = TreeShape(1, 4, 1)
    for _ in range(100):
        policy.observe(chain, 4, [0, 1, 2, 3], None, chain)
    assert policy.tokens(chain) == pytest.approx(2.5, rel=0.05)
    assert policy.tokens(TreeShape(1, 3, 1)) == pytest.approx(2.25, rel=0.05)
    assert policy.tokens(None) == 1


def test_a_beam_that_ran_out_of_tree_is_not_a_rejection():
    """A chain of 2 whose one draft is always accepted says nothing against depth 2: the
    longer chains of its family expect every draft accepted too."""
    policy = StepPolicy(SHAPE)
    short = TreeShape(1, 2, 1)
    for _ in range(100):
        policy.observe(short, 1, [1], None, short)
    assert policy.tokens(TreeShape(1, 4, 1)) > 3.8


def test_a_short_chain_tells_the_longer_chains_and_lowers_the_wider_trees_to_their_prior():
    """The text changed while only the shortest chain ran: the longer chains, not run since,
    must not keep the estimate of what they accepted before (they would win every choice).
    The wider family's trees hold the chain's first drafts and more (other beams, the
    lookup's copy): the chain's misses return them to their own prior, no lower."""
    policy = StepPolicy(SHAPE)
    prior_tokens = policy.tokens(SHAPE)
    long, short = TreeShape(1, 4, 1), TreeShape(1, 2, 1)
    for _ in range(50):  # a repetitive stretch: every draft accepted
        policy.observe(long, 4, [3] * 4, None, long)
        policy.observe(SHAPE, 4, [3] * 4, None, SHAPE)
    assert policy.tokens(long) > 3.5
    assert policy.tokens(SHAPE) > 3.5
    for _ in range(50):  # then prose the drafter misses
        policy.observe(short, 4, [0] * 4, None, short)
    assert policy.tokens(long) < 1.2
    assert policy.tokens(SHAPE) == pytest.approx(prior_tokens, rel=0.05)


def test_the_wider_trees_misses_lower_the_chains_they_hold():
    """A wide tree verifies the drafter's first choice too: where none of its beams is
    accepted, a chain (that first choice alone) would not be either."""
    policy = StepPolicy(SHAPE)
    chain = TreeShape(1, 4, 1)
    prior_tokens = policy.tokens(chain)
    for _ in range(20):
        policy.observe(SHAPE, 1, [0], None, SHAPE)
    assert policy.tokens(chain) < 1 + 0.5 * (prior_tokens - 1)


def test_drafting_pays_where_its_tokens_outrun_its_cost_at_the_batch_size():
    policy = StepPolicy(SHAPE)
    assert policy.drafting_pays(16, SHAPE)  # nothing timed yet: the trees stand
    for rows, choice in [(rows, c) for rows in (1, 8) for c in policy.choices for _ in range(4)]:
        packed = 1 if choice is None else choice.max_packed  # a pass costs 40 ms and 3 ms per token
        accepted = [0 if choice is None else choice.beam_length - 1] * rows  # every draft accepted
        policy.observe(choice, rows, accepted, (40 + 3 * rows * packed) / 1e3, choice)
    # One row: SHAPE's 4 tokens in 40 + 30 ms against 1 in 43; 16 rows: 64 in 520 against 16 in 88.
    assert policy.drafting_pays(1, SHAPE) and not policy.drafting_pays(16, SHAPE)
    assert policy.drafting_pays(16, None)


def test_a_batch_drafts_nothing_where_trees_cost_more_than_they_gain():
    policy = StepPolicy(SHAPE)
    drive(policy, 300, lambda tree: 0, rows=8)
    assert policy.best(8) is None  # nothing accepted: every tree loses
    for tree in policy.trees:
        for _ in range(40):  # every draft accepted
            policy.observe(tree, 1, [tree.beam_length - 1], 0.1, None)
    assert policy.best(1) is not None


def test_near_a_tie_each_lost_probe_halves_how_often_probes_come():
    """16 rows on a machine where a step costs what its verified tokens do: a chain whose
    drafts are all accepted nearly ties with a plain step (a millisecond slower), so what
    each probe is predicted to lose says little, and a probe every `MIN_PROBE_INTERVAL`
    steps would run trees a quarter of the time."""
    policy = StepPolicy(SHAPE)

    def ms(rows: int, choice: Choice) -> float:
        return 10.0 * rows * (1 if choice is None else choice.max_packed) + (0 if choice is None else 1)

    chosen = drive(policy, 600, lambda tree: tree.beam_length - 1, ms, rows=16)
    assert policy.best(16) is None
    late = chosen[300:]
    probed = sum(c is not None for c in late)
    assert 0 < probed <= PROBE_STEPS * (len(late) // MAX_PROBE_INTERVAL + 1)


@pytest.mark.parametrize("gain", [TREE_MARGIN / 2, 2 * TREE_MARGIN])
def test_a_tree_runs_only_where_it_beats_a_plain_step_by_the_margin(gain: float):
    """A chain of two whose draft is always accepted, timed so that it is expected to beat
    a plain step by `gain`: within the margin the step stays plain."""
    chain = TreeShape(1, 2, 1)
    policy = StepPolicy(chain)  # its choices: the chain or a plain step
    plain_ms, chain_ms = 100.0, 2 * 100.0 / (1 + gain)
    for choice, ms in [(chain, chain_ms), (None, plain_ms)]:  # runs of each: timed inside them
        for _ in range(20):
            policy.observe(choice, 1, [1] if choice else [], ms / 1e3, choice)
    assert policy.speed(1, chain) == pytest.approx((1 + gain) * policy.speed(1, None), rel=0.02)
    assert policy.best(1) == (chain if gain > TREE_MARGIN else None)
    assert policy.drafting_pays(1, chain) == (gain > TREE_MARGIN)


def test_the_last_rows_gain_is_the_mean_drop_of_the_largest_tokens_to_go_over_every_outcome():
    """`last_row_gain` against enumerating every row's outcome of a step (k tokens with
    chance reach[k - 1] - reach[k]), with rows in step, apart and near their ends."""
    rng = np.random.default_rng(0)
    for _ in range(60):
        reach = np.cumprod([1.0, *rng.uniform(0.2, 0.9, rng.integers(0, 4))]).tolist()
        ends = rng.integers(1, 8, rng.integers(1, 5)).tolist()
        chance = [reach[k] - (reach[k + 1] if k + 1 < len(reach) else 0.0) for k in range(len(reach))]
        expected = 0.0
        for outcome in itertools.product(range(1, len(reach) + 1), repeat=len(ends)):
            p = math.prod(chance[k - 1] for k in outcome)
            expected += p * (max(ends) - max(end - min(k, end) for end, k in zip(ends, outcome)))
        assert last_row_gain(reach, ends) == pytest.approx(expected, abs=1e-12)
        kept = sum(c * min(k + 1, ends[0]) for k, c in enumerate(chance))
        assert capped_tokens(reach, ends[0]) == pytest.approx(kept)
    assert last_row_gain([1.0, 0.5], [50] * 16) == pytest.approx(1 + 0.5**16)  # 16 rows in step: one token
    assert last_row_gain([1.0, 0.5], [50]) == pytest.approx(1.5)


def test_a_draining_burst_in_step_decodes_plainly_where_a_tree_wins_only_on_its_tokens():
    """16 rows, half of whose drafts are accepted, on a machine where a step costs 100 ms
    plus 10 per row: a chain of two at 340 ms gives 1.5 tokens a row, 15% more tokens per
    second than a plain step. While ending rows are replaced that wins; in a burst whose
    rows end together it would only move half of them ahead: the steps left fall by about
    one either way, and 100 ms of each step pays for that. Rows far apart take the chain."""
    chain = TreeShape(1, 2, 1)
    policy = StepPolicy(chain)
    for rows in (1, 4, 16):
        for _ in range(5):
            policy.observe(None, rows, [], (100 + 10 * rows) / 1e3, None)
    for _ in range(30):
        policy.observe(chain, 16, [1, 0] * 8, 0.340, chain)
    assert policy.tokens(chain) == pytest.approx(1.5, abs=0.05)
    assert policy.best(16) == chain
    assert policy.best(16, [100] * 16) is None
    assert policy.best(16, [10 * (i + 1) for i in range(16)]) == chain
    assert policy.progress(16, None, [100] * 16) == pytest.approx(16)  # a plain step: one token a row
    assert policy.progress(1, chain, [1]) == pytest.approx(1)  # one token to go: a tree adds nothing
    with pytest.raises(ValueError, match="3 rows' tokens to go for a step of 16 rows"):
        policy.best(16, [10, 20, 30])  # a caller's slip, not a silent change of valuation


def test_an_untimed_trees_time_is_the_models_multiple_of_the_plain_step_timed_at_its_batch_size():
    """Plain steps timed at three batch sizes that no line fits: at 16 rows, a tree not timed
    there costs the model's tree-to-plain ratio times the plain step measured there, not
    the model's own level (which a machine's speed now, or a cost no line follows, moves)."""
    policy = calibrated_policy()
    for rows, ms in [(4, 100.0), (8, 450.0), (16, 500.0)]:
        for _ in range(5):
            policy.observe(None, rows, [], ms / 1e3, None)
    modelled = {c: float(policy.coefficients @ features(16, c)) for c in policy.choices}
    assert abs(modelled[None] - 500.0) > 25.0  # the line misses the plain step at 16 rows
    assert policy.ms(16, None) == pytest.approx(500.0)
    for tree in policy.trees:
        assert policy.ms(16, tree) == pytest.approx(500.0 * modelled[tree] / modelled[None])
