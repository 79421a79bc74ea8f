"""Decoding loops: plain autoregressive and ReDrafter, with one interface.

Both are generators yielding `Step`s (the tokens a step produced plus the running
`GenerationStats`, `steps.py`), so the CLI, chat and bench never care which one runs
(`decode_steps` picks ReDrafter when there is a drafter, drafting as a `tuning.DraftPlan`
says). A tree step's verify, accept and compact are `tree_step`'s, the kernel the batch
runs too. Like mlx-lm's `generate_step`, the next forward pass is queued with `mx.async_eval`
before the current token is read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import mlx.core as mx

from ..drafting import DraftFn, TreeDrafter, TreeShape, make_draft_fn
from ..drafting.lookup import TextBuffer
from ..models.cache import KVCache
from ..models.llm import LLM, prefill
from ..runtime.timers import PhaseTimer
from ..sampling import Sampler, make_greedy_or_sampler, sampler_scores
from ..tuning.plan import DraftPlan
from ..verify.tree_attention import TreeLayout, bucket
from .steps import GenerationStats, Step, answer_part, context_room
from .tree_step import Kept, Verified, keep_accepted, verify_trees


def generate_ar(
    model: LLM,
    prompt: list[int],
    *,
    max_tokens: int = 256,
    sampler: Sampler | None = None,
    eos_ids: set[int] | frozenset[int] = frozenset(),
    cache: KVCache | None = None,
) -> Iterator[Step]:
    """Plain autoregressive decoding: one forward pass, one token.

    `cache` may already hold earlier turns; `prompt` is then only the new tokens. On return
    the cache holds the prompt and every emitted token except the last one. Generation
    stops before an EOS token, which is not emitted (as in mlx-lm).
    """
    sampler = sampler or make_greedy_or_sampler()
    cache = cache if cache is not None else model.make_cache()
    stats = GenerationStats(prompt_tokens=len(prompt))
    if max_tokens <= 0:
        return
    start_length = cache.length

    def next_token(hidden: mx.array) -> mx.array:
        return sampler(sampler_scores(sampler, model.logits(hidden)))

    def forward(token: mx.array) -> mx.array:
        hidden = model(token.reshape(1, 1), cache)
        cache.commit(1)
        return next_token(hidden[0, -1])

    try:
        tic = time.perf_counter()
        token = next_token(prefill(model, mx.array(prompt, mx.uint32), cache)[-1])
        mx.async_eval(token)
        while True:
            upcoming = forward(token) if stats.num_tokens + 1 < max_tokens else None
            if upcoming is not None:
                mx.async_eval(upcoming)
            value = token.item()
            now = time.perf_counter()
            if stats.num_tokens == 0 and not stats.prompt_time:
                stats.prompt_time, tic = now - tic, now
            else:
                stats.accepted_per_step.append(1)
            if value in eos_ids:
                stats.finish_reason = "stop"
                break
            stats.num_tokens += 1
            stats.generation_time = now - tic
            yield Step([value], stats)
            if upcoming is None:
                break
            token = upcoming
    finally:
        cache.trim(start_length + len(prompt) + max(stats.num_tokens - 1, 0))


@dataclass
class Unread:
    """A step's lazy outcome, before the host reads it: the tokens it emitted, what the drafter
    reads of the LLM state that predicted each (its hidden state, or EAGLE-3's tapped layer
    inputs), how many are real, and the next step's guaranteed token with the state that
    predicted it; for a tree step also the verify pass (`tree_step.Verified`)."""

    tokens: mx.array  # (n,) int32; a tree step's are padded to its beam length
    features: mx.array  # (n, F): F = D, or D per tapped layer
    count: mx.array  # () int32 (plain steps and prefill: 1)
    token: mx.array  # () int32: tokens[count - 1], the next step's guaranteed token
    hidden: mx.array  # (F,): features[count - 1]
    tree: TreeShape | None = None  # the tree it verified; None: a plain step (or prefill)
    verified: Verified | None = None
    packed: int = 1  # unique tokens verified

    def reads(self) -> list[mx.array]:
        """What the host reads of this step: `Verified.reads` (one row), or [token]."""
        return [self.tokens] if self.verified is None else self.verified.reads()


def generate_redrafter(
    model: LLM,
    drafter: TreeDrafter,
    prompt: list[int],
    plan: DraftPlan | None = None,
    *,
    max_tokens: int = 256,
    sampler: Sampler | None = None,
    eos_ids: set[int] | frozenset[int] = frozenset(),
    cache: KVCache | None = None,
    context: Sequence[int] = (),
    timer: PhaseTimer | None = None,
) -> Iterator[Step]:
    """Speculative decoding (paper Sec. 3.4) with any drafter kind, each step drafting as
    `plan` says (None: `DraftPlan()`): its one shape (`FALLBACK_SHAPE` by default), or what `plan.policy` chooses
    per step for one row (a tree, or no tree, a plain step, where drafting does not pay: `StepPolicy`).

    A tree step: (1) the guaranteed token and hidden state come from the previous step;
    (2) the drafter (any `drafting.TreeDrafter`; a stateful one through the session `open`
    returns, told the emitted tokens) beam-searches W x L candidates (keeping S beams,
    of which the W that cover the most drafter probability are verified: `beam_search`; S at
    most W: the paper's search); with `plan.lookup`, the last of them gives way to a copy of
    what followed the text's last n-gram earlier in `context`, the prompt or the answer, when
    it occurred (`lookup.py`), or else to the drafter's stored continuation of it
    (`drafter.ngrams`, `ngrams.py`); (3) the unique prefixes are packed and verified in ONE
    forward pass with a tree mask, padded to `plan.verify_lengths` (default: `bucket`);
    (4) the longest accepted prefix is kept and the cache compacted to it, moving the kept
    positions to the front only when they are not there already (the first beam's are);
    3 and 4 are `tree_step`'s, for one row.
    A plain step is `generate_ar`'s: one token forward, queued before the previous token is
    read when the step before was plain too.

    Each step's work is built lazily before the previous step is read, so the one host read
    per step fetches the previous step's tokens (and its accepted path) together with the
    next tree's packed length. Tokens emitted by plain steps are told to the drafter and the
    lookup's text when drafting resumes. Same interface and cache contract as `generate_ar`;
    `context` holds the tokens before `prompt` that the cache already has (earlier turns),
    for the lookup and stateful drafters.
    """
    plan = plan or DraftPlan()  # a fresh default: a plan keeps the drafter's compiled phases
    policy, lookup, longest = plan.policy, plan.lookup, plan.longest
    if policy is not None:
        policy.reset()
    sampler = sampler or make_greedy_or_sampler()
    cache = cache if cache is not None else model.make_cache()
    timer = timer or PhaseTimer()
    stats = GenerationStats(prompt_tokens=len(prompt))
    if max_tokens <= 0:
        return
    start_length = cache.length
    limit = longest.max_packed
    padded = list(plan.verify_lengths or [bucket(c, limit) for c in range(limit + 1)])
    before = dict(timer.totals)
    # The lookup's context; without the lookup an empty buffer keeps the draft's inputs uniform.
    text = TextBuffer([*context, *prompt], max_tokens + 2 * longest.beam_length) if lookup else TextBuffer([], 1)
    # Compiled draft phases by tree, with the session they draft for: the plan keeps a
    # stateless drafter's across generations; a stateful session lives one generation.
    own_phases: dict[TreeShape, tuple[TreeDrafter, DraftFn]] = {}
    traced = False  # a phase was traced since the last read: that interval is not timed
    untold: list[int] = []  # emitted tokens the drafter and the text were not told yet (plain steps)
    untold_features: list[mx.array] = []
    taps, width = drafter.target_layers, model.args.hidden_size

    def split(rows: mx.array) -> tuple[mx.array, mx.array]:
        """The LLM's hidden states (what its head reads) and what the drafter reads of them:
        the same, or the inputs of the drafter's `target_layers` (EAGLE-3)."""
        return (rows, rows) if not taps else (rows[..., :width], rows[..., width:])

    def next_token(hidden: mx.array) -> mx.array:
        return sampler(sampler_scores(sampler, model.logits(hidden))).astype(mx.int32).reshape(())

    def plain(token: mx.array) -> Unread:
        """A plain step: `token` joins the cache, and the LLM's next token follows it."""
        hidden, feed = split(model(token.reshape(1, 1), cache, taps=taps)[0, -1])
        cache.commit(1)
        tokens = next_token(hidden)[None]
        mx.async_eval(tokens)  # the array the host reads: computed ahead of any later step
        timer.mark("plain", tokens)
        return Unread(tokens, feed[None], mx.array(1, mx.int32), tokens[0], feed)

    def draft(tree: TreeShape, step: Unread) -> tuple[mx.array, TreeLayout]:
        """The tree after `step`, once the untold tokens and step's (lazy) ones join the text."""
        nonlocal traced
        phases = own_phases if session.stateful else plan.phases
        if tree not in phases or phases[tree][0] is not session:
            phases[tree] = (
                session,
                make_draft_fn(session, model.embedding, tree, draft_top_k=plan.draft_top_k, lookup=lookup),
            )
            traced = True
        tokens, features, count = step.tokens, step.features, step.count
        if untold:
            tokens = mx.concatenate([mx.array(untold, mx.int32), tokens])
            features = mx.concatenate([*untold_features, features])
            count = count + len(untold)
        session.stage(tokens, features, count)
        if lookup:
            text.stage(tokens)
        beams, layout = phases[tree][1](step.hidden, step.token, text.tokens, text.length + count[None])
        timer.mark("draft", beams, layout.unpack_index)
        return beams, layout

    def verify(tree: TreeShape, beams: mx.array, layout: TreeLayout, count: int) -> Unread:
        """A tree step: the one kernel every decoder runs (`tree_step`), for this one row."""
        one_row = TreeLayout.combine(lambda a: a[None], layout)
        verified = verify_trees(model, cache, beams[None], one_row, padded[count], [sampler], taps, timer=timer)
        r, feed = verified.results[0], verified.feed[0]
        return Unread(r.emitted, feed[r.path], r.accepted + 1, r.next_token, feed[r.next_index], tree, verified, count)

    try:
        tic = time.perf_counter()
        timer.start()
        prompt_hidden, prompt_feed = split(prefill(model, mx.array(prompt, mx.uint32), cache, taps))
        first = next_token(prompt_hidden[-1])
        timer.mark("prefill", first)
        session = drafter.open(model, [*context, *prompt], prompt_feed)
        step = Unread(first[None], prompt_feed[-1:], mx.array(1, mx.int32), first, prompt_feed[-1])
        read_at = None
        while True:
            # Build the next step before reading this one: a tree's draft, or a plain step
            # when the cache already holds everything but this step's token.
            final = stats.num_tokens + 1 >= max_tokens  # this step fills the answer
            choice = None if final else (policy.choose(1) if policy is not None else plan.shape)
            upcoming = beams = layout = None
            traced = False
            if choice is not None:
                beams, layout = draft(choice, step)
            elif not final and step.tree is None:
                upcoming = plain(step.token)
            reads = [*step.reads(), *([layout.count[None]] if layout else [])]
            values = (reads[0] if len(reads) == 1 else mx.concatenate(reads)).tolist()
            now = time.perf_counter()
            if step.verified is None:
                tokens = values[:1]
            else:
                outcome = Kept.read(values, 1, step.tree.beam_length)
                keep_accepted(cache, step.verified.paths, outcome)
                timer.mark("cache", *cache.state())
                tokens = outcome.tokens[0]
                stats.verified_tokens.append(step.packed)
                stats.tree_cells.append(step.tree.beam_width * step.tree.beam_length)
            kept = len(tokens)
            if read_at is None:  # the prefill's token
                stats.prompt_time, tic = now - tic, now
            else:
                stats.accepted_per_step.append(kept)
                if policy is not None:
                    policy.observe(step.tree, 1, [kept - 1], None if traced else now - read_at, choice)
            read_at = now
            if choice is not None:  # the drafter and the text were told these (staged)
                session.commit(len(untold) + kept)
                text.commit(len(untold) + kept)
                untold.clear()
                untold_features.clear()
            else:
                untold.extend(tokens)
                untold_features.append(step.features[:kept])
            new, stop = answer_part(tokens, eos_ids, max_tokens - stats.num_tokens)
            if stop:
                stats.finish_reason = "stop"
            stats.num_tokens += len(new)
            if stats.steps:
                stats.generation_time = now - tic
            if new:
                yield Step(new, stats)
            if stop or stats.num_tokens >= max_tokens:
                break
            if choice is not None:
                step = verify(choice, beams, layout, values[-1])
            else:  # after a tree step the cache is compacted only now: no queued step
                step = upcoming or plain(mx.array(tokens[-1], mx.int32))
    finally:
        stats.phase_times = {k: v - before.get(k, 0.0) for k, v in timer.totals.items()}
        cache.trim(start_length + len(prompt) + max(stats.num_tokens - 1, 0))


def decode_steps(
    model: LLM,
    prompt: list[int],
    drafter: TreeDrafter | None = None,
    plan: DraftPlan | None = None,
    *,
    max_tokens: int = 256,
    sampler: Sampler | None = None,
    eos_ids: set[int] | frozenset[int] = frozenset(),
    cache: KVCache | None = None,
    context: Sequence[int] = (),
    timer: PhaseTimer | None = None,
) -> Iterator[Step]:
    """The decoding steps of `prompt`: tree-verified speculative decoding when a drafter (of
    any kind) is given, drafting as `plan` says (None: `DraftPlan()`), plain autoregressive
    decoding otherwise (which needs neither the plan nor `context` and `timer`).

    The answer stops at the model's context length (finish reason "length"); a prompt that
    fills it is an `InputError`, raised here rather than at the first step.
    """
    used = (cache.length if cache is not None else 0) + len(prompt)
    max_tokens = min(max_tokens, context_room(model, used))
    if drafter is None:
        return generate_ar(model, prompt, max_tokens=max_tokens, sampler=sampler, eos_ids=eos_ids, cache=cache)
    return generate_redrafter(
        model,
        drafter,
        prompt,
        plan,
        max_tokens=max_tokens,
        sampler=sampler,
        eos_ids=eos_ids,
        cache=cache,
        context=context,
        timer=timer,
    )
