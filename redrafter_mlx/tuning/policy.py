"""The step policy: before each step, the tree (or plain step) with the most expected tokens
per second for the rows decoding now. One answer and a served batch ask the same policy.

A verify pass costs what its B x P tokens cost: with one row a 16-token tree costs about
1.6x a plain step on a CPU, with 8 rows the same trees are 128 tokens, and on text the
drafter cannot predict every tree loses. So each step weighs every choice (a plain step, the
served tree at each length, a single beam of each length) by

    B x tokens per row per step  /  step time at (B, choice)

with both halves measured on this process's own steps, and runs a tree only if it beats a
plain step by `TREE_MARGIN`: a tree's estimate is the noisier (acceptance varies by row and
text).

When no request waits to take an ending row's place, the batch drains, and a token is not
worth the same in every row. Plain steps keep a burst's rows in step, so they all end
together; trees move some rows ahead, and the rows left behind finish in small steps that
each pay a step's fixed cost for few tokens. So a draining batch's step is worth what it
saves of the plain steps left: their fixed cost times the rows' largest tokens-to-go, plus
their cost per row times the sum. A step's fixed share (the cost model's a below) so counts
the expected drop of the largest (about one token for many rows in step, whatever the tree),
the rest each row's tokens, none past its end.

- **Tokens** come from each family of trees' acceptance by depth (`DepthRates`; a family:
  one width, search and node budget, at every length). A beam that ran out of tree is
  censored, not a rejection: a step judges depth d only if its tree reached d. Counts forget
  older steps, so they follow the text. The first depth leans on the calibration's rate with
  the weight of `PRIOR_DRAFTS` rows, fading as the answer's own steps come in (a few misses
  early in an answer do not switch drafting off); a family not run lately leans on its
  calibrated rate scaled as the running family's compares with its own (a wider family only
  up: a chain's misses do not say the other beams miss); each deeper depth leans on the
  shallower one's.
- **Time** is the median of the last steps timed at (B, choice), else a linear model's,
  time = a + r x B + b x (B x P) + c x (B x S x L) (a: the pass's fixed cost, r: per row,
  b: per verified token, c: per drafted cell), fitted by least squares with every cost >= 0
  on every (B, choice) timed and, with the weight of `PRIOR_WEIGHT` each, on the
  calibration's predicted times (`redrafter tune`), scaled by how much slower this machine
  runs now than calibrated. Only a step inside a run of its choice at one batch size is
  timed: the first one at new shapes may trace compiled functions.

Choices not taken are probed now and then (`PROBE_STEPS` steps at one batch size, ended
early when rows join or leave): the choice that would win if its family accepted what the
family run last does now, and while plain steps win, alternately the tree fastest as
estimated (while a tree wins, a plain step is no probe: its yield is known, and its time
follows the trees'), less often the more a probe would lose (`PROBE_BUDGET`),
and half as often after each probe that did not win (near a tie the estimates err by more
than a probe's predicted loss). So a drafter that stops predicting costs about plain speed,
and one that predicts again drafts after a probe or two. The choice depends on tokens
already decided and on timings, never on the draws acceptance makes: the output stays exact
(greedy identical, sampling exact per row).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from ..drafting import TreeShape
from .acceptance import PRIOR_DRAFTS, RATE_DECAY, DepthRates, capped_tokens, geometric_rate, last_row_gain
from .calibration import Calibration
from .choices import Choice, family, features, step_choices

UNCALIBRATED_RATE = 0.5  # a family's first-depth rate where no calibration says
PRIOR_FLOOR = 0.25  # the first depth's prior weight in rows, once the answer's own rows outweighed it
PRIOR_WEIGHT = 0.1  # a calibrated step time's weight in the cost model, against a measured one's 1
TREE_MARGIN = 0.05  # a tree runs only if its expected speed beats a plain step's by this share
SAMPLES = 5  # step times kept per (B, choice)
PROBE_BUDGET = 0.03  # the share of decoding time probes may lose against the best choice
PROBE_STEPS = 3  # a probe runs this many steps: the middle one is timed inside a run
MIN_PROBE_INTERVAL = 8  # steps of the best choice between probes, at least; doubled by each lost probe
MAX_PROBE_INTERVAL = 128


class StepPolicy:
    """Chooses each step's tree, or a plain step, for B rows (1: a single answer) among
    `step_choices(start, deepest)`, with `calibration` (if any) as the prior. `choose` before
    each step, `observe` each step's outcome once the host has read it, `reset` before a new
    answer (its acceptance starts again from the prior; timings are the machine's and stay)."""

    def __init__(self, start: TreeShape, calibration: Calibration | None = None, deepest: int | None = None):
        self.start, self.calibration = start, calibration
        self.choices = step_choices(start, deepest)
        self.trees = [c for c in self.choices if c is not None]
        self.longest = max(self.trees, key=lambda t: (t.max_packed, t.beam_length))
        depths: dict[tuple, int] = {}  # family -> its longest tree's drafts
        for tree in self.trees:
            depths[family(tree)] = max(depths.get(family(tree), 0), tree.beam_length - 1)
        self.priors = {f: self._prior_rate(f) for f in depths}
        self.rates = {f: DepthRates(d) for f, d in depths.items()}
        self.calibrated = {c: ms for c in self.choices if (ms := self._calibrated_ms(c)) is not None}
        self.timed: dict[tuple[int, Choice], deque[float]] = {}  # (B, choice) -> its last step times (ms)
        self.coefficients: np.ndarray | None = None
        self.plain_line: tuple[float, float] | None = None  # a plain step's (fixed ms, ms per row)
        self._fit()
        self.untimed: list[Choice] = [] if self.calibrated else [start, None]  # run each before choosing
        self.reset()

    def reset(self) -> None:
        """A new answer: acceptance from the prior again, no probe under way."""
        self.rates = {f: DepthRates(len(r.judged)) for f, r in self.rates.items()}
        self.tree_steps = 0  # tree steps observed since the reset
        self.queued: list[Choice] = []  # the rest of a probe's run, at `probe_rows` rows
        self.probe_rows = 0
        self.since_probe = 0
        self.probes = 0
        self.lost_probes = 0  # probes in a row whose choice was not the best after them
        self.probed: Choice | tuple = ()  # the last probe's choice, until judged; (): none
        self.previous: tuple[int, Choice] | None = None  # the last step's (B, choice)
        self.fresh: tuple | None = None  # the family of the last tree step

    # --- the prior --------------------------------------------------------------------

    def _prior_rate(self, tree_family: tuple) -> float:
        """The first-depth rate of the calibration's deepest tree of the family, if any."""
        cal = self.calibration
        known = [s for s in (cal.shapes if cal else ()) if family(s) == tree_family and s.beam_length > 1]
        if not known:
            return UNCALIBRATED_RATE
        deepest = max(known, key=lambda s: s.beam_length)
        return geometric_rate(cal.shapes[deepest].tokens_per_step - 1, deepest.beam_length)

    def _calibrated_ms(self, choice: Choice) -> float | None:
        """The calibration's time of one step of `choice` at one row, if it has one."""
        cal = self.calibration
        if cal is None:
            return None
        if choice is None:
            return cal.ar_ms or cal.verify_ms_at(1) + cal.overhead_ms
        return cal.step_ms(choice) if choice in cal.shapes else None

    def slowdown(self) -> float:
        """How much slower than calibrated this machine runs now: the median measured /
        calibrated time over the choices timed at one row (1.0 before any was)."""
        ratios = [self.measured(1, c) / ms for c, ms in self.calibrated.items() if (1, c) in self.timed]
        return float(np.median(ratios)) if ratios else 1.0

    # --- the two estimates ------------------------------------------------------------

    def measured(self, rows: int, choice: Choice) -> float | None:
        """The median of the last step times at (B, choice), or the least of one or two: a
        step that traced a compiled function anew, or ran beside other work, is slow, never fast."""
        times = self.timed.get((rows, choice))
        if not times:
            return None
        return float(np.median(times)) if len(times) >= 3 else min(times)

    def ms(self, rows: int, choice: Choice) -> float:
        """A step's time: as measured at this batch size, else the cost model's, as a multiple
        of a plain step's where one was measured at this batch size (the model, fitted over
        every batch size and the calibration, is right about ratios more than levels, and a
        plain step's time follows this machine's speed now)."""
        measured = self.measured(rows, choice)
        if measured is not None:
            return measured
        modelled = max(float(self.coefficients @ features(rows, choice)), 1e-3)
        plain = self.measured(rows, None)
        if choice is None or plain is None:
            return modelled
        return plain * modelled / max(float(self.coefficients @ features(rows, None)), 1e-3)

    def known_ms(self, rows: int, choice: Choice) -> float | None:
        """`ms`, or None while nothing says (no calibration, nothing timed yet)."""
        if self.coefficients is None and self.measured(rows, choice) is None:
            return None
        return self.ms(rows, choice)

    def reach(self, choice: Choice, hopeful: bool = False) -> list[float]:
        """A row's chance of k tokens or more from a step of `choice`, k = 1 .. its length;
        `hopeful`: at each depth at least what the family run last reaches now."""
        if choice is None:
            return [1.0]
        f, length = family(choice), choice.beam_length
        reach = self.rates[f].reach(length, self.first_prior(f), self.prior_weight())
        if hopeful and self.fresh is not None:
            fresh = self.rates[self.fresh].reach(length, self.priors[self.fresh], self.prior_weight())
            reach = [max(a, b) for a, b in zip(reach, fresh)]
        return [1.0, *reach]

    def tokens(self, choice: Choice) -> float:
        """Expected tokens per row of a step of `choice` (the guaranteed one and its drafts)."""
        return sum(self.reach(choice))

    def fixed_share(self, rows: int) -> float:
        """The share of a plain step at `rows` rows that does not grow with them: a / (a + s x B)
        of `plain_line` (0 while nothing is known)."""
        if self.plain_line is None:
            return 0.0
        fixed, slope = self.plain_line
        return fixed / max(fixed + slope * rows, 1e-9)

    def progress(self, rows: int, choice: Choice, ends: Sequence[int] | None = None, hopeful: bool = False) -> float:
        """A step's worth in tokens of plain steps: B x tokens per row while rows that end are
        replaced; with `ends` (each row's tokens to go, when the batch drains), the fixed
        share of a step counts only what the rows furthest from their ends gain, and no row
        more tokens than it has to go (see the module's docstring)."""
        reach = self.reach(choice, hopeful)
        if ends is None:
            return rows * sum(reach)
        if len(ends) != rows:
            raise ValueError(f"{len(ends)} rows' tokens to go for a step of {rows} rows")
        share = self.fixed_share(rows)
        kept = sum(capped_tokens(reach, end) for end in ends)
        return share * rows * last_row_gain(reach, ends) + (1 - share) * kept

    def prior_weight(self) -> float:
        """The weight, in rows, of a family's first-depth prior: `PRIOR_DRAFTS`, fading with
        the tree steps observed to `PRIOR_FLOOR`."""
        return PRIOR_DRAFTS * RATE_DECAY**self.tree_steps + PRIOR_FLOOR

    def first_prior(self, tree_family: tuple) -> float:
        """A family's first-depth prior: its calibrated rate, or, while another family runs,
        that rate scaled as the running family's now compares with its own calibrated rate
        (a family not run for a while knows only what the text was like then). A wider
        family is scaled up, never down: its trees hold the running family's first drafts
        and more (other beams, the lookup's copy), so the running one's misses do not say
        that its other beams miss too."""
        fresh = self.fresh
        if fresh is None or fresh == tree_family:
            return self.priors[tree_family]
        now = self.rates[fresh].first_rate(self.priors[fresh], self.prior_weight())
        ratio = now / max(self.priors[fresh], 1e-9)
        wider = tree_family[0] > fresh[0]  # `family`: (beam width, search width, node budget)
        if wider:
            ratio = max(ratio, 1.0)
        return min(1.0, self.priors[tree_family] * ratio)

    def speed(self, rows: int, choice: Choice, ends: Sequence[int] | None = None) -> float:
        """Expected `progress` per millisecond."""
        return self.progress(rows, choice, ends) / self.ms(rows, choice)

    def merit(self, rows: int, choice: Choice, ends: Sequence[int] | None = None) -> float:
        """`speed`, a tree's less `TREE_MARGIN`: what `best` ranks."""
        return self.speed(rows, choice, ends) / (1.0 if choice is None else 1.0 + TREE_MARGIN)

    def drafting_pays(self, rows: int, choice: Choice) -> bool:
        """Whether a step of `choice` at `rows` rows is expected to beat a plain one by the
        margin (True while nothing is known)."""
        if choice is None or self.known_ms(rows, None) is None:
            return True
        return self.merit(rows, choice) >= self.speed(rows, None)

    def best(self, rows: int, ends: Sequence[int] | None = None) -> Choice:
        return max(self.choices, key=lambda c: self.merit(rows, c, ends))

    # --- choosing and observing -------------------------------------------------------

    def choose(self, rows: int, ends: Sequence[int] | None = None) -> Choice:
        """The choice of the next step of `rows` rows; `ends`: each row's tokens to go after
        the step under way, when no request waits to take the place of a row that ends."""
        if self.queued and self.probe_rows == rows:
            return self.queued.pop()
        self.queued = []  # a probe measures one batch size: rows came or went, its rest would time nothing
        if self.untimed or self.coefficients is None:
            return self._probe(self.untimed.pop(0) if self.untimed else self.start, rows)
        best = self.best(rows, ends)
        if self.probed != ():  # the probe just ended: did its choice win?
            self.lost_probes = 0 if best == self.probed else self.lost_probes + 1
            self.probed = ()
        candidate = self._candidate(rows, best, ends)
        self.since_probe += 1
        if self.since_probe >= self.probe_interval(rows, best, candidate, ends):
            self.since_probe, self.probes = 0, self.probes + 1
            return self._probe(candidate, rows)
        return best

    def _candidate(self, rows: int, best: Choice, ends: Sequence[int] | None) -> Choice:
        """The next probe: the choice that would be fastest if its family accepted as the family
        run last does (a family not run for a while knows only what the text was like then),
        and while plain steps win, every other time the tree fastest as estimated. While a
        tree wins, never a plain step where another tree exists: its yield is known and its
        time follows the trees' (`ms`), so its steps would teach nothing about the text."""
        others = [c for c in self.choices if c != best and (best is None or c is not None)] or [None]
        if best is None and self.probes % 2 == 0:
            return max(others, key=lambda c: self.speed(rows, c, ends))
        return max(others, key=lambda c: self.progress(rows, c, ends, hopeful=True) / self.ms(rows, c))

    def probe_interval(self, rows: int, best: Choice, probe: Choice, ends: Sequence[int] | None = None) -> int:
        """Steps of `best` before a probe of `probe`: enough that the probe's loss against
        `best` is at most `PROBE_BUDGET` of the time, doubled by each probe lost in a row."""
        best_ms, worth = self.ms(rows, best), self.progress(rows, probe, ends) / self.progress(rows, best, ends)
        loss = PROBE_STEPS * (self.ms(rows, probe) - worth * best_ms)
        steps = math.ceil(loss / (PROBE_BUDGET * best_ms)) if loss > 0 else 0
        return min(max(MIN_PROBE_INTERVAL << self.lost_probes, steps), MAX_PROBE_INTERVAL)

    def _probe(self, choice: Choice, rows: int) -> Choice:
        self.queued, self.probe_rows, self.probed = [choice] * (PROBE_STEPS - 1), rows, choice
        return choice

    def observe(
        self, choice: Choice, rows: int, accepted: Sequence[int], seconds: float | None, following: Choice
    ) -> None:
        """A step of `choice` over `rows` rows accepted `accepted` drafts per row, and took
        `seconds` including the draft of `following` (the next step's choice; None: it did
        other work too, untimed); only a step inside a run of its choice at its batch size is
        timed (the first step at a new (B, choice) may trace compiled functions for its shapes)."""
        if choice is not None and len(accepted):
            self.fresh, self.tree_steps = family(choice), self.tree_steps + 1
            for rates in self.rates.values():
                rates.forget()
            self.rates[self.fresh].observe(accepted, choice.beam_length)
        steady = self.previous == (rows, choice) and following == choice
        self.previous = (rows, choice)
        if not steady or seconds is None:
            return
        self.timed.setdefault((rows, choice), deque(maxlen=SAMPLES)).append(1e3 * seconds)
        self._fit()

    def _fit(self) -> None:
        """The cost model, fitted on every (B, choice) measured and on the calibration's times
        (scaled by `slowdown`, with the weight of `PRIOR_WEIGHT` each)."""
        keys = list(self.timed)
        scale = self.slowdown()
        rows = [(features(b, c), self.measured(b, c), 1.0) for b, c in keys]
        rows += [(features(1, c), scale * ms, PRIOR_WEIGHT) for c, ms in self.calibrated.items()]
        if not rows:
            return
        weight = np.sqrt([w for _, _, w in rows])
        x_all = np.array([x for x, _, _ in rows]) * weight[:, None]
        ms = np.array([t for _, t, _ in rows]) * weight
        used = list(range(x_all.shape[1]))
        while True:  # least squares with every cost >= 0: drop a feature whose fit went negative
            x = x_all[:, used]
            ridge = 1e-3 * np.eye(len(used))  # keeps the fit defined while few points are known
            fit = np.linalg.solve(x.T @ x + ridge, x.T @ ms)
            if fit.min() >= 0 or len(used) == 1:
                break
            used.pop(int(np.argmin(fit)))
        self.coefficients = np.zeros(x_all.shape[1])
        self.coefficients[used] = np.maximum(fit, 0)
        self.plain_line = self._fit_plain_line()

    def _fit_plain_line(self) -> tuple[float, float]:
        """A plain step's line a + s x B (a, s >= 0): through the plain steps measured at two
        batch sizes or more, else the cost model's a + (r + b) x B."""
        sizes = sorted(b for b, c in self.timed if c is None)
        if len(sizes) < 2:
            fixed, per_row, per_token, _ = self.coefficients
            return float(fixed), float(per_row + per_token)
        times = [self.measured(b, None) for b in sizes]
        slope = max(float(np.polyfit(sizes, times, 1)[0]), 0.0)
        return max(float(np.mean(times)) - slope * float(np.mean(sizes)), 0.0), slope
