"""Choose the longest verified prefix among the beams, greedy or sampled, exactly.

One rule serves both modes: at every node of the packed tree draw the LLM's own next token
y ~ p(. | prefix) with the user's sampler (argmax at temperature 0, otherwise temperature /
top-k / top-p then a categorical draw); walk down the tree while y equals a drafted child;
emit the drafted tokens walked and the y of the node where the walk stops.

Why the output distribution is exactly the LLM's: the beams are a deterministic function of
the context that precedes the step, so they carry no information about the fresh, mutually
independent draws y. At the root, y_0 ~ p(. | context) is emitted whatever the beams are
(as the accepted child or as the final token). Given y_0, the walk continues at the child
y_0 (if drafted), whose own draw is y_1 ~ p(. | context, y_0), and so on: the emitted
sequence is y_0, y_1, ..., each drawn from the LLM conditioned on all previous ones, i.e.
ancestral sampling from the LLM. This is speculative sampling with deterministic
(point-mass) proposals: a drafted token x is accepted with probability p(x), the largest
rate any exact scheme can give a point-mass proposal. The drafter's probabilities are not
needed; the reference code's min(1, p/q) rule with beam-search scores as q is not exact,
because beam-search candidates are not samples from q.

Greedy (temperature 0) is the same walk with y = argmax, so ReDrafter reproduces greedy
autoregressive decoding token for token.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from ..sampling import Sampler


@dataclass
class Acceptance:
    """Lazy results of one verification; nothing here has been read on the host."""

    accepted: mx.array  # () int32: drafted tokens accepted (0..L-1)
    emitted: mx.array  # (L,) int32: accepted drafts, then the LLM's next token, then junk
    path: mx.array  # (L,) int32: packed positions of the chosen beam
    next_token: mx.array  # () int32: the LLM's token after the accepted prefix
    next_index: mx.array  # () int32: packed position whose hidden state drafts next
    beam: mx.array  # () int32: the first beam among those with the longest accepted prefix


def accept(beams: mx.array, unpack_index: mx.array, scores: mx.array, sampler: Sampler) -> Acceptance:
    """beams, unpack_index: (W, L); scores: (P, V) what `sampler` reads at the packed
    positions (the LLM's log-probs; raw logits suffice for argmax)."""
    length = beams.shape[1]
    drawn = sampler(scores).astype(mx.int32)[unpack_index]  # (W, L): y after beams[w, :k+1]
    matches = (beams[:, 1:] == drawn[:, :-1]).astype(mx.int32)  # drafted token == LLM's token
    accepted_per_beam = mx.cumprod(matches, axis=1).sum(axis=1)  # (W,)
    best = mx.argmax(accepted_per_beam)
    accepted = accepted_per_beam[best]
    next_token = drawn[best, accepted]
    position = mx.arange(length)
    drafts = mx.concatenate([beams[best, 1:], mx.zeros((1,), beams.dtype)]).astype(mx.int32)
    emitted = mx.where(position < accepted, drafts, next_token)
    path = unpack_index[best]
    return Acceptance(accepted.astype(mx.int32), emitted, path, next_token, path[accepted], best.astype(mx.int32))
