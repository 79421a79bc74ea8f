"""The batch policy: each step's option from the acceptance and step times it has seen."""

from __future__ import annotations

import pytest

from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.tuning.batch_policy import BatchPolicy, batch_options

SHAPE = TreeShape(3, 4, 8)


def test_the_policy_drafts_nothing_where_trees_cost_more_than_they_gain():
    policy = BatchPolicy(batch_options(SHAPE))
    assert policy.options[0] is None and SHAPE in policy.options
    for rows, option in [(8, o) for o in policy.options for _ in range(4)]:  # a pass costs 3 ms per token
        packed = 1 if option is None else option.max_packed
        policy.observe(option, rows, [0] * rows, (40 + 3 * rows * packed) / 1e3, option)
    assert policy.best(8) is None  # nothing accepted: every tree loses
    for option in policy.options[1:]:
        for _ in range(40):  # every draft accepted
            policy.observe(option, 1, [option.beam_length - 1], 0.1, None)
    assert policy.best(1) == max(policy.options[1:], key=lambda o: o.beam_length / (40 + 3 * o.max_packed))


def test_the_policy_times_a_step_only_inside_a_run_at_its_batch_size():
    """The first step at a new (B, option) traces compiled functions for its shapes: slow once,
    it would make the option look slow at that batch size for as long as it is not run again."""
    policy = BatchPolicy(batch_options(SHAPE))
    option = SHAPE
    for seconds in (0.9, 0.1, 0.1):
        policy.observe(option, 8, [1] * 8, seconds, option)
    assert policy.measured(8, option) == pytest.approx(100)  # the run's first step is not timed
    policy.observe(option, 7, [1] * 7, 0.9, option)  # a row left: new shapes
    assert policy.measured(7, option) is None
    policy.observe(option, 7, [1] * 7, 0.08, option)
    assert policy.measured(7, option) == pytest.approx(80)


def test_a_probe_ends_when_the_batch_size_changes():
    """A probe runs an option a few steps at one batch size. Begun with one row (where a wide
    tree is cheap), it must not run on into a burst of 16 joins: there its steps would be
    dear, and timed at no batch size."""
    policy = BatchPolicy(batch_options(SHAPE))
    first = policy.choose(1)
    assert policy.choose(1) == first  # the probe's run
    assert policy.choose(16) == policy.options[1]  # rows joined: the next option's probe begins
    assert policy.choose(16) == policy.options[1]


@pytest.mark.parametrize("rows", [1, 8])
def test_the_policy_probes_every_option_before_it_chooses(rows):
    policy = BatchPolicy(batch_options(SHAPE))
    runs = [policy.choose(rows) for _ in range(3 * len(policy.options))]
    assert runs == [o for o in policy.options for _ in range(3)]


def test_the_expected_tokens_follow_the_acceptance_of_a_steady_text():
    """Rows accepting 0, 1, 2 and 3 drafts of a chain of 4 in turn: a draft is accepted at
    depth 1 by 3 rows in 4, at 2 by 2, at 3 by 1, so a step yields 1 + 1.5 tokens per row on
    average; a chain of 3 stops at depth 2, 1 + 1.25."""
    policy = BatchPolicy(batch_options(SHAPE))
    chain = TreeShape(1, 4, 1)
    for _ in range(100):
        policy.observe(chain, 4, [0, 1, 2, 3], None, chain)
    assert policy.tokens(chain) == pytest.approx(2.5, rel=0.05)
    assert policy.tokens(TreeShape(1, 3, 1)) == pytest.approx(2.25, rel=0.05)
    assert policy.tokens(None) == 1


def test_a_short_chain_tells_what_the_long_ones_of_its_family_accept_now():
    """The text changed while only the shortest chain ran: the longer chains, not run since,
    must not keep the estimate of what they accepted before (they would win every choice),
    and trees of another family keep theirs."""
    policy = BatchPolicy(batch_options(SHAPE))
    long, short = TreeShape(1, 4, 1), TreeShape(1, 2, 1)
    for _ in range(50):  # a repetitive stretch: every draft accepted
        policy.observe(long, 4, [3] * 4, None, long)
        policy.observe(SHAPE, 4, [3] * 4, None, SHAPE)
    assert policy.tokens(long) > 3.5
    for _ in range(50):  # then prose the drafter misses
        policy.observe(short, 4, [0] * 4, None, short)
    assert policy.tokens(long) < 1.2
    assert policy.tokens(SHAPE) > 3.5


def test_drafting_pays_where_its_tokens_outrun_its_cost_at_the_batch_size():
    policy = BatchPolicy(batch_options(SHAPE))
    assert policy.drafting_pays(16, SHAPE)  # nothing timed yet: the trees stand
    for rows, option in [(rows, o) for rows in (1, 8) for o in policy.options for _ in range(4)]:
        packed = 1 if option is None else option.max_packed  # a pass costs 40 ms and 3 ms per token
        accepted = [0 if option is None else option.beam_length - 1] * rows  # every draft accepted
        policy.observe(option, rows, accepted, (40 + 3 * rows * packed) / 1e3, option)
    # One row: SHAPE's 4 tokens in 40 + 30 ms against 1 in 43; 16 rows: 64 in 520 against 16 in 88.
    assert policy.drafting_pays(1, SHAPE) and not policy.drafting_pays(16, SHAPE)
    assert policy.drafting_pays(16, None)
