"""Phase timing that respects lazy evaluation.

MLX builds graphs lazily, so a clock stopped before evaluation measures graph building
only. `PhaseTimer.mark` evaluates a phase's outputs before reading the clock, which is
exactly why it is off by default: the evaluations serialise the pipeline. When disabled,
`mark` does nothing at all, so the normal path pays nothing.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import mlx.core as mx


class PhaseTimer:
    def __init__(self, enabled: bool = False):
        self.enabled = enabled
        self.totals: dict[str, float] = defaultdict(float)
        self.events: list[tuple[str, float, float]] = []  # (phase, start, duration) seconds
        self._last = time.perf_counter()

    def start(self) -> None:
        self._last = time.perf_counter()

    def mark(self, phase: str, *outputs) -> None:
        """Close `phase`: evaluate its outputs (when enabled) and charge the elapsed time."""
        if not self.enabled:
            return
        if outputs:
            mx.eval(*outputs)
        now = time.perf_counter()
        self.totals[phase] += now - self._last
        self.events.append((phase, self._last, now - self._last))
        self._last = now

    def write_chrome_trace(self, path: Path) -> Path:
        """Save the phases as a Chrome trace (open in chrome://tracing or Perfetto)."""
        origin = self.events[0][1] if self.events else 0.0
        trace = [
            {"name": phase, "ph": "X", "ts": (start - origin) * 1e6, "dur": duration * 1e6, "pid": 0, "tid": 0}
            for phase, start, duration in self.events
        ]
        Path(path).write_text(json.dumps({"traceEvents": trace, "displayTimeUnit": "ms"}))
        return Path(path)
