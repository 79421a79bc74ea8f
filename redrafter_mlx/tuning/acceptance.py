"""A family of trees' acceptance by depth (`DepthRates`; a family: one width, search and
node budget, at every length), as the step policy counts it on its own steps, and its
geometric restatement for a calibration's single rate."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

PRIOR_DRAFTS = 4.0  # a depth's rate leans on its prior with the weight of this many rows
RATE_DECAY = 0.85  # per tree step, for the acceptance counts: about the last 6 steps' rows


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


class DepthRates:
    """A family's acceptance at each depth d: of the rows whose drafts were accepted down to
    d - 1 and whose trees reached d, the share that accepted one at d too. A step's expected
    drafts are the sum over d of the product of the rates down to d, whatever the tree's
    shape. The first depth's rate leans on a prior rate with the weight it is given; each
    deeper one on the shallower one's with the weight of `PRIOR_DRAFTS` rows, so depths not
    reached for a while (only short trees ran) follow the fresh shallow rate."""

    def __init__(self, depths: int):
        self.judged = np.zeros(depths)  # rows whose drafts were judged at depth d + 1
        self.accepted = np.zeros(depths)  # ... and accepted there

    def forget(self) -> None:
        """A tree step passed: older rows weigh `RATE_DECAY` as much."""
        self.judged *= RATE_DECAY
        self.accepted *= RATE_DECAY

    def observe(self, accepted: Sequence[int], length: int) -> None:
        """A step of this family's trees of `length` accepted `accepted` drafts per row."""
        drafts = np.asarray(accepted)[:, None]
        depth = np.arange(len(self.judged))[None, :]
        self.judged += ((drafts >= depth) & (depth < length - 1)).sum(axis=0)
        self.accepted += (drafts > depth).sum(axis=0)

    def first_rate(self, prior: float, weight: float) -> float:
        return (self.accepted[0] + weight * prior) / (self.judged[0] + weight)

    def reach(self, length: int, prior: float, weight: float) -> list[float]:
        """Per depth d = 1 .. length - 1, the chance that a row of a tree of `length` accepts d
        drafts or more."""
        reaches, reach, rate = [], 1.0, self.first_rate(prior, weight)
        for d in range(length - 1):
            if d:
                rate = (self.accepted[d] + PRIOR_DRAFTS * rate) / (self.judged[d] + PRIOR_DRAFTS)
            reach *= rate
            reaches.append(reach)
        return reaches

    def drafts(self, length: int, prior: float, weight: float) -> float:
        """Expected accepted drafts per row of a tree of `length`."""
        return sum(self.reach(length, prior, weight))


def capped_tokens(reach: Sequence[float], left: int) -> float:
    """Expected tokens a row with `left` tokens to go keeps of a step whose chance of giving it
    k tokens or more is `reach[k - 1]` (reach[0] = 1: the guaranteed token)."""
    return float(sum(reach[:left]))


def last_row_gain(reach: Sequence[float], ends: Sequence[int]) -> float:
    """Expected drop of the largest of `ends` (each row's tokens to go, each >= 1) over a step
    whose chance of giving a row k tokens or more is `reach[k - 1]`, the rows drawing
    independently. A batch's steps left fall only as fast as its rows furthest from their
    ends advance: of many rows in step, a tree moves the last of them by about one token."""
    longest, deepest = max(ends), len(reach)
    survive = [*reach, 0.0]  # P(tokens >= k), k = 1 .. deepest + 1
    low = max(1, longest - deepest)  # below it, the new largest is surely at least m
    expected = low - 1.0  # E[new largest] = sum over m >= 1 of P(new largest >= m)
    for m in range(low, longest):
        # a row ends the step below m iff it gets `end - m + 1` tokens or more
        all_below = math.prod(survive[min(end - m + 1, deepest + 1) - 1] for end in ends if end - m + 1 > 1)
        expected += 1.0 - all_below
    return longest - expected
