"""The step controller: each step drafts the tree with the most expected tokens per second,
or no tree at all (a plain decoding step) when drafting does not pay.

Averages hide text on which a drafter accepts little (open prose, a drafter out of its
depth): there every tree costs more than the tokens it gains, and the only way not to lose
is to stop drafting. So each step the controller estimates, for a plain step and for every
calibrated beam length of the plan's width, tokens per step / time per step, and runs the
best. Both halves are this generation's own:

- **Tokens.** The calibration says how many drafts each length accepts on average, A(L)
  (replayed). The controller estimates the generation's rate q at which a draft is accepted
  given its parent was (censored geometric maximum likelihood: a step that accepted a of
  L - 1 drafts counts a successes and one failure unless a = L - 1), forgetting old drafts
  exponentially (by `decay` per draft judged) so it follows the text, started at the
  calibration's rate q0 with the weight of `prior_drafts` drafts, and predicts
  A(L) * G(q, L) / G(q0, L) drafts (G: `geometric_drafts`).
- **Time.** The calibration predicts each step's time; the controller times the steps it
  runs and keeps one measured/predicted factor for trees and one for plain steps, because a
  machine busy with other work slows a wide verify pass more than a one-token one. Only steps
  inside a run of their kind are timed (a switch has costs of its own). Without a
  calibration the factors are the measured times themselves, and each kind is run a few
  steps at the start to time it.

The kind being run keeps running until the other is `SWITCH_MARGIN` faster by these
estimates, and the other is probed now and then (a tree for one step, to see what it
accepts; plain steps for a few, to time them) at intervals set so that probing costs at most
`PROBE_BUDGET` of the time: a prompt on which drafting loses runs at about plain speed, and
one on which it starts winning switches back after a probe or two. The choice depends only
on tokens already decided and on timings, never on the draws that acceptance makes, so the
output stays exact.
"""

from __future__ import annotations

import math

from ..drafting import TreeShape
from .calibration import Calibration

PROBE_BUDGET = 0.02  # the share of decoding time probing the losing kind may cost, at most
PROBE_STEPS = 3  # a probe that times a kind runs it this many steps: the middle one is timed in a run
SWITCH_MARGIN = 0.05  # the other kind takes over when its expected speed is this much higher
# Switching from trees to plain steps and back costs about this share of a plain step besides
# the steps themselves (measured on a 2-core CPU: a tree then 5 plain steps, repeated, against
# each kind alone; the first plain step after a tree cannot be queued ahead).
SWITCH_COST = 0.15
MIN_PROBE_INTERVAL = 2  # steps between probes, at least
MAX_PROBE_INTERVAL = 64
UNCALIBRATED_RATE = 0.5  # q0 where no calibration says what the drafter accepts


def geometric_drafts(rate: float, length: int) -> float:
    """Expected accepted drafts of a beam of `length` when each draft is accepted with
    probability `rate` given its parent was: rate + rate^2 + ... + rate^(length - 1)."""
    return sum(rate**d for d in range(1, length))


def geometric_rate(drafts: float, length: int) -> float:
    """The rate whose `geometric_drafts` over `length` is `drafts` (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if geometric_drafts(mid, length) < drafts else (low, mid)
    return (low + high) / 2


Option = TreeShape | None  # None: a plain decoding step


class StepController:
    """Chooses each step's tree, or a plain step (None), from this generation's acceptance
    and timings with the calibration (if any) as the prior: among the calibration's beam
    lengths of `start`'s width, search width and node budget (up to `max_beam_length`), else `start`
    alone. `reset` before each generation; `choose` before each step; `observe` each step's
    outcome once the host has read it."""

    def __init__(
        self,
        calibration: Calibration | None,
        start: TreeShape,
        *,
        decay: float = 0.85,
        prior_drafts: float = 3.0,
        time_decay: float = 0.7,
        max_beam_length: int | None = None,
    ):
        self.calibration = calibration
        if calibration is None:
            self.shapes = [start]
        else:
            same = (start.beam_width, start.search_width, start.node_budget)
            deepest = max_beam_length or math.inf
            matching = (
                s
                for s in calibration.shapes
                if (s.beam_width, s.search_width, s.node_budget) == same and s.beam_length <= deepest
            )
            self.shapes = sorted(matching, key=lambda s: s.beam_length)
            if start not in self.shapes:
                raise ValueError(f"{start} is not in the calibration: nothing to choose from")
        self.start, self.decay, self.prior_drafts, self.time_decay = start, decay, prior_drafts, time_decay
        self.prior_rate = UNCALIBRATED_RATE
        if calibration is not None:
            self.prior_rate = geometric_rate(self._calibrated_drafts(start), start.beam_length)
        self.reset()

    @property
    def longest(self) -> TreeShape:
        return self.shapes[-1]

    def reset(self) -> None:
        """Forget the previous generation: the calibration's rate, no timings, no probe due."""
        self.successes = self.prior_drafts * self.prior_rate
        self.failures = self.prior_drafts * (1 - self.prior_rate)
        self.timed = {True: [0.0, 0.0], False: [0.0, 0.0]}  # tree? -> decayed sums of measured, predicted ms
        self.run_kind: bool | None = None  # the kind (tree?) the current run of steps exploits
        self.run_steps = 0  # steps since the run began or since its last probe
        self.queued: list[Option] = []  # the rest of a probe
        self.previous_kind: bool | None = None  # the kind of the last step observed

    # --- the two estimates -------------------------------------------------------------

    def _calibrated_drafts(self, shape: TreeShape) -> float:
        if self.calibration is None:
            return geometric_drafts(self.prior_rate, shape.beam_length)
        return self.calibration.shapes[shape].tokens_per_step - 1

    def tokens(self, option: Option) -> float:
        """Expected tokens a step of `option` emits."""
        if option is None:
            return 1.0
        rate = self.successes / max(self.successes + self.failures, 1e-9)
        prior = geometric_drafts(self.prior_rate, option.beam_length)
        scale = geometric_drafts(rate, option.beam_length) / prior if prior > 0 else 1.0
        return 1 + min(self._calibrated_drafts(option) * scale, option.beam_length - 1)

    def predicted_ms(self, option: Option) -> float:
        """The calibration's time for a step of `option` (1.0 without a calibration: the
        factor is then the time itself)."""
        cal = self.calibration
        if cal is None:
            return 1.0
        if option is None:
            return cal.ar_ms if cal.ar_ms else cal.verify_ms_at(1) + cal.overhead_ms
        return cal.step_ms(option)

    def predicted_interval_ms(self, option: Option, packed: int, following: Option) -> float:
        """The calibration's time between two host reads: decoding drafts the next tree
        before it reads a step, so the interval after a step of `option` (a tree of `packed`
        unique tokens) holds its verify pass, or its plain forward, and `following`'s draft."""
        cal = self.calibration
        if cal is None:
            return 1.0
        draft = cal.shapes[following].draft_ms if following in cal.shapes else 0.0
        if option is None:
            return self.predicted_ms(None) + draft
        return cal.verify_ms_at(packed) + cal.overhead_ms + draft

    def factor(self, tree: bool) -> float | None:
        """This generation's measured / predicted time of one kind of step (None: not timed)."""
        measured, predicted = self.timed[tree]
        return measured / predicted if predicted else None

    def ms(self, option: Option) -> float | None:
        """Expected time of a step of `option`; None when nothing says (never timed)."""
        factor = self.factor(option is not None)
        if factor is None and self.calibration is not None:  # assume the other kind's slowdown
            factor = self.factor(option is None) or 1.0
        return None if factor is None else factor * self.predicted_ms(option)

    def speed(self, option: Option) -> float:
        """Expected tokens per millisecond (infinite when untimed: try it)."""
        ms = self.ms(option)
        return math.inf if ms is None else self.tokens(option) / ms

    # --- choosing and observing --------------------------------------------------------

    def best(self, tree: bool) -> Option:
        """The fastest option of one kind."""
        return max(self.shapes, key=self.speed) if tree else None

    def choose(self) -> Option:
        """The option to run next: the fastest of the kind being run (the other kind takes
        over when it is `SWITCH_MARGIN` faster), or a probe of the other kind when one is due."""
        if self.queued:
            return self.queued.pop()
        untimed = [o for o in (self.start, None) if self.ms(o) is None]
        if untimed:  # no calibration: run each kind long enough to time it
            return self._probe(untimed[0])
        bests = {True: self.best(True), False: None}
        kind = self.run_kind if self.run_kind is not None else self.speed(bests[True]) >= self.speed(None)
        if self.speed(bests[not kind]) > (1 + SWITCH_MARGIN) * self.speed(bests[kind]):
            kind, self.run_steps = not kind, 0
        self.run_kind = kind
        self.run_steps += 1
        if self.run_steps > self.probe_interval(bests[kind], bests[not kind]):
            self.run_steps = 0
            return self._probe(bests[not kind])
        return bests[kind]

    def probe_steps(self, option: Option) -> int:
        """How long a probe of `option` runs: PROBE_STEPS, so that the middle step is timed as
        in a run; one step when only its acceptance is wanted (a tree, once trees are timed)."""
        return 1 if option is not None and self.factor(True) is not None else PROBE_STEPS

    def _probe(self, option: Option) -> Option:
        self.queued = [option] * (self.probe_steps(option) - 1)
        return option

    def probe_interval(self, best: Option, probe: Option) -> int:
        """Steps of `best` between probes of `probe` (the other kind's best): a probe step
        loses the time its tokens would have taken at `best`'s speed, and the switches cost
        `SWITCH_COST`; the probes' loss over the interval is the budget."""
        best_ms, probe_ms = self.ms(best), self.ms(probe)
        switches = SWITCH_COST * self.ms(None)  # there and back
        loss = self.probe_steps(probe) * (probe_ms - self.tokens(probe) * best_ms / self.tokens(best)) + switches
        steps = math.ceil(loss / (PROBE_BUDGET * best_ms)) if loss > 0 else MIN_PROBE_INTERVAL
        return min(max(steps, MIN_PROBE_INTERVAL), MAX_PROBE_INTERVAL)

    def observe(self, option: Option, accepted: int, seconds: float | None, packed: int = 1, following: Option = None):
        """A step of `option` (a tree of `packed` unique tokens) accepted `accepted` drafted
        tokens (0 for a plain step), and its host read came `seconds` after the previous one,
        with the draft of `following` (the step after it) in between (None: not timed, e.g.
        an interval that traced a new compiled phase).

        Only a step inside a run of its kind (the step before it, if any, and the one after it
        of the same kind) is timed: a switch costs time of its own (the first plain step after
        a tree cannot be queued ahead), which would otherwise be charged to a step."""
        kind = option is not None
        if kind:
            failed = int(accepted < option.beam_length - 1)
            forget = self.decay ** (accepted + failed)  # per draft judged: a long run of hits fades as fast
            self.successes = forget * self.successes + accepted
            self.failures = forget * self.failures + failed
        steady = self.previous_kind in (None, kind) and kind == (following is not None)
        self.previous_kind = kind
        if seconds is not None and steady:  # decayed sums: an interval's time may land on its neighbour's
            predicted = self.predicted_interval_ms(option, packed, following)
            self.timed[kind] = [
                self.time_decay * t + new for t, new in zip(self.timed[kind], (1e3 * seconds, predicted))
            ]
