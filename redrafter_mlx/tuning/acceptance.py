"""A family of trees' acceptance by depth (`DepthRates`; a family: one width, search and
node budget, at every length), as the step policy counts it on its own steps, and its
geometric restatement for a calibration's single rate."""

from __future__ import annotations

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

    def drafts(self, length: int, prior: float, weight: float) -> float:
        """Expected accepted drafts per row of a tree of `length`."""
        total, reach, rate = 0.0, 1.0, self.first_rate(prior, weight)
        for d in range(length - 1):
            if d:
                rate = (self.accepted[d] + PRIOR_DRAFTS * rate) / (self.judged[d] + PRIOR_DRAFTS)
            reach *= rate
            total += reach
        return total
