"""Batched tree-verified decoding: B answers share every verify forward pass.

Each row is one request with its own prompt, sampler (and PRNG key), cache length,
candidate tree and accepted count. A step drafts all rows' trees, packs the B trees into
(B, P) with per-row tree masks and RoPE positions, verifies them in ONE forward pass over a
`BatchKVCache`, accepts per row and compacts each row's cache. Requests join (`add`; their
prompts are prefilled a chunk per step, in the rows' own pass, so running rows keep streaming,
from the `PromptCache`'s longest prefix of them where it holds one) and leave (`remove`, or
when their answer ends) between steps: continuous batching. The verify, accept and compact
are `tree_step`'s, which `loop.generate_redrafter` runs for one row; as there, the only host
read of a step fetches every row's accepted tokens and next tree size together, so a row's
tokens are those of its batch-1 decoding: greedy output identical, and sampling exact per
row, each request drawing from its own seed.

Stateless drafters (the RNN, Medusa, the MLP speculator) draft every row in one compiled
phase, and a `StepPolicy` may choose each step's tree (or a plain step) for the batch as
it is. Stateful ones (EAGLE 1/2/3, draft LLMs) keep a session per row, told what its row
emitted, and draft each row's tree from it (the served shape every step). No drafter:
plain decoding, as trees of one token.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable

import mlx.core as mx

from ..drafting import BatchDraftFn, TreeDrafter, TreeShape, make_batch_draft_fn, make_draft_fn, plain_trees
from ..drafting.beam_search import DRAFT_TOP_K
from ..models.cache import BatchKVCache
from ..models.llm import LLM, runs_together
from ..sampling import sampler_scores
from ..tuning.plan import FALLBACK_SHAPE
from ..tuning.policy import Choice, StepPolicy
from ..verify.tree_attention import TreeLayout, bucket, stack_trees
from .joining import Join, Joins, Pacer
from .logprobs import logprob_rows, read_logprobs
from .prompt_cache import PromptCache
from .rows import Request, Row, Update, lookup_texts
from .steps import GenerationStats, context_room
from .tree_step import Kept, keep_accepted, verify_trees

PREFILL_BUDGET = 256  # prompt tokens joins prefill per step while rows decode, at most


class BatchDecoder:
    """Continuous-batching tree-verified decoding: one verify pass per step for every row.
    Use: `add` requests, call `step` while `busy`, `remove` a request whose client left.
    `shape`: the tree every row drafts (default `FALLBACK_SHAPE`, W=3 L=5 S=3); with a
    `policy` (stateless drafters), each step's choice is the policy's, and `shape` is kept
    only while a seeded request samples; no drafter: plain decoding. `draft_top_k`: the beam
    search's top-k (each request's sampler has its own). `prefill_budget`: prompt tokens
    joins prefill per step while rows decode, at most (a chat turn within it whole, a longer
    prompt in chunks the `joining.Pacer` sizes). `prompt_cache`: finished rows' keys/values,
    reused by prompts that start with their tokens. `timed=False`: nothing follows this
    process's clock (no policy; joins prefill `prefill_budget`-token chunks), so that every
    rank of a distributed server makes the same choices."""

    def __init__(
        self,
        model: LLM,
        drafter: TreeDrafter | None,
        shape: TreeShape | None = None,
        *,
        draft_top_k: int = DRAFT_TOP_K,
        lookup: bool = True,
        eos_ids: Iterable[int] = (),
        policy: StepPolicy | None = None,
        prefill_budget: int = PREFILL_BUDGET,
        prompt_cache: PromptCache | None = None,
        timed: bool = True,
    ):
        self.stateful = drafter is not None and drafter.stateful
        self.model, self.drafter = model, drafter
        self.policy = policy if drafter is not None and not self.stateful and timed else None
        self.fixed: Choice = None if drafter is None else shape or FALLBACK_SHAPE
        self.choice = self.fixed  # the choice of the trees drafted last (self.beams)
        choices = self.policy.choices if self.policy is not None else [self.fixed]
        self.deepest = max((o.beam_length for o in choices if o is not None), default=1)  # text room
        self.lookup = lookup and drafter is not None
        self.eos_ids = frozenset(eos_ids)
        self.pacer, self.prompt_cache = Pacer(prefill_budget, timed), prompt_cache
        self.taps, self.width = (drafter.target_layers if drafter else ()), model.args.hidden_size
        self.joins = Joins(model, prompt_cache, self.taps, keep_states=self.stateful)
        self.riding = runs_together(model)  # joins' chunks ride in the rows' verify pass
        self.requests: dict[Hashable, Request] = {}
        self.cache = BatchKVCache(len(model.layers))
        self.rows: list[Row] = []
        self.beams: mx.array | None = None  # (B, W, L) each row's next tree
        self.layout: TreeLayout | None = None  # (B, W, L) unpack index and owner, (B,) count
        self.draft_top_k = draft_top_k
        self._drafts: dict[Choice, BatchDraftFn] = {}
        self.backlog = 0  # requests waiting outside (a server's queue beyond the batch): rows that end are replaced

    @property
    def busy(self) -> bool:
        """Rows decoding or requests joining."""
        return bool(self.rows or self.joins)

    def _draft(self, choice: Choice) -> BatchDraftFn:
        if choice not in self._drafts:
            drafter, shape = (None, TreeShape(1, 1, 1)) if choice is None else (self.drafter, choice)
            self._drafts[choice] = make_batch_draft_fn(
                drafter, self.model.embedding, shape, draft_top_k=self.draft_top_k, lookup=self.lookup
            )
        return self._drafts[choice]

    def add(self, handle: Hashable, request: Request) -> None:
        """Queue a request; its first update (the first token, or its end) comes from a later
        `step`, once its prompt is prefilled."""
        context_room(self.model, len(request.prompt))
        self.requests[handle] = request
        self.joins.add(handle, request.prompt)

    def _answer_room(self, request: Request) -> int:
        """The most tokens `request`'s answer may take: its max_tokens, within the context."""
        return min(request.options.max_tokens, context_room(self.model, len(request.prompt)))

    def _admit(self, joins: list[Join]) -> list[Update]:
        """Prefilled requests' first tokens and first trees, drafted together with ONE host
        read (a burst of joins costs one drafting, not one each); each row joins the batch
        unless its answer already ended (see its update's finish_reason)."""
        rows = []
        for join in joins:
            request = self.requests.pop(join.handle)
            max_tokens = self._answer_room(request)
            rows.append(Row.open(join, request, max_tokens, max_tokens + 2 * self.deepest if self.lookup else None))
        states = [mx.concatenate(join.states) if len(join.states) > 1 else join.states[0] for join in joins]
        feeds = [s[:, self.width :] if self.taps else s for s in states]
        logits = self.model.logits(mx.stack([s[-1, : self.width] for s in states]))  # (n, V)
        samplers = [row.sampler() for row in rows]
        tokens = mx.concatenate(
            [s(sampler_scores(s, logits[i])).astype(mx.int32).reshape(1) for i, s in enumerate(samplers)]
        )
        for i, row in enumerate(rows if self.lookup else []):  # the lookup reads the first token too
            row.text.stage(tokens[i : i + 1])
        lengths = mx.array([row.text.length + 1 for row in rows], mx.int32)
        if self.stateful:
            trees, embedding, top_k = [], self.model.embedding, self.draft_top_k
            for i, (row, feed) in enumerate(zip(rows, feeds)):
                row.session = self.drafter.open(self.model, row.request.prompt, feed)
                row.phase = make_draft_fn(row.session, embedding, self.choice, draft_top_k=top_k, lookup=self.lookup)
                row.session.stage(tokens[i : i + 1], feed[-1:], mx.array(1, mx.int32))
                trees.append(row.phase(feed[-1], tokens[i], row.text.tokens, lengths[i : i + 1]))
            beams, layout = stack_trees(trees)
        else:
            hidden = mx.stack([feed[-1] for feed in feeds])
            beams, layout = self._draft(self.choice)(
                hidden, tokens, lookup_texts(rows, self.lookup and self.choice is not None), lengths
            )
        read = mx.concatenate([tokens, layout.count])
        logprobs = {
            i: logprob_rows(samplers[i], logits[i][None], tokens[i : i + 1], row.request.logprobs)
            for i, row in enumerate(rows)
            if row.request.logprobs is not None
        }
        if logprobs:  # evaluated with the read: still one synchronisation
            mx.eval(read, logprobs)
        read = read.tolist()
        updates, joined = [], []
        for i, (row, join, first) in enumerate(zip(rows, joins, read)):
            row.count = read[len(rows) + i]
            reported = read_logprobs(logprobs[i].tolist(), [first]) if i in logprobs else None
            row.stats.prompt_time = time.perf_counter() - join.arrived
            row.started = time.perf_counter()
            stop = first in self.eos_ids
            finish = "stop" if stop else "length" if row.max_tokens == 1 else None
            row.stats.num_tokens, row.stats.finish_reason = int(not stop), finish or row.stats.finish_reason
            updates.append(Update(join.handle, [] if stop else [first], row.stats, finish, None if stop else reported))
            if finish is None:
                row.text.commit(1)
                row.sequence.append(first)
                self.rows.append(row)
                joined.append(i)
        if joined:
            self.cache.append([joins[i].cache for i in joined])
            index = mx.array(joined, mx.int32)
            beams, layout = beams[index], TreeLayout.combine(lambda a: a[index], layout)
            if self.beams is not None:
                beams = mx.concatenate([self.beams, beams])
                layout = TreeLayout.combine(lambda a, b: mx.concatenate([a, b]), self.layout, layout)
            self.beams, self.layout = beams, layout
        return updates

    def remove(self, handle: Hashable) -> Update | None:
        """Drop a request now (its client left); its update says "cancelled". None: no such
        request."""
        if self.joins.remove(handle) is not None:
            stats = GenerationStats(prompt_tokens=len(self.requests.pop(handle).prompt), finish_reason="cancelled")
            return Update(handle, [], stats, "cancelled")
        for i, row in enumerate(self.rows):
            if row.handle == handle:
                self._remember(i)
                self._keep([j for j in range(len(self.rows)) if j != i])
                row.stats.finish_reason = "cancelled"
                return Update(handle, [], row.stats, "cancelled")
        return None

    def _remember(self, b: int) -> None:
        """Offer row b's committed keys/values to the prompt cache."""
        if self.prompt_cache is not None:
            self.prompt_cache.insert(self.rows[b].sequence[: self.cache.lengths[b]], self.cache.committed(b))

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
        """`admit` then `verify`: every update of one step."""
        return [*self.admit(), *self.verify()]

    def admit(self) -> list[Update]:
        """Prefill joining prompts (within the budget while rows decode; all of them when none
        does) and admit those that completed: their first updates. They draft the choice of the
        batch they form: with no rows, the policy's for its size; else the rows' own, unless at
        the new size it loses to a plain step (one row's wide tree, then a burst of joins). A
        seeded sample joins no rows on the policy's trees: it verifies the served shape, as alone."""
        if not self.rows:
            ends = [self._answer_room(self.requests[join.handle]) - 1 for join in self.joins.waiting]
            self.choice = self._next_choice(len(ends), ends, draining=not self.backlog)
            joined = list(self.joins.advance(None))
        elif not self._follows_policy() and self.choice != self.fixed:
            return []  # the next verify drafts the served shape
        else:
            joined = list(self.joins.prefilled() if self.riding else self.joins.advance(self.pacer))
            rows = len(self.rows) + len(joined)
            if joined and self._follows_policy() and not self.policy.drafting_pays(rows, self.choice):
                self._cut_trees()
        return self._admit(joined) if joined else []

    def _cut_trees(self) -> None:
        """The rows' drafted trees cut to their roots: the next step is a plain one."""
        self.beams, self.layout = plain_trees(self.beams[:, 0, 0])
        self.choice = None
        for row in self.rows:
            row.count = 1

    def verify(self) -> list[Update]:
        """Verify every row's tree in one forward pass: an update per row (rows whose answer
        ended leave the batch)."""
        if not self.rows:
            return []
        updates = []
        tic = time.perf_counter()
        rows, beams, layout, choice = self.rows, self.beams, self.layout, self.choice
        size = bucket(max(row.count for row in rows), 1 if choice is None else choice.max_packed)
        width = size * len(rows)
        rides, paced = self.joins.next_chunks(self.pacer, len(rows), width) if self.riding else ([], 0)
        samplers = [row.sampler() for row in rows]
        segments = [segment for _, segment in rides]  # the oldest joins' next chunks ride in this pass
        verified = verify_trees(self.model, self.cache, beams, layout, size, samplers, self.taps, segments)
        results, feed, logits, chunks = verified.results, verified.feed, verified.logits, verified.chunks
        last = beams.shape[1] - 1  # accepted drafts no other beam holds came from this one
        copied = [layout.copied[b] & (layout.owner[b][r.beam, r.accepted] == last) for b, r in enumerate(results)]
        lengths = []
        for row, r in zip(rows, results):
            if self.lookup:
                row.text.stage(r.emitted)
            lengths.append(row.text.length + r.accepted + 1)
        hidden, next_tokens = verified.next_features(), verified.next_tokens()
        ends = [row.max_tokens - row.stats.num_tokens - 1 for row in rows]
        self.choice = self._next_choice(len(rows), ends, draining=not (self.joins or self.backlog))
        lengths = mx.stack(lengths).astype(mx.int32)
        if self.stateful:
            self.beams, self.layout = self._draft_rows(results, feed, hidden, next_tokens, lengths)
        else:
            draft = self._draft(self.choice)
            self.beams, self.layout = draft(
                hidden, next_tokens, lookup_texts(self.rows, self.lookup and self.choice is not None), lengths
            )
        length = beams.shape[-1]
        read = mx.concatenate([*verified.reads(), self.layout.count, mx.stack(copied).astype(mx.int32)])
        logprobs = {
            b: logprob_rows(samplers[b], logits[b][r.path], r.emitted, row.request.logprobs)
            for b, (row, r) in enumerate(zip(rows, results))
            if row.request.logprobs is not None
        }
        riding = [[chunk, join.cache.state()] for (join, _), chunk in zip(rides, chunks)]
        if logprobs or riding:  # evaluated with the step: still one synchronisation
            mx.eval(read, logprobs, riding)
        read = read.tolist()
        seconds = time.perf_counter() - tic
        self.pacer.stepped(seconds, width, sum(chunk.shape[1] for chunk in chunks), paced)
        for (join, _), chunk in zip(rides, chunks):
            self.joins.rode(join, chunk)
        n = len(rows)
        kept = Kept.read(read, n, length)
        accepted, counts, copied = kept.accepted, read[-2 * n : -n], read[-n:]
        if self.policy is not None:  # a step that carried a chunk is not timed
            self.policy.observe(choice, len(rows), accepted, None if rides else seconds, self.choice)
        keep_accepted(self.cache, verified.paths, kept)
        for row, a in zip(rows, accepted):
            if row.session is not None:
                row.session.commit(a + 1)
        keep = []
        plain_ms = self.policy.known_ms(n, None) if self.policy is not None else None
        cells = 1 if choice is None else choice.beam_width * choice.beam_length
        for b, row in enumerate(rows):
            new, finish = row.advance(kept.tokens[b], cells, counts[b], self.eos_ids)
            if finish:
                self._remember(b)
            else:
                keep.append(b)
            reported = read_logprobs(logprobs[b].tolist(), new) if b in logprobs else None
            copy = bool(copied[b] and accepted[b])
            updates.append(Update(row.handle, new, row.stats, finish, reported, accepted[b], copy, plain_ms))
        if len(keep) < len(rows):
            self._keep(keep)
        return updates

    def _draft_rows(
        self, results: list, feed: mx.array, hidden: mx.array, tokens: mx.array, lengths: mx.array
    ) -> tuple[mx.array, TreeLayout]:
        """Each row's tree from its own session, told the tokens its step emitted (lazily)."""
        trees = []
        for b, (row, r) in enumerate(zip(self.rows, results)):
            row.session.stage(r.emitted, feed[b][r.path], r.accepted + 1)
            trees.append(row.phase(hidden[b], tokens[b], row.text.tokens, lengths[b : b + 1]))
        return stack_trees(trees)

    def _follows_policy(self) -> bool:
        """Whether the policy chooses the trees: not while a request with a seed samples (a seed
        reproduces its answer only if the trees it verifies do not follow the timings)."""
        seeded = [r.request for r in self.rows] + list(self.requests.values())
        return self.policy is not None and not any(r.options.temp > 0 and r.options.seed is not None for r in seeded)

    def _next_choice(self, rows: int, ends: list[int], draining: bool) -> Choice:
        """The policy's choice for `rows` rows, told their tokens to go after the step under
        way (`ends`; at least 1: a row whose answer that step ends takes no further step) if
        the batch drains (no request waits to take an ending row's place), or the fixed shape."""
        if not self._follows_policy():
            return self.fixed
        return self.policy.choose(rows, [max(end, 1) for end in ends] if draining else None)
