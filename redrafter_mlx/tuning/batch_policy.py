"""The batch's tree: each step, the tree shape (or plain step) with the most tokens per
second for the batch as it is now.

One verify pass costs what its B x P tokens cost. With one row, a 16-token tree costs about
1.6x a plain step on a CPU and pays for itself; with 8 rows the same trees are 128 tokens, a
pass several times a plain one's, and drafting loses unless the trees shrink. So the batch
decoder asks `BatchPolicy` before each step, which weighs every option (plain steps, the
plan's tree, narrow chains of each length) by

    B x tokens per row per step  /  step time at (B, option)

with both halves measured on this batch's own steps. Tokens per row per step come from each
family of trees' acceptance by depth (`DepthRates`; a family: one width, search and node
budget, at every length), so a short chain run for a while says what the long ones of its
family accept now, not what they accepted when last run. Step time is the median of the last
timings at (B, option) where that has been timed, else a linear model's, time = a + r x B +
b x (B x P) + c x (B x S x L) (a: the pass's fixed cost, r: per row, b: per verified token,
c: per drafted cell), refitted by least squares, every cost >= 0, on every (B, option)
timed. A step is timed only inside a run of its option at one batch size: the first step at
new shapes traces compiled functions. Options not chosen are probed now and then, a few
steps each at one batch size (a probe ends when rows join or leave), less often the more a
probe would lose (`PROBE_BUDGET`), so both halves follow the text and the machine. The
choice depends on tokens already decided and on timings, never on the draws acceptance
makes: output stays exact (greedy identical, sampling exact per row).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from ..drafting import TreeShape
from .controller import UNCALIBRATED_RATE, Option

PROBE_EVERY = 32  # steps of the best option between probes of another, at least
MAX_PROBE_INTERVAL = 256
PROBE_BUDGET = 0.03  # the share of decoding time probes may lose against the best option
PROBE_STEPS = 3  # a probe runs this many steps: the middle one is timed inside a run
RATE_DECAY = 0.97  # per row judged, for the acceptance counts: about the last 32 rows' drafts
PRIOR_DRAFTS = 4.0  # a depth's rate leans on the shallower depth's with the weight of this many drafts
SAMPLES = 5  # step times kept per (B, option)


def option_cells(option: Option) -> tuple[int, int]:
    """(largest packed tree, drafted cells S x L) of a step of `option`."""
    if option is None:
        return 1, 0
    return option.max_packed, option.search_width * option.beam_length


def features(rows: int, option: Option) -> np.ndarray:
    """What a step's time is linear in: 1, B, B x P, B x S x L."""
    packed, cells = option_cells(option)
    return np.array([1.0, rows, rows * packed, rows * cells])


def batch_options(shape: TreeShape, lengths: Sequence[int] = ()) -> list[Option]:
    """What the batch may run: a plain step, `shape`, and a single beam (W = S = 1) of each
    length up to its own (`lengths`: those to offer besides, e.g. a calibration's)."""
    chains = {TreeShape(1, n, 1) for n in range(2, shape.beam_length + 1)}
    trees = {shape, *(TreeShape(shape.beam_width, n, shape.search_width) for n in lengths if 1 < n < shape.beam_length)}
    return [None, *sorted(trees | chains, key=lambda s: (s.beam_width, s.beam_length))]


def family(option: TreeShape) -> tuple[int, int, int | None]:
    """What the trees of one family share: all but their length."""
    return option.beam_width, option.search_width, option.node_budget


class DepthRates:
    """A family's acceptance at each depth d: of the rows whose drafts were accepted down to
    d - 1, the share that accepted one at d too (counts forgetting old rows by `RATE_DECAY`).
    A step's expected drafts are the sum over d of the product of the rates down to d, which
    holds whatever their shape. Each depth's rate is drawn towards the shallower one's with
    the weight of `PRIOR_DRAFTS` (the first's towards `prior`): depths the family has not
    reached for a while (only its short trees ran) follow the fresh shallow rate, geometrically."""

    def __init__(self, prior: float, depths: int):
        self.prior = prior
        self.judged = np.zeros(depths)  # rows whose drafts were judged at depth d + 1
        self.accepted = np.zeros(depths)  # ... and accepted there

    def observe(self, accepted: Sequence[int], length: int) -> None:
        """A step of this family's trees of `length` accepted `accepted` drafts per row."""
        drafts = np.asarray(accepted)[:, None]
        depth = np.arange(len(self.judged))[None, :]
        forget = RATE_DECAY ** len(accepted)
        self.judged = forget * self.judged + ((drafts >= depth) & (depth < length - 1)).sum(axis=0)
        self.accepted = forget * self.accepted + (drafts > depth).sum(axis=0)

    def drafts(self, length: int) -> float:
        """Expected accepted drafts per row of a tree of `length`."""
        total, reach, rate = 0.0, 1.0, self.prior
        for judged, accepted in zip(self.judged[: length - 1], self.accepted):
            rate = (accepted + PRIOR_DRAFTS * rate) / (judged + PRIOR_DRAFTS)
            reach *= rate
            total += reach
        return total


class BatchPolicy:
    """Chooses each step's option for a batch of B rows; `observe` every step's outcome."""

    def __init__(self, options: Sequence[Option], prior_rate: float = UNCALIBRATED_RATE):
        self.options = list(options)
        depths: dict[tuple, int] = {}  # family -> its longest tree's drafts
        for o in self.options:
            if o is not None:
                depths[family(o)] = max(depths.get(family(o), 0), o.beam_length - 1)
        self.rates = {f: DepthRates(prior_rate, d) for f, d in depths.items()}
        self.coefficients: np.ndarray | None = None
        self.timed: dict[tuple[int, Option], deque[float]] = {}  # (B, option) -> its last step times (ms)
        self.queued: list[Option] = []  # the rest of a probe's run, at `probe_rows` rows
        self.probe_rows = 0
        self.untimed = list(self.options)  # run each once, in turn, before choosing
        self.since_probe = 0
        self.next_probe = 0
        self.previous: tuple[int, Option] | None = None  # the last step's (B, option)

    def measured(self, rows: int, option: Option) -> float | None:
        """The median of the last step times at (B, option), or the least of one or two: a step
        that traced a compiled function anew, or ran beside other work, is slow, never fast."""
        times = self.timed.get((rows, option))
        if not times:
            return None
        return float(np.median(times)) if len(times) >= 3 else min(times)

    def ms(self, rows: int, option: Option) -> float:
        """A step's time: as measured at this batch size, else the cost model's."""
        measured = self.measured(rows, option)
        if measured is not None:
            return measured
        return max(float(self.coefficients @ features(rows, option)), 1e-3)

    def known_ms(self, rows: int, option: Option) -> float | None:
        """`ms`, or None before any step was timed (the cost model has nothing to go on)."""
        if self.coefficients is None and self.measured(rows, option) is None:
            return None
        return self.ms(rows, option)

    def tokens(self, option: Option) -> float:
        """Expected tokens per row of a step of `option` (the guaranteed one and its drafts)."""
        return 1.0 if option is None else 1 + self.rates[family(option)].drafts(option.beam_length)

    def speed(self, rows: int, option: Option) -> float:
        """Expected tokens per millisecond of the whole batch."""
        return rows * self.tokens(option) / self.ms(rows, option)

    def drafting_pays(self, rows: int, option: Option) -> bool:
        """Whether a step of `option` at `rows` rows is expected to beat a plain one (True
        before anything was timed)."""
        if option is None or self.known_ms(rows, None) is None:
            return True
        return self.speed(rows, option) >= self.speed(rows, None)

    def best(self, rows: int) -> Option:
        return max(self.options, key=lambda o: self.speed(rows, o))

    def choose(self, rows: int) -> Option:
        """The option of the next step of a batch of `rows`."""
        if self.queued and self.probe_rows == rows:
            return self.queued.pop()
        self.queued = []  # a probe measures one batch size: rows came or went, its rest would time nothing
        if self.untimed or self.coefficients is None:
            option = self.untimed.pop(0) if self.untimed else self.options[0]
            return self._probe(option, rows)
        best = self.best(rows)
        others = [o for o in self.options if o != best]
        self.since_probe += 1
        if others:
            candidate = others[self.next_probe % len(others)]
            if self.since_probe >= self.probe_interval(rows, best, candidate):
                self.since_probe, self.next_probe = 0, self.next_probe + 1
                return self._probe(candidate, rows)
        return best

    def probe_interval(self, rows: int, best: Option, probe: Option) -> int:
        """Steps of `best` before a probe of `probe`: at least `PROBE_EVERY`, and enough that
        the probe's loss against `best` is at most `PROBE_BUDGET` of the time."""
        best_ms = self.ms(rows, best)
        loss = PROBE_STEPS * (self.ms(rows, probe) - self.tokens(probe) * best_ms / self.tokens(best))
        steps = math.ceil(loss / (PROBE_BUDGET * best_ms)) if loss > 0 else 0
        return min(max(PROBE_EVERY, steps), MAX_PROBE_INTERVAL)

    def _probe(self, option: Option, rows: int) -> Option:
        self.queued, self.probe_rows = [option] * (PROBE_STEPS - 1), rows
        return option

    def observe(
        self, option: Option, rows: int, accepted: Sequence[int], seconds: float | None, following: Option
    ) -> None:
        """A step of `option` over `rows` rows accepted `accepted` drafts per row, and took
        `seconds` including the draft of `following` (the next step's option; None: it did
        other work too, untimed); only a step inside a run of its option at its batch size is
        timed (the first step at a new (B, option) traces compiled functions for its shapes)."""
        if option is not None and accepted:
            self.rates[family(option)].observe(accepted, option.beam_length)
        steady = self.previous == (rows, option) and following == option
        self.previous = (rows, option)
        if not steady or seconds is None:
            return
        self.timed.setdefault((rows, option), deque(maxlen=SAMPLES)).append(1e3 * seconds)
        self._fit()

    def _fit(self) -> None:
        """The cost model, fitted on every (B, option) measured (its `measured` time)."""
        keys = list(self.timed)
        if not keys:
            return
        x_all = np.array([features(rows, option) for rows, option in keys])
        ms = np.array([self.measured(rows, option) for rows, option in keys])
        used = list(range(x_all.shape[1]))
        while True:  # least squares with every cost >= 0: drop a feature whose fit went negative
            x = x_all[:, used]
            ridge = 1e-3 * np.eye(len(used))  # keeps the fit defined while one option has been timed
            fit = np.linalg.solve(x.T @ x + ridge, x.T @ ms)
            if fit.min() >= 0 or len(used) == 1:
                break
            used.pop(int(np.argmin(fit)))
        self.coefficients = np.zeros(x_all.shape[1])
        self.coefficients[used] = np.maximum(fit, 0)
