"""The step controller on simulated generations: it drafts longer where everything is
accepted, stops drafting where nothing is or where the machine makes trees slow, probes the
losing kind within its budget, comes back when drafting pays again, and times what no
calibration says."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.tuning import StepController
from redrafter_mlx.tuning.controller import MAX_PROBE_INTERVAL, PROBE_BUDGET, Option

from .helpers import cpu_like

PLAIN_MS = 74.0 + 3.0  # cpu_like: a one-token verify and the overhead


def drive(
    control: StepController,
    steps: int,
    accepted: Callable[[TreeShape], int],
    timed: Callable[[Option], float] | None = None,
) -> list[Option]:
    """Run `steps` simulated steps: a tree step accepts `accepted(shape)` drafts; every step
    takes `timed(option)` ms (default: what the calibration predicts)."""
    chosen = [control.choose()]
    for _ in range(steps):
        option = chosen[-1]
        chosen.append(control.choose())  # as decoding does: the next step is drafted, then this one read
        drafts = 0 if option is None else accepted(option)
        packed = 1 if option is None else option.max_packed
        following = chosen[-1]
        interval = control.predicted_interval_ms(option, packed, following) if timed is None else timed(option)
        control.observe(option, drafts, interval / 1e3, packed, following)
    return chosen[:-1]


def start_of(calibration) -> TreeShape:
    return calibration.best(beam_width=3, search_width=16)


def test_everything_accepted_drafts_longer_and_nothing_accepted_decodes_plainly():
    calibration = cpu_like(accept=0.3)  # a weaker drafter: the best length is a middle one
    start = start_of(calibration)
    assert 2 < start.beam_length < 7
    control = StepController(calibration, start)
    assert control.choose() == start  # no evidence yet: the calibration's choice
    control.reset()
    chosen = drive(control, 8, lambda shape: shape.beam_length - 1)  # repetitive text
    assert chosen[-1].beam_length > start.beam_length
    control.reset()
    chosen = drive(control, 200, lambda shape: 0)  # a drafter out of its depth
    assert chosen[5:].count(None) > 0.85 * len(chosen[5:])
    assert {s.beam_width for s in control.shapes} == {3} and {s.search_width for s in control.shapes} == {16}


def test_probing_a_losing_drafter_costs_at_most_the_budget():
    """Nothing is ever accepted: every probe loses its time; their share is bounded."""
    control = StepController(cpu_like(), start_of(cpu_like()))
    chosen = drive(control, 400, lambda shape: 0)
    probes = [o for o in chosen[20:] if o is not None]
    assert probes, "the controller never looks back at drafting"
    lost = sum(control.predicted_ms(o) - PLAIN_MS for o in probes)
    assert lost <= 1.5 * PROBE_BUDGET * PLAIN_MS * len(chosen[20:])


def test_drafting_resumes_within_a_few_steps_once_it_pays_again():
    control = StepController(cpu_like(), start_of(cpu_like()))
    before = drive(control, 100, lambda shape: 0)
    assert before[50:].count(None) > 0.85 * 50  # plain by now
    resumed = drive(control, 2 * MAX_PROBE_INTERVAL, lambda shape: shape.beam_length - 1)
    first_tree = next(i for i, o in enumerate(resumed) if o is not None)
    assert first_tree <= MAX_PROBE_INTERVAL
    # after the first probe that pays, trees within a few steps; plain steps only as probes
    after = resumed[first_tree + 8 :]
    assert after.count(None) <= 0.1 * len(after)


def test_a_machine_that_slows_trees_more_than_plain_steps_decodes_plainly():
    """The calibration says trees win; this machine's trees take 3x their time (busy)."""
    calibration = cpu_like()
    control = StepController(calibration, start_of(calibration))
    slow_trees = drive(
        control,
        200,
        lambda shape: round(calibration.shapes[shape].tokens_per_step - 1),
        lambda o: PLAIN_MS if o is None else 3 * calibration.step_ms(o),
    )
    assert slow_trees[100:].count(None) > 0.8 * 100  # once a probe has timed plain steps
    control.reset()
    as_calibrated = drive(control, 100, lambda shape: round(calibration.shapes[shape].tokens_per_step - 1))
    assert as_calibrated[20:].count(None) < 0.2 * len(as_calibrated[20:])


def test_without_a_calibration_both_kinds_are_timed_then_the_faster_wins():
    shape = TreeShape(2, 4, 2)
    control = StepController(None, shape)
    assert control.shapes == [shape]
    fast_trees = drive(control, 60, lambda s: 3, lambda o: 100.0 if o is None else 120.0)  # 4 tokens in 1.2x
    assert fast_trees[:6] == [shape] * 3 + [None] * 3  # each kind run long enough to be timed
    assert fast_trees[10:].count(shape) > 0.9 * len(fast_trees[10:])
    control.reset()
    slow_trees = drive(control, 60, lambda s: 0, lambda o: 100.0 if o is None else 120.0)
    assert slow_trees[10:].count(None) > 0.85 * len(slow_trees[10:])


def test_the_start_shape_must_be_calibrated():
    with pytest.raises(ValueError, match="not in the calibration"):
        StepController(cpu_like(), TreeShape(5, 5, 5))


def test_the_drafters_deepest_beam_bounds_the_lengths():
    calibration = cpu_like()
    start = TreeShape(3, 3, 16)
    control = StepController(calibration, start, max_beam_length=4)
    assert [s.beam_length for s in control.shapes] == [2, 3, 4]
