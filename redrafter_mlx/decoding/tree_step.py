"""The tree step every decoder runs, for one row or B: the rows' drafted trees packed,
verified in ONE forward pass, accepted per row (`verify_trees`), read by the host once
(`Verified.reads`, then `Kept.read`), and the accepted keys/values kept (`keep_accepted`).

`loop.generate_redrafter` (one answer, its cache a `KVCache`) and `batch.BatchDecoder` (B
requests over a `BatchKVCache`) differ only around it: how they draft and choose trees,
when prompts join, and what they yield. So a one-row answer is verified and accepted the
same way by `generate` and by `serve`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx

from ..models.cache import BatchKVCache, KVCache
from ..models.llm import LLM, Segment
from ..runtime.timers import PhaseTimer
from ..sampling import Sampler, sampler_scores
from ..verify.acceptance import Acceptance, accept
from ..verify.tree_attention import TreeLayout, pack


@dataclass
class Verified:
    """One verify pass over B rows, lazy: what each row accepted, and what its next draft reads."""

    results: list[Acceptance]
    feed: mx.array  # (B, P, F) what the drafter reads at each packed position
    logits: mx.array  # (B, P, V)
    chunks: list[mx.array]  # the outputs of the segments that rode in the pass

    @property
    def paths(self) -> mx.array:
        """(B, L) packed positions of each row's chosen beam."""
        return mx.stack([r.path for r in self.results])

    def next_tokens(self) -> mx.array:
        """(B,) each row's guaranteed token for its next step."""
        return mx.stack([r.next_token for r in self.results])

    def next_features(self) -> mx.array:
        """(B, F) what the drafter reads of the state that predicted each next token."""
        return mx.stack([self.feed[b, r.next_index] for b, r in enumerate(self.results)])

    def reads(self) -> list[mx.array]:
        """What the host reads of the step, flat: accepted (B,), emitted (B*L,), paths (B*L,)."""
        return [
            mx.stack([r.accepted for r in self.results]),
            mx.stack([r.emitted for r in self.results]).reshape(-1),
            self.paths.reshape(-1),
        ]


def verify_trees(
    model: LLM,
    cache: KVCache | BatchKVCache,
    beams: mx.array,
    layout: TreeLayout,
    size: int,
    samplers: Sequence[Sampler],
    taps: tuple[int, ...] = (),
    rides: Sequence[Segment] = (),
    timer: PhaseTimer | None = None,
) -> Verified:
    """Verify B rows' trees `beams` (B, W, L) in one forward pass: each row's unique tokens
    packed into `size` slots at RoPE positions after its committed cache, under its tree mask;
    row b accepts with `samplers[b]`. `rides`: other sequences (joining prompts' chunks) run in
    the same pass, so the weights stream once for all (`runs_together` models only)."""
    timer = timer or PhaseTimer()
    packed = [pack(beams[b], TreeLayout.combine(lambda a, b=b: a[b], layout), size) for b in range(beams.shape[0])]
    tokens = mx.stack([p.tokens for p in packed])
    positions = mx.stack([p.depth for p in packed]) + cache.offsets()[:, None]
    mask = cache.attention_mask(mx.stack([p.mask for p in packed]))
    timer.mark("pack", tokens, mask)
    if rides:
        block, *chunks = model.run_together([Segment(tokens, cache, positions, mask), *rides], taps)
    else:
        block, chunks = model(tokens, cache, positions, mask, taps), []  # (B, P, D [+ taps])
    width = model.args.hidden_size
    feed = block[..., width:] if taps else block
    logits = model.logits(block[..., :width] if taps else block)
    scores = [sampler_scores(sampler, logits[b]) for b, sampler in enumerate(samplers)]
    timer.mark("verify", *scores)
    results = [accept(beams[b], layout.unpack_index[b], s, samplers[b]) for b, s in enumerate(scores)]
    timer.mark("accept", *(r.emitted for r in results))
    return Verified(results, feed, logits, chunks)


@dataclass
class Kept:
    """What the host read of a verified step: per row, the drafts it accepted, the tokens it
    emitted (those drafts, then the LLM's next token) and their packed positions."""

    accepted: list[int]
    tokens: list[list[int]]
    paths: list[list[int]]

    @classmethod
    def read(cls, values: list[int], rows: int, length: int) -> Kept:
        """Parse the front of a host read that began with `Verified.reads()` (beams of `length`)."""
        accepted = values[:rows]
        emitted, paths = values[rows : rows * (1 + length)], values[rows * (1 + length) : rows * (1 + 2 * length)]
        cut = [(b * length, b * length + a + 1) for b, a in enumerate(accepted)]
        return cls(accepted, [emitted[i:j] for i, j in cut], [paths[i:j] for i, j in cut])


def keep_accepted(cache: KVCache | BatchKVCache, paths: mx.array, kept: Kept) -> None:
    """Commit each row's accepted tokens' keys/values, moving them to the front of its pending
    block only when some row's are not there already (the first beam's are)."""
    if any(path != list(range(len(path))) for path in kept.paths):
        cache.gather_pending(paths)
    cache.commit([len(path) for path in kept.paths])
