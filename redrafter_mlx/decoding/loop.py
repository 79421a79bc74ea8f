"""Decoding loops: plain autoregressive and ReDrafter, with one interface.

Both are generators yielding `Step`s (the tokens a step produced plus the running
`GenerationStats`), so the CLI, chat and bench never care which one runs (`decode_steps`
picks ReDrafter when there is a drafter, drafting as a `tuning.DraftPlan` says). Like mlx-lm's
`generate_step`, the next forward pass is queued with `mx.async_eval` before the current
token is read, so Python graph building overlaps compute.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import mlx.core as mx

from ..drafting import DraftFn, TreeDrafter, TreeShape, make_draft_fn
from ..drafting.lookup import TextBuffer
from ..errors import InputError
from ..models.cache import KVCache
from ..models.llama import Model, prefill
from ..runtime.timers import PhaseTimer
from ..sampling import Sampler, make_greedy_or_sampler, sampler_scores
from ..tuning.plan import DraftPlan
from ..verify.acceptance import accept
from ..verify.tree_attention import bucket, pack, verify_mask


@dataclass
class GenerationStats:
    """Counters every decoder keeps; `steps` = LLM forward passes after prefill."""

    prompt_tokens: int = 0
    num_tokens: int = 0
    prompt_time: float = 0.0
    generation_time: float = 0.0
    accepted_per_step: list[int] = field(default_factory=list)
    verified_tokens: list[int] = field(default_factory=list)  # unique tokens of each verified tree
    tree_cells: list[int] = field(default_factory=list)  # W * L of each verified tree (L may adapt)
    phase_times: dict[str, float] = field(default_factory=dict)
    finish_reason: str = "length"  # "stop" when an EOS token ended generation

    @property
    def steps(self) -> int:
        return len(self.accepted_per_step)

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.prompt_time if self.prompt_time else 0.0

    @property
    def generation_tps(self) -> float:
        return self.num_tokens / self.generation_time if self.generation_time else 0.0

    @property
    def compression(self) -> float | None:
        """Tree attention's saving: verified tokens / the W * L cells drafted (None: no tree)."""
        return sum(self.verified_tokens) / sum(self.tree_cells) if self.tree_cells else None

    @property
    def tokens_per_step(self) -> float:
        """Tokens produced per forward pass after prefill (AR: 1.0)."""
        return sum(self.accepted_per_step) / self.steps if self.steps else 1.0


@dataclass
class Step:
    tokens: list[int]  # tokens this step produced, in order; never an EOS
    stats: GenerationStats


def answer_part(tokens: list[int], eos_ids: set[int] | frozenset[int], room: int) -> tuple[list[int], bool]:
    """What a step's accepted tokens add to the answer: those before the first EOS, at most
    `room` of them; and whether an EOS ended the answer."""
    stop = next((i for i, t in enumerate(tokens) if t in eos_ids), None)
    return tokens[: len(tokens) if stop is None else stop][:room], stop is not None


def generate_ar(
    model: Model,
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


def generate_redrafter(
    model: Model,
    drafter: TreeDrafter,
    prompt: list[int],
    plan: DraftPlan = DraftPlan(),
    *,
    max_tokens: int = 256,
    sampler: Sampler | None = None,
    eos_ids: set[int] | frozenset[int] = frozenset(),
    cache: KVCache | None = None,
    context: Sequence[int] = (),
    timer: PhaseTimer | None = None,
) -> Iterator[Step]:
    """ReDrafter decoding (paper Sec. 3.4) with any drafter kind, drafting as `plan` says
    (default: `FALLBACK_SHAPE` every step): every step emits 1..beam_length tokens.

    Each step: (1) the guaranteed token and hidden state come from the previous step;
    (2) the drafter (any `drafting.TreeDrafter`; a stateful one through the session `open`
    returns, told each step's emitted tokens) beam-searches W x L candidates (keeping S beams,
    of which the W that cover the most drafter probability are verified: `beam_search`; S at
    most W: the paper's search); with `plan.lookup`, the last of them gives way to a copy of
    what followed the text's last n-gram earlier in `context`, the prompt or the answer, when
    it occurred (`lookup.py`), or
    else to the drafter's stored continuation of it (`drafter.ngrams`, `ngrams.py`); (3) the
    unique prefixes are packed and verified in ONE forward pass with a tree mask; (4) the
    longest accepted prefix is kept and the cache compacted to it. The only host read per
    step fetches the accepted tokens and their packed positions together with the next
    tree's packed length; the cache moves those positions to the front only when they are
    not there already (the first beam's path is), which most steps skip. Same
    interface and cache contract as `generate_ar`; `context` holds the tokens before
    `prompt` that the cache already has (earlier turns), for the lookup and stateful drafters.
    Each tree is padded to `plan.verify_lengths` for the verify pass (default: `bucket`); with
    `plan.adapt`, each step's beam length is chosen from the acceptance so far (`AdaptiveLength`).
    """
    shape, adapt, lookup, longest = plan.shape, plan.adapt, plan.lookup, plan.longest
    if adapt is not None:
        adapt.reset()
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
    draft_fns: dict[TreeShape, DraftFn] = {}

    def draft(hidden: mx.array, token: mx.array, emitted: mx.array, features: mx.array, count: mx.array):
        """The next tree, once emitted[:count] (lazy; `token` is emitted[count - 1]) joins the
        text; features[j]: the LLM hidden state that predicted emitted[j]."""
        tree = adapt.choose() if adapt is not None else shape
        if tree not in draft_fns:
            draft_fns[tree] = make_draft_fn(session, model.embedding, tree, draft_top_k=plan.draft_top_k, lookup=lookup)
        session.stage(emitted, features, count)
        if lookup:
            text.stage(emitted)
        beams, layout = draft_fns[tree](hidden, token, text.tokens, mx.array([text.length], mx.int32) + count)
        timer.mark("draft", beams, layout.unpack_index)
        return tree, beams, layout

    try:
        tic = time.perf_counter()
        timer.start()
        prompt_hidden = prefill(model, mx.array(prompt, mx.uint32), cache)
        hidden = prompt_hidden[-1]
        token = sampler(sampler_scores(sampler, model.logits(hidden))).astype(mx.int32).reshape(())
        timer.mark("prefill", token)
        session = drafter.open(model, [*context, *prompt], prompt_hidden)
        tree, beams, layout = draft(hidden, token, token[None], hidden[None], mx.array(1))
        first, count = mx.stack([token, layout.count]).tolist()
        stats.prompt_time = time.perf_counter() - tic
        tic = time.perf_counter()
        if first in eos_ids:
            stats.finish_reason = "stop"
            return
        stats.num_tokens = 1
        session.commit(1)
        text.commit(1)
        yield Step([first], stats)
        while stats.num_tokens < max_tokens:
            packed = pack(beams, layout, padded[count])
            timer.mark("pack", packed.tokens, packed.mask)
            positions = (packed.depth + cache.length)[None]
            block = model(packed.tokens[None], cache, positions, verify_mask(packed.mask, cache.length))[0]
            scores = sampler_scores(sampler, model.logits(block))
            timer.mark("verify", scores)
            result = accept(beams, layout.unpack_index, scores, sampler)
            timer.mark("accept", result.emitted)
            verified = tree
            tree, beams, layout = draft(
                block[result.next_index], result.next_token, result.emitted, block[result.path], result.accepted + 1
            )
            stats.verified_tokens.append(count)
            stats.tree_cells.append(verified.beam_width * verified.beam_length)
            accepted, *read, count = mx.concatenate(
                [result.accepted[None], result.emitted, result.path, layout.count[None]]
            ).tolist()
            emitted, path = read[: verified.beam_length], read[verified.beam_length :]
            kept = path[: accepted + 1]  # packed positions of the tokens the cache keeps
            if kept != list(range(accepted + 1)):  # not already in front (the first beam's are)
                cache.gather_pending(mx.array(kept, mx.int32))
            timer.mark("cache", *cache.state())
            cache.commit(accepted + 1)
            session.commit(accepted + 1)
            text.commit(accepted + 1)
            if adapt is not None:
                adapt.observe(verified, accepted)
            stats.accepted_per_step.append(accepted + 1)
            new, stop = answer_part(emitted[: accepted + 1], eos_ids, max_tokens - stats.num_tokens)
            if stop:
                stats.finish_reason = "stop"
            stats.num_tokens += len(new)
            stats.generation_time = time.perf_counter() - tic
            if new:
                yield Step(new, stats)
            if stop:
                break
    finally:
        stats.phase_times = {k: v - before.get(k, 0.0) for k, v in timer.totals.items()}
        cache.trim(start_length + len(prompt) + max(stats.num_tokens - 1, 0))


def context_room(model: Model, used: int) -> int:
    """Tokens that still fit in the model's context after `used` tokens (prompt and history)."""
    limit = model.args.max_position_embeddings
    if not limit:
        return sys.maxsize
    if used >= limit:
        raise InputError(
            f"the prompt is {used} tokens, but the model's context holds {limit}: shorten it "
            f"(or, in chat, /reset the conversation)"
        )
    return limit - used


def decode_steps(
    model: Model,
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
        plan or DraftPlan(),
        max_tokens=max_tokens,
        sampler=sampler,
        eos_ids=eos_ids,
        cache=cache,
        context=context,
        timer=timer,
    )
