"""What a tree shape costs and gains on the machine it runs on, as measured, and where that is stored.

A step verifies a tree of P packed tokens and emits `tokens_per_step` tokens, so its speed
is tokens_per_step / (draft time + verify time(P) + overhead). Tokens per step grows with
the tree (W, L, S) and so does every cost, at rates that depend on the device: on a CPU
verifying 16 tokens costs about 1.6x verifying one, on a GPU about 1x. A `Calibration`
holds what `redrafter tune` measured for one (model, drafter, device, dtype): the verify
cost of every packed length, the draft cost and the replayed tokens/step (with the packed
lengths seen) of every tree shape in a grid. `best` then picks the shape with the most
expected tokens per second, and `verify_lengths` pads each tree to the cheapest measured
length that holds it (the cost is not monotonic in P on a CPU BLAS).

Calibrations are JSON files keyed by device and dtype: in the user's cache directory for
a (model, drafter) pair, or `calibration.json` in a drafter's folder (shipped drafters).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..drafting import TreeShape

CALIBRATION_FILE = "calibration.json"
CACHE_ENV = "REDRAFTER_CACHE_DIR"


@dataclass
class ShapeCost:
    """What one tree shape costs and gains, as measured."""

    tokens_per_step: float  # replayed on recorded greedy answers
    draft_ms: float  # one compiled draft phase
    packed: dict[int, int]  # packed length (unique tokens) -> steps that verified it

    def to_dict(self) -> dict:
        return {
            "tokens_per_step": self.tokens_per_step,
            "draft_ms": self.draft_ms,
            "packed": {str(k): v for k, v in sorted(self.packed.items())},
        }

    @classmethod
    def from_dict(cls, d: dict) -> ShapeCost:
        return cls(float(d["tokens_per_step"]), float(d["draft_ms"]), {int(k): int(v) for k, v in d["packed"].items()})


@dataclass
class Calibration:
    """Measured costs of one (model, drafter) on one device and dtype."""

    device: str
    dtype: str
    verify_ms: dict[int, float]  # packed length P -> one verify pass (forward, logits, argmax)
    overhead_ms: float  # per step, besides draft and verify: acceptance, cache, host read
    shapes: dict[TreeShape, ShapeCost] = field(default_factory=dict)
    ar_ms: float | None = None  # one autoregressive token, for the expected speed-up

    def padded_length(self, count: int) -> int:
        """The cheapest measured length >= count (count itself when none is measured)."""
        fits = [p for p in self.verify_ms if p >= count]
        return min(fits, key=lambda p: (self.verify_ms[p], p)) if fits else count

    def verify_lengths(self, limit: int) -> list[int]:
        """padded_length(c) for c = 0..limit: decoding's `verify_lengths`."""
        return [self.padded_length(max(c, 1)) for c in range(limit + 1)]

    def verify_ms_at(self, count: int) -> float:
        """A verify pass of a tree of `count` unique tokens, padded as decoding pads it."""
        p = self.padded_length(count)
        if p in self.verify_ms:
            return self.verify_ms[p]
        longest = max(self.verify_ms)  # past the measured range: extrapolate linearly
        return self.verify_ms[longest] * p / longest

    def step_ms(self, shape: TreeShape) -> float:
        """Expected time of one step: draft, verify at the replayed packed lengths, overhead."""
        cost = self.shapes[shape]
        steps = sum(cost.packed.values()) or 1
        verify = sum(n * self.verify_ms_at(count) for count, n in cost.packed.items()) / steps
        return cost.draft_ms + verify + self.overhead_ms

    def step_ms_at(self, shape: TreeShape, packed: int) -> float:
        """Expected time of one step of `shape` whose tree had `packed` unique tokens."""
        return self.shapes[shape].draft_ms + self.verify_ms_at(packed) + self.overhead_ms

    def expected_tokens_per_s(self, shape: TreeShape) -> float:
        return 1e3 * self.shapes[shape].tokens_per_step / self.step_ms(shape)

    def best(
        self,
        beam_width: int | None = None,
        beam_length: int | None = None,
        search_width: int | None = None,
        node_budget: int | None = None,
    ) -> TreeShape | None:
        """The fastest measured shape among those matching the given values (None: any;
        node_budget 0: shapes without a budget)."""
        wanted = {"beam_width": beam_width, "beam_length": beam_length, "search_width": search_width}

        def matches(s: TreeShape) -> bool:
            budget = node_budget is None or s.node_budget == (node_budget or None)
            return budget and all(v is None or getattr(s, k) == v for k, v in wanted.items())

        shapes = [s for s in self.shapes if matches(s)]
        return max(shapes, key=self.expected_tokens_per_s, default=None)

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "dtype": self.dtype,
            "overhead_ms": self.overhead_ms,
            "ar_ms": self.ar_ms,
            "verify_ms": {str(k): v for k, v in sorted(self.verify_ms.items())},
            "shapes": [
                {
                    "beam_width": s.beam_width,
                    "beam_length": s.beam_length,
                    "search_width": s.search_width,
                    **({"node_budget": s.node_budget} if s.node_budget else {}),
                    **c.to_dict(),
                }
                for s, c in self.shapes.items()
            ],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        def shape(e: dict) -> TreeShape:
            return TreeShape(e["beam_width"], e["beam_length"], e["search_width"], e.get("node_budget"))

        shapes = {shape(e): ShapeCost.from_dict(e) for e in d["shapes"]}
        return cls(
            d["device"],
            d["dtype"],
            {int(k): float(v) for k, v in d["verify_ms"].items()},
            float(d["overhead_ms"]),
            shapes,
            d.get("ar_ms"),
        )


def _key(device: str, dtype: str) -> str:
    return f"{device}/{dtype}"


def read_calibration(path: Path, device: str, dtype: str) -> Calibration | None:
    """The entry for (device, dtype) in a calibration file; None when absent or unreadable."""
    try:
        entry = json.loads(Path(path).read_text()).get("entries", {}).get(_key(device, dtype))
        return Calibration.from_dict(entry) if entry else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_calibration(path: Path, calibration: Calibration, about: dict | None = None) -> Path:
    """Add (or replace) this device's entry, keeping the other devices' entries."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.update(about or {})
    data.setdefault("entries", {})[_key(calibration.device, calibration.dtype)] = calibration.to_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)  # never leave a half-written file
    return path


def cache_dir() -> Path:
    """$REDRAFTER_CACHE_DIR, else $XDG_CACHE_HOME/redrafter-mlx, else ~/.cache/redrafter-mlx."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "redrafter-mlx"


def calibration_dir() -> Path:
    """Where `redrafter tune` stores the users' calibrations."""
    return cache_dir() / "calibration"


def calibration_path(model_source: Path, drafter_source: Path) -> Path:
    """Where `redrafter tune` stores the calibration of this (model, drafter) pair; the
    drafter's weights file's size and time are in the key, so retraining invalidates it."""
    stamp = [str(Path(model_source).resolve()), str(Path(drafter_source).resolve())]
    for file in sorted(Path(drafter_source).glob("*.safetensors")):
        st = file.stat()
        stamp.append(f"{file.name}:{st.st_size}:{st.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(stamp).encode()).hexdigest()[:16]
    return calibration_dir() / f"{digest}.json"


def find_calibration(model_source: Path, drafter_source: Path | None, device: str, dtype: str) -> Calibration | None:
    """The user's own calibration for this pair, else the one shipped in the drafter's folder."""
    if drafter_source is None:
        return None
    for path in (calibration_path(model_source, drafter_source), Path(drafter_source) / CALIBRATION_FILE):
        found = read_calibration(path, device, dtype)
        if found is not None:
            return found
    return None
