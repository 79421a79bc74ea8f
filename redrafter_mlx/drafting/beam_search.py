"""Beam search over a drafter (ReDrafter, arXiv 2403.09919, Sec. 3.2), for every drafter kind.

Written for the recurrent drafter and used for all kinds through `drafting.seam`: a kind
supplies the per-step logits and a state the search reorders by parent (the RNN's state,
a draft model's per-beam lineage); Medusa's heads, which ignore the drafted tokens, make
it the exact top-W of a product of independent distributions.

Semantics follow `Drafter.beam_search_candidates` in Apple's reference code
(ml-recurrent-drafter: `recurrent_drafting/modeling_drafter.py` and the MLX
`modeling_drafter.py`):
- Every beam starts with the guaranteed token (the LLM's own next token); beam_length counts
  it, so L = 5 means 4 drafted tokens and L - 1 drafter steps.
- Beam 0 starts at log-prob 0 and the others at LOG_0 (finite, -inf-like), so the first step
  grows beam 0 only.
- Each step: drafter logits -> top-k warp (tokens outside the top k = `draft_top_k` dropped) -> log-softmax
  -> candidate score = beam score + token log-prob over (W, V) -> keep the W best, reorder
  the beams' drafter states by parent, append the tokens. (The reference also subtracts the max
  logit first; log-softmax does not change under it.)

Differences that do not change the result:
- Only the k surviving tokens of each beam are candidates (W * k instead of W * V): a
  dropped token has log-prob -inf, and the W * k finite candidates always number >= W.
  No full-vocabulary log-prob tensor is built (greedy acceptance never needs one).
- Step 1 runs the drafter once instead of W times: all beams hold the same state then.
- The W survivors come out sorted by descending score (like the PyTorch reference's topk;
  the MLX reference leaves them in argpartition order).

Wider search, W verified (our extension; `search_width` S > W): the search keeps S beams
and the W verified are those that `choose_candidates` picks to maximise the expected
number of accepted tokens. The paper's W best-scoring beams often share their first tokens;
verifying the second-likeliest first token instead of a fourth variant of a deep suffix
accepts more with a tree of the same shape (W beams of length L; it shares fewer prefixes,
so it packs a few more tokens). S <= W is the paper's search exactly. Acceptance
stays exact (greedy and sampled): the candidates are still a deterministic function of the
context, which is all `acceptance.py` needs.

Node budget, N tokens verified (our extension, EAGLE-2's dynamic tree on ReDrafter's beams):
`keep_likeliest` keeps the guaranteed token and the N - 1 distinct drafted prefixes of
highest drafter probability among the W beams, and marks the rest of each beam
INVALID_TOKEN (packed nowhere, never accepted). The tree's size, hence its verify cost, is
fixed while its shape follows the drafter: deep where it is sure, wide where it hesitates.

Ties: candidates with equal scores are ordered by `mx.argsort` of the negated scores (lower
flat index, i.e. lower parent beam, first in MLX 0.32). With real-valued logits exact ties
are measure-zero, except among filler beams (below), whose tied parents are identical, so
the beams and scores do not depend on the choice. A token tied with the k-th largest logit
is kept by the reference and dropped here: also measure-zero.

beam_width > draft_top_k: step 1 has only k real candidates (all from beam 0). As in the
reference, the remaining beams are then filled from beams 1.., which hold the same prefix
and state as beam 0 but score LOG_0: they repeat real prefixes and carry scores below
LOG_0 / 2 (detectable), are displaced by real candidates at step 2 whenever
beam_width <= k ** 2, and cost nothing extra after prefix de-duplication.

Everything is lazy (no host reads, no branching on array values) and shapes depend only on
(batch, W, S, L, k), so the draft phase (`phase.py`) hands it to `mx.compile`.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from ..verify.tree_attention import dedup_prefix
from .seam import TreeDrafter, reorder

LOG_0 = -50000.0  # the reference's log(0): finite, so filler beams still sort and add up
INVALID_TOKEN = -1  # a beam position outside a budgeted tree: packed nowhere, never accepted
DRAFT_TOP_K = 50  # the beam search's top-k warp (the reference's default); not the sampler's top-k


def top_k_log_probs(logits: mx.array, k: int) -> tuple[mx.array, mx.array]:
    """The top-k warp followed by log-softmax, kept only where it is finite.

    logits: (..., V) -> (log_probs (..., k) float32, head_ids (..., k) uint32) (k at most V),
    in no particular order. log_probs equal log_softmax(warp(logits)) at head_ids; every other
    token has log-prob -inf.
    """
    k = min(k, logits.shape[-1])
    head_ids = mx.argpartition(-logits, kth=k - 1, axis=-1)[..., :k]
    kept = mx.take_along_axis(logits, head_ids, axis=-1).astype(mx.float32)
    return kept - mx.logsumexp(kept, axis=-1, keepdims=True), head_ids


def initial_scores(beam_width: int) -> mx.array:
    """(W,) float32: [0, LOG_0, ..., LOG_0], so the first step grows beam 0 only."""
    return mx.array([0.0] + [LOG_0] * (beam_width - 1), dtype=mx.float32)


def _grow(
    drafter: TreeDrafter,
    beams: mx.array,
    history: mx.array,
    log_probs: mx.array,
    head_ids: mx.array,
) -> tuple[mx.array, mx.array, mx.array]:
    """Keep the W best one-token extensions of the W beams.

    beams: (B, W, t) int32; history: (B, W, t) float32, the score of every prefix of every
    beam (history[..., -1] is the beam's score); log_probs, head_ids: (B, W or 1, k)
    (a 1 broadcasts: all beams identical).
    Returns beams and history (B, W, t + 1) and each new beam's parent (B, W).
    """
    batch, width, _ = history.shape
    k = log_probs.shape[-1]
    candidates = (history[..., -1:] + log_probs).reshape(batch, width * k)
    best = mx.argsort(-candidates, axis=-1)[:, :width]  # (B, W) flat (parent, slot) index
    parents = best // k
    flat_ids = mx.broadcast_to(head_ids, (batch, width, k)).reshape(batch, width * k)
    tokens = drafter.vocab_ids(mx.take_along_axis(flat_ids, best, axis=-1))
    beams = mx.concatenate([mx.take_along_axis(beams, parents[..., None], axis=1), tokens[..., None]], axis=-1)
    scores = mx.take_along_axis(candidates, best, axis=-1)
    history = mx.concatenate([mx.take_along_axis(history, parents[..., None], axis=1), scores[..., None]], axis=-1)
    return beams, history, parents


def choose_candidates(beams: mx.array, history: mx.array, count: int) -> mx.array:
    """Indices (B, count) of the beams to verify: greedily, the beam whose prefixes not yet
    in the tree have the largest summed drafter probability.

    Greedy verification accepts d drafted tokens exactly when the tree holds the answer's
    next d tokens as a prefix, so the expected accepted length is the summed probability
    of the tree's drafted prefixes. The `count` best-scoring beams often share their first
    tokens, which leaves the second-likeliest next token unverified; this choice covers it
    when it is worth more than a fourth variant of a deep suffix. Greedy maximum coverage
    (the gain of a beam only shrinks as others are chosen) is within 1 - 1/e of the best
    set. beams, history: (B, S, L) from the beam search, S >= count.
    """
    drafted = beams[..., 1:]
    probs = mx.exp(history[..., 1:])  # filler beams (scores near LOG_0) weigh 0
    # shared[b, i, j, d]: beams i and j hold the same first d + 1 drafted tokens
    shared = mx.cumprod((drafted[:, :, None] == drafted[:, None]).astype(mx.int32), axis=-1) > 0
    covered = mx.zeros(probs.shape, dtype=mx.bool_)
    picks = []
    for _ in range(count):
        pick = mx.argmax(mx.where(covered, 0.0, probs).sum(axis=-1), axis=-1)  # (B,)
        picks.append(pick)
        covered = covered | mx.take_along_axis(shared, pick[:, None, None, None], axis=1)[:, 0]
    return mx.stack(picks, axis=-1)


def search_beams(
    drafter: TreeDrafter,
    embedding: Any,
    context: mx.array,
    first: mx.array,
    beam_width: int,
    beam_length: int,
    draft_top_k: int = DRAFT_TOP_K,
    search_width: int | None = None,
) -> tuple[mx.array, mx.array]:
    """`beam_search` of a batch, with every prefix's score: context (B, 1, hidden), first
    (B, 1) int32 -> beams (B, W, L) int32 and history (B, W, L) float32 (history[..., d]:
    the summed log-probs of beams[..., :d + 1]; 0 at the guaranteed token)."""
    if min(beam_width, beam_length, draft_top_k) < 1:
        raise ValueError(
            f"need beam_width, beam_length, draft_top_k >= 1, got {beam_width}, {beam_length}, {draft_top_k}"
        )
    search_width = max(search_width or 0, beam_width)
    batch = context.shape[0]
    beams = mx.broadcast_to(first[:, None, :], (batch, search_width, 1))
    history = mx.broadcast_to(initial_scores(search_width)[:, None], (batch, search_width, 1))
    # The start state is (B, 1, ...): the beams are identical until the first selection, so
    # the first step runs the drafter once; `reorder` broadcasts it to the S beams.
    state, step = drafter.draft_steps(context, embedding)
    last_tokens = first
    for depth in range(beam_length - 1):
        state, logits = step(state, last_tokens, depth)
        log_probs, head_ids = top_k_log_probs(logits, draft_top_k)
        beams, history, parents = _grow(drafter, beams, history, log_probs, head_ids)
        state = reorder(state, parents)
        last_tokens = beams[..., -1]
    if search_width > beam_width:
        chosen = choose_candidates(beams, history, beam_width)[..., None]
        beams = mx.take_along_axis(beams, chosen, axis=1)
        history = mx.take_along_axis(history, chosen, axis=1)
    return beams, history


def beam_search(
    drafter: TreeDrafter,
    embedding: Any,
    hidden: mx.array,
    guaranteed_token: mx.array,
    beam_width: int,
    beam_length: int,
    draft_top_k: int = DRAFT_TOP_K,
    search_width: int | None = None,
) -> tuple[mx.array, mx.array]:
    """Draft beam_width candidate continuations with any drafter kind (`drafting.seam`).

    drafter: e.g. the recurrent drafter; embedding: the LLM's embedding ((V, hidden) table
    or module), which the recurrent drafter reads for its token inputs (and its tied head).
    hidden: (hidden,) or (B, hidden), the LLM's last hidden state.
    guaranteed_token: () or (B,) int, the LLM's next token (first token of every beam).
    search_width: beams the search keeps, S (None or at most W: W, the paper's beam search).
    When S > W, the W beams returned are the ones `choose_candidates` picks among the S.
    Returns beams (W, L) or (B, W, L) int32 (full-vocabulary ids, beams[..., 0] is the
    guaranteed token) and scores (W,) or (B, W) float32, the beams' summed drafter
    log-probs (warped to each step's `draft_top_k` likeliest tokens): best first when S = W,
    in the order chosen otherwise.
    """
    batched = hidden.ndim == 2
    context = (hidden if batched else hidden[None])[:, None, :]  # (B, 1, hidden)
    first = guaranteed_token.reshape(context.shape[0], 1).astype(mx.int32)  # (B, 1)
    beams, history = search_beams(
        drafter, embedding, context, first, beam_width, beam_length, draft_top_k, search_width
    )
    scores = history[..., -1]
    return (beams, scores) if batched else (beams[0], scores[0])


def keep_likeliest(beams: mx.array, history: mx.array, budget: int) -> mx.array:
    """beams (B, W, L) cut to a tree of `budget` nodes at most: the guaranteed token and
    the budget - 1 likeliest distinct drafted prefixes (by history (B, W, L), each prefix's
    summed log-prob); every other token becomes INVALID_TOKEN.

    Greedy verification accepts d drafts exactly when the tree holds the answer's next d
    tokens, so the expected accepted length is the summed probability of the tree's
    prefixes, and for a budget of nodes the likeliest prefixes maximise it (EAGLE-2's
    dynamic tree). A prefix is never likelier than its parent (log-probs are <= 0), so the
    kept set is a tree; a tie that would orphan a prefix drops it (the tree gets smaller,
    never larger).
    """
    batch, width, length = beams.shape
    drafted = beams[..., 1:]
    owner = dedup_prefix(beams)[..., 1:]  # owner[b, w, d]: the first beam holding beams[b, w, :d + 2]
    first = owner == mx.arange(width)[None, :, None]
    scores = mx.where(first, history[..., 1:], -mx.inf).reshape(batch, -1)
    rank = mx.argsort(mx.argsort(-scores, axis=-1), axis=-1).reshape(batch, width, length - 1)
    kept_first = first & (rank < budget - 1)
    depth = mx.broadcast_to(mx.arange(length - 1)[None, None], owner.shape)
    kept = mx.take_along_axis(kept_first.reshape(batch, -1), (owner * (length - 1) + depth).reshape(batch, -1), axis=1)
    kept = mx.cumprod(kept.reshape(owner.shape).astype(mx.int32), axis=-1) > 0  # no orphans
    return mx.concatenate([beams[..., :1], mx.where(kept, drafted, INVALID_TOKEN)], axis=-1)
