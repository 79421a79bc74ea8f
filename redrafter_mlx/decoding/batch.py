"""Batched tree-verified decoding: B answers share every verify forward pass.

Each row is one request with its own prompt, sampler (and PRNG key), cache length,
candidate tree and accepted count. A step drafts all rows' trees in one batched draft
phase, packs the B trees into (B, P) with per-row tree masks and RoPE positions, verifies
them in ONE forward pass over a `BatchKVCache`, accepts per row and compacts each row's
cache. Rows join (`add`: prefill, first token, first tree) and leave (`remove`, or when
their answer ends) between steps: continuous batching. As in `loop.generate_redrafter`,
the only host read of a step fetches every row's accepted tokens and next tree size
together, so a row's tokens are those of its batch-1 decoding: greedy output identical, and
sampling exact per row, each request drawing from its own seed.

Stateless drafter kinds only (the RNN, Medusa, the MLP speculator): a stateful kind's
cache would need a batch of its own. No drafter decodes plainly, as trees of one token.
"""

from __future__ import annotations

import random
import time
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

import mlx.core as mx

from ..drafting import TreeDrafter, TreeShape, make_batch_draft_fn
from ..drafting.beam_search import DRAFT_TOP_K
from ..drafting.lookup import TextBuffer
from ..errors import InputError
from ..models.cache import BatchKVCache, KVCache
from ..models.llm import LLM, prefill
from ..options import DecodingOptions
from ..sampling import sampler_scores
from ..tuning.plan import FALLBACK_SHAPE
from ..verify.acceptance import accept
from ..verify.tree_attention import TreeLayout, bucket, pack
from .steps import GenerationStats, answer_part, context_room


@dataclass
class Request:
    """One answer to decode: prompt token ids and how to decode them (the tree fields of
    `options` are the batch's, not the request's)."""

    prompt: list[int]
    options: DecodingOptions = DecodingOptions()


@dataclass
class Update:
    """What a row produced since the last update: tokens (never an EOS) and, once its answer
    ended, why ("stop": EOS; "length": max_tokens or the context; "cancelled": removed)."""

    handle: Hashable
    tokens: list[int]
    stats: GenerationStats
    finish_reason: str | None = None


@dataclass
class _Row:
    handle: Hashable
    request: Request
    max_tokens: int
    text: TextBuffer
    key: mx.array
    count: int  # unique tokens of the row's drafted tree (its packed length before padding)
    stats: GenerationStats
    started: float = field(default_factory=time.perf_counter)

    def sampler(self):
        """This step's sampler; the row's key advances (lazily) on every draw."""
        self.key, key = mx.random.split(self.key)
        return self.request.options.sampler(key)


class BatchDecoder:
    """Continuous-batching tree-verified decoding: one verify pass per step for every row.
    Use: `add` requests, call `step` while `rows` is non-empty, `remove` a row whose client
    left. `shape`: the tree every row drafts (default `FALLBACK_SHAPE`, W=3 L=5 S=3); no drafter:
    plain decoding. `draft_top_k`: the beam search's top-k (each request's sampler has its own)."""

    def __init__(
        self,
        model: LLM,
        drafter: TreeDrafter | None,
        shape: TreeShape | None = None,
        *,
        draft_top_k: int = DRAFT_TOP_K,
        lookup: bool = True,
        eos_ids: Iterable[int] = (),
    ):
        if drafter is not None and drafter.stateful:
            raise InputError(
                f"batched decoding drafts with stateless drafter kinds (redrafter, medusa, "
                f"mlp-speculator), not {drafter.kind}"
            )
        self.model, self.drafter = model, drafter
        self.shape = TreeShape(1, 1, 1) if drafter is None else shape or FALLBACK_SHAPE
        self.lookup = lookup and drafter is not None
        self.eos_ids = frozenset(eos_ids)
        self.cache = BatchKVCache(len(model.layers))
        self.rows: list[_Row] = []
        self.beams: mx.array | None = None  # (B, W, L) each row's next tree
        self.layout: TreeLayout | None = None  # (B, W, L) unpack index and owner, (B,) count
        self.padded = [bucket(c, self.shape.max_packed) for c in range(self.shape.max_packed + 1)]
        self._draft = make_batch_draft_fn(
            drafter, model.embedding, self.shape, draft_top_k=draft_top_k, lookup=self.lookup
        )

    def add(self, handle: Hashable, request: Request) -> Update:
        """Prefill a request, emit its first token and draft its first tree; the row joins the
        batch unless its answer already ended (see the update's finish_reason)."""
        options = request.options
        max_tokens = min(options.max_tokens, context_room(self.model, len(request.prompt)))
        seed = options.seed if options.seed is not None else random.getrandbits(63)
        stats = GenerationStats(prompt_tokens=len(request.prompt))
        room = max_tokens + 2 * self.shape.beam_length
        text = TextBuffer(request.prompt, room) if self.lookup else TextBuffer([], 1)
        row = _Row(handle, request, max_tokens, text, mx.random.key(seed), 0, stats)
        tic = time.perf_counter()
        cache = KVCache(len(self.model.layers))
        hidden = prefill(self.model, mx.array(request.prompt, mx.uint32), cache)[-1]
        sampler = row.sampler()
        token = sampler(sampler_scores(sampler, self.model.logits(hidden))).astype(mx.int32).reshape(1)
        if self.lookup:
            text.stage(token)
        beams, layout = self._draft(hidden[None], token, text.tokens, mx.array([text.length + 1], mx.int32))
        first, row.count = mx.concatenate([token, layout.count]).tolist()
        stats.prompt_time = time.perf_counter() - tic
        row.started = time.perf_counter()
        if first in self.eos_ids:
            stats.finish_reason = "stop"
            return Update(handle, [], stats, "stop")
        stats.num_tokens = 1
        if max_tokens == 1:
            return Update(handle, [first], stats, "length")
        text.commit(1)
        self.cache.append(cache)
        self.rows.append(row)
        self.beams = beams if self.beams is None else mx.concatenate([self.beams, beams])
        self.layout = (
            layout
            if self.layout is None
            else TreeLayout.combine(lambda a, b: mx.concatenate([a, b]), self.layout, layout)
        )
        return Update(handle, [first], stats)

    def remove(self, handle: Hashable) -> Update | None:
        """Drop a row now (its client left); its update says "cancelled". None: no such row."""
        for i, row in enumerate(self.rows):
            if row.handle == handle:
                self._keep([j for j in range(len(self.rows)) if j != i])
                row.stats.finish_reason = "cancelled"
                return Update(handle, [], row.stats, "cancelled")
        return None

    def _keep(self, keep: list[int]) -> None:
        self.rows = [self.rows[i] for i in keep]
        self.cache.keep(keep)
        if not keep:
            self.beams = self.layout = None
            return
        index = mx.array(keep, mx.int32)
        self.beams = self.beams[index]
        self.layout = TreeLayout.combine(lambda a: a[index], self.layout)

    def step(self) -> list[Update]:
        """Verify every row's tree in one forward pass; an update per row (rows whose answer
        ended leave the batch)."""
        rows, beams, layout = self.rows, self.beams, self.layout
        if not rows:
            return []
        size = self.padded[max(row.count for row in rows)]
        packed = [pack(beams[b], TreeLayout.combine(lambda a, b=b: a[b], layout), size) for b in range(len(rows))]
        tokens = mx.stack([p.tokens for p in packed])
        positions = mx.stack([p.depth for p in packed]) + self.cache.offsets()[:, None]
        mask = self.cache.attention_mask(mx.stack([p.mask for p in packed]))
        block = self.model(tokens, self.cache, positions, mask)  # (B, P, D)
        logits = self.model.logits(block)
        results = []
        for b, row in enumerate(rows):
            sampler = row.sampler()
            results.append(accept(beams[b], layout.unpack_index[b], sampler_scores(sampler, logits[b]), sampler))
        self.cache.gather_pending(mx.stack([r.path for r in results]))
        lengths = []
        for row, r in zip(rows, results):
            if self.lookup:
                row.text.stage(r.emitted)
            lengths.append(row.text.length + r.accepted + 1)
        hidden = mx.stack([block[b, r.next_index] for b, r in enumerate(results)])
        next_tokens = mx.stack([r.next_token for r in results])
        self.beams, self.layout = self._draft(hidden, next_tokens, self._texts(), mx.stack(lengths).astype(mx.int32))
        length = beams.shape[-1]
        read = mx.concatenate(
            [
                mx.stack([r.accepted for r in results]),
                mx.stack([r.emitted for r in results]).reshape(-1),
                self.layout.count,
            ]
        ).tolist()
        accepted, emitted, counts = read[: len(rows)], read[len(rows) : -len(rows)], read[-len(rows) :]
        self.cache.commit([a + 1 for a in accepted])
        updates, keep = [], []
        now = time.perf_counter()
        for b, row in enumerate(rows):
            row.text.commit(accepted[b] + 1)
            stats = row.stats
            stats.accepted_per_step.append(accepted[b] + 1)
            stats.verified_tokens.append(row.count)
            stats.tree_cells.append(self.shape.beam_width * self.shape.beam_length)
            row.count = counts[b]
            new, stop = answer_part(
                emitted[b * length : b * length + accepted[b] + 1], self.eos_ids, row.max_tokens - stats.num_tokens
            )
            stats.num_tokens += len(new)
            stats.generation_time = now - row.started
            finish = "stop" if stop else "length" if stats.num_tokens >= row.max_tokens else None
            if finish:
                stats.finish_reason = finish
            else:
                keep.append(b)
            updates.append(Update(row.handle, new, stats, finish))
        if len(keep) < len(rows):
            self._keep(keep)
        return updates

    def _texts(self) -> mx.array:
        """(B, N) every row's lookup buffer, padded to the longest."""
        if not self.lookup:
            return mx.zeros((len(self.rows), 1), mx.int32)
        width = max(row.text.tokens.shape[1] for row in self.rows)
        return mx.concatenate(
            [mx.pad(row.text.tokens, [(0, 0), (0, width - row.text.tokens.shape[1])]) for row in self.rows]
        )
