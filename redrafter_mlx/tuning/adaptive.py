"""The adaptive length policy: each step's beam length follows the acceptance seen so far.

A calibration says what every beam length accepts on average; text differs from the
average (code and repetitive text accept long beams, open prose does not), so
`AdaptiveLength` re-weighs those averages by the generation's own acceptance rate.
"""

from __future__ import annotations

from ..drafting import TreeShape
from .calibration import Calibration


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


class AdaptiveLength:
    """Each step's beam length, chosen from the acceptance seen so far in the generation.

    The calibration says how many drafts each length accepts on average, A(L) (replayed),
    and what a step of that length costs. Text differs from the average (code and
    repetitive text accept long beams, open prose does not), so the policy estimates the
    generation's own rate q at which a draft is accepted given its parent was (censored
    geometric maximum likelihood: a step that accepted a of L - 1 drafts counts a successes
    and one failure unless a = L - 1), exponentially forgotten so it follows the text, and
    started at the calibration's rate q0. It predicts A(L) * G(q, L) / G(q0, L) accepted
    drafts per length (G: `geometric_drafts`; the calibration's own numbers when q = q0),
    and drafts the length with the most expected tokens per second. Width and search width
    stay fixed. The choice depends only on tokens already decided, so acceptance stays exact.
    """

    def __init__(self, calibration: Calibration, shape: TreeShape, decay: float = 0.8, prior_steps: float = 3.0):
        self.calibration = calibration
        self.shapes = sorted(
            (s for s in calibration.shapes if (s.beam_width, s.search_width) == (shape.beam_width, shape.search_width)),
            key=lambda s: s.beam_length,
        )
        if shape not in self.shapes:
            raise ValueError(f"{shape} is not in the calibration: nothing to adapt from")
        self.start, self.decay, self.prior_steps = shape, decay, prior_steps
        self.prior_rate = geometric_rate(self._drafts(shape), shape.beam_length)
        self.reset()

    def reset(self) -> None:
        """Forget the previous generation: start from the calibration's rate."""
        self.successes = self.prior_steps * self.prior_rate
        self.failures = self.prior_steps * (1 - self.prior_rate)

    def _drafts(self, shape: TreeShape) -> float:
        return self.calibration.shapes[shape].tokens_per_step - 1

    def observe(self, shape: TreeShape, accepted: int) -> None:
        """A step of `shape` accepted `accepted` drafted tokens."""
        self.successes = self.decay * self.successes + accepted
        self.failures = self.decay * self.failures + (accepted < shape.beam_length - 1)

    def choose(self) -> TreeShape:
        """The shape to draft next."""
        rate = self.successes / max(self.successes + self.failures, 1e-9)

        def speed(shape: TreeShape) -> float:
            prior = geometric_drafts(self.prior_rate, shape.beam_length)
            scale = geometric_drafts(rate, shape.beam_length) / prior if prior > 0 else 1.0
            tokens = 1 + min(self._drafts(shape) * scale, shape.beam_length - 1)
            return tokens / self.calibration.step_ms(shape)

        return max(self.shapes, key=speed)

    @property
    def longest(self) -> TreeShape:
        return self.shapes[-1]
