"""How a generation drafts, as one value: the tree shape, its verify padding, the length
policy, the beam search's top-k and the context lookup.

`plan_drafting` builds the plan a (model, drafter, device, dtype) decodes fastest with,
from its calibration when one exists; `DraftPlan(TreeShape(W, L, S))` drafts one shape
every step (what tests and fixed-tree callers use).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..drafting import DraftFn, TreeShape
from ..drafting.beam_search import DRAFT_TOP_K
from .calibration import Calibration, find_calibration
from .policy import StepPolicy, family

# Used where no calibration exists: the paper's search (S = W), whose drafting cost is
# W beams whatever the drafter's head costs (a wider search pays only with a cheap head,
# which `redrafter tune` finds out).
FALLBACK_SHAPE = TreeShape(beam_width=3, beam_length=5, search_width=3)


def resolve_shape(
    calibration: Calibration | None,
    beam_width: int | None = None,
    beam_length: int | None = None,
    search_width: int | None = None,
    node_budget: int | None = None,
) -> TreeShape:
    """The tree to decode with: explicit values win; the rest come from the calibration's
    fastest matching shape, or from FALLBACK_SHAPE when there is none. node_budget 0: no
    budget (every prefix of the W beams is verified)."""
    chosen = calibration.best(beam_width, beam_length, search_width, node_budget) if calibration else None
    if chosen is None:
        chosen = FALLBACK_SHAPE
    width = beam_width or chosen.beam_width
    budget = chosen.node_budget if node_budget is None else node_budget or None
    return TreeShape(width, beam_length or chosen.beam_length, search_width or max(chosen.search_width, width), budget)


@dataclass(frozen=True)
class DraftPlan:
    """How a generation drafts (`decoding.generate_redrafter` takes it whole).

    `shape`: the tree every step drafts, or the one `policy` starts from when it chooses each
    step's tree or a plain step (`StepPolicy`). `verify_lengths[c]`: the length
    a tree of c unique tokens is padded to for the verify pass, up to the longest tree (a
    calibration's cheapest length >= c); None: `tree_attention.bucket`. `draft_top_k`: the
    beam search's top-k warp (not the sampler's top-k). `lookup`: a copy of what followed
    the text's last n-gram earlier may take the last beam (`drafting.lookup`).
    """

    shape: TreeShape = FALLBACK_SHAPE
    verify_lengths: Sequence[int] | None = None
    calibration: Calibration | None = None  # what the plan was chosen from, if anything
    policy: StepPolicy | None = None
    draft_top_k: int = DRAFT_TOP_K
    lookup: bool = True
    # Compiled draft phases of a stateless drafter, kept from one generation to the next
    # (they capture its weights: a changed drafter needs a new plan).
    phases: dict[TreeShape, tuple[object, DraftFn]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.policy is not None and self.policy.start != self.shape:
            raise ValueError(f"the policy starts at {self.policy.start}, the plan at {self.shape}")
        limit = self.longest.max_packed
        if self.verify_lengths and len(self.verify_lengths) <= limit:
            raise ValueError(
                f"verify_lengths must cover trees of up to {limit} tokens, got {len(self.verify_lengths) - 1}"
            )

    @property
    def longest(self) -> TreeShape:
        """The largest tree a step may draft: the policy's, else `shape`."""
        return self.policy.longest if self.policy is not None else self.shape

    @property
    def expected_tokens_per_s(self) -> float | None:
        """The calibration's prediction for the starting shape; None where it has none."""
        if self.calibration is None or self.shape not in self.calibration.shapes:
            return None
        return self.calibration.expected_tokens_per_s(self.shape)


def plan_drafting(
    model_source: Path,
    drafter_source: Path | None,
    device: str,
    dtype: str,
    beam_width: int | None = None,
    beam_length: int | None = None,
    search_width: int | None = None,
    node_budget: int | None = None,
    adaptive: bool = True,
    lookup: bool = True,
    max_beam_length: int | None = None,
) -> DraftPlan:
    """The shape (explicit values win, `resolve_shape`) and padding for this (model,
    drafter, device, dtype), from its calibration when one exists. With `adaptive` and no
    explicit beam length, a `StepPolicy` then chooses each step's tree, or a plain step
    where drafting does not pay (from the steps it times, the calibration as its prior).
    `max_beam_length`: the deepest beam the drafter drafts (None: any)."""
    calibration = find_calibration(model_source, drafter_source, device, dtype)
    shape = resolve_shape(calibration, beam_width, beam_length, search_width, node_budget)
    if max_beam_length and shape.beam_length > max_beam_length:  # an auto shape deeper than it drafts
        shape = replace(shape, beam_length=max_beam_length)
    policy = None
    if adaptive and beam_length is None:
        policy = StepPolicy(shape, calibration, deepest_calibrated(calibration, shape, max_beam_length))
    if calibration is None:
        return DraftPlan(shape, policy=policy, lookup=lookup)
    longest = policy.longest if policy else shape
    return DraftPlan(shape, calibration.verify_lengths(longest.max_packed), calibration, policy, lookup=lookup)


def deepest_calibrated(calibration: Calibration | None, shape: TreeShape, max_beam_length: int | None) -> int:
    """The deepest beam of `shape`'s family the calibration measured (at least `shape`'s),
    within `max_beam_length`, the deepest the drafter drafts."""
    known = calibration.shapes if calibration is not None else ()
    deepest = max([shape.beam_length, *(s.beam_length for s in known if family(s) == family(shape))])
    return min(deepest, max_beam_length) if max_beam_length else deepest
