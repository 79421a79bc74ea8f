"""The training objective (paper Eq. 2), computed on the drafter unrolled as in beam search.

Semantics (identical to `beam_search` at inference). For a distilled sequence y (prompt +
LLM response) and a position t whose next token y_{t+1} lies in the response, let h_t be
the LLM's final-norm hidden state after y_{<=t} (the one that produced y_{t+1}). At
inference y_{t+1} is the *guaranteed token*: the first beam token and the drafter's first
input. So the drafter, conditioned on h_t, reads y_{t+1}, ..., y_{t+T} one at a time and
after reading y_{t+j} predicts y_{t+j+1}, j = 1..T. The loss is the sum over j of the mean
cross-entropy at depth j (Eq. 2), over every valid position t of every sequence in the
batch at once: the work is (M, hidden) tensors for M sampled positions, T steps.

The unrolling goes through the drafting seam (`drafting.seam`), the very step function beam
search calls, with teacher forcing: `draft_steps(h_t)` then, at depth j, `step(state,
y_{t+j}, j - 1)`. So any stateless drafter kind trains here: ReDrafter's RNN (the state is
s_j = update(s_{j-1}, E(y_{t+j})), s_0 = 0), the MLP speculator (its stage chain) and Medusa
(head j - 1 on h_t, the tokens unread). For the RNN this is the same arithmetic as unrolling
it by hand, bit for bit.

Soft targets (a recipe's `soft_targets` = weight alpha in [0, 1]): the stored states also
give the LLM's whole next-token distribution at every response position, for the price of
one matmul with its output head: p_LLM(. | y_{<=t+j}) = softmax(head(h_{t+j})). Depth j is
then also trained by cross-entropy against that distribution (restricted to the head's
tokens), which carries the LLM's ranking of all candidates, not just its argmax:
loss_j = (1 - alpha) * CE(y_{t+j+1}) + alpha * CE(p_LLM). On a greedy answer y_{t+j+1} is the
argmax of p_LLM, so both terms pull the same way; the soft one also shapes the runner-ups
that the other beams draft. h_{t+j} is the stored state j rows after h_t (same record
exactly when the depth-j target exists).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import mlx.core as mx
import numpy as np
from mlx import nn

from .. import runtime
from ..drafting.kinds.llm_embedding import Embedding
from ..drafting.seam import TreeDrafter
from ..errors import InputError
from ..runtime import fastmath


def head_token_ids(drafter: TreeDrafter) -> mx.array | None:
    """The vocabulary ids of the tokens the drafter's head scores, in head order; None when
    it scores the whole vocabulary (an untrimmed RNN, the MLP speculator, Medusa)."""
    return drafter.get("token_ids") if isinstance(drafter, nn.Module) else None


def head_index_map(drafter: TreeDrafter) -> mx.array:
    """(V,) int32: full-vocabulary id -> head index, -1 for tokens the head cannot score."""
    vocab = drafter.config.vocab_size
    ids = head_token_ids(drafter)
    if ids is None:
        return mx.arange(vocab, dtype=mx.int32)
    table = np.full(vocab, -1, np.int32)
    table[np.array(ids)] = np.arange(len(ids), dtype=np.int32)
    return mx.array(table)


def loss_blas_threads(predict: int) -> contextlib.AbstractContextManager:
    """While the loss's `predict` depths run on parallel streams, split the cores' BLAS
    threads between the busy streams (one each on 2 cores); with one stream, no change."""
    busy = min(len(runtime.parallel_streams()), predict)
    if busy < 2:
        return contextlib.nullcontext()
    return runtime.blas_threads(max(1, (os.cpu_count() or 1) // busy))


def depth_stream(streams: Sequence[mx.Stream], depth: int) -> contextlib.AbstractContextManager:
    """Run depth `depth`'s work on its stream (round robin over `streams`; none: default)."""
    return mx.stream(streams[depth % len(streams)]) if streams else contextlib.nullcontext()


def unrolled_logits(
    drafter: TreeDrafter,
    embedding: Embedding,
    hidden: mx.array,
    tokens: mx.array,
    predict: int,
    streams: Sequence[mx.Stream] = (),
) -> list[mx.array]:
    """Head logits (M, K) at depths 1..predict for a batch of positions, as in beam search.

    hidden (M, D): h_t; tokens (M, predict + 1): [y_{t+1}, ...] (column 0 = guaranteed
    token; -1 entries are clamped, their outputs are masked by the caller).
    Depth j = 1..predict is seam step j - 1: it reads y_{t+j} (column j - 1) and scores
    y_{t+j+1} (column j), on stream `depth_stream(streams, j - 1)` (the depths' heads are
    independent; only a kind's state, small, chains them).
    """
    state, step = drafter.draft_steps(hidden[:, None, :], embedding)
    inputs = mx.maximum(tokens, 0)
    out = []
    for j in range(predict):
        with depth_stream(streams, j):
            state, logits = step(state, inputs[:, j : j + 1], j)
            out.append(logits[:, 0])
    return out


def teacher_head(model: nn.Module, hidden_size: int, token_ids: mx.array | np.ndarray | None) -> mx.array:
    """(K, D) rows of the LLM's output head for the drafter head's tokens (all when None):
    the LLM's logits over them are h @ rows.T. Read off `model.logits` of the identity, so
    tied, untied and quantized heads all work; a soft-capped head (Gemma 2) is not linear and
    is refused."""
    if getattr(model, "logit_softcap", None):
        raise InputError("soft targets need a linear output head, but this model soft-caps its logits: use 0")
    rows = model.logits(mx.eye(hidden_size)).T.astype(mx.float32)
    rows = rows if token_ids is None else rows[mx.array(token_ids)]
    mx.eval(rows)
    return rows


def drafter_loss(
    drafter: TreeDrafter,
    embedding: Embedding,
    hidden: mx.array,
    tokens: mx.array,
    index_map: mx.array,
    predict: int,
    soft: float = 0.0,
    teacher: tuple[mx.array, mx.array] | None = None,
) -> tuple[mx.array, mx.array]:
    """Eq. 2: sum over depths of the mean cross-entropy of valid targets (targets outside
    the head's token subset or past the sequence end are ignored), mixed with weight
    `soft` with the cross-entropy against the LLM's distribution (module docstring);
    teacher = (h_{t+1..t+predict} (M, predict, D), `teacher_head` rows (K, D)).
    Returns (loss, per-depth valid counts (predict,)).

    The depths' heads and cross-entropies (the exp over K logits per target: most of a
    step on CPU) run on `runtime.parallel_streams()`, i.e. on all cores of a CPU."""
    if soft > 0 and teacher is None:
        raise ValueError("soft targets need the teacher's states and head rows")
    streams = runtime.parallel_streams()
    logits = unrolled_logits(drafter, embedding, hidden, tokens, predict, streams)
    total = mx.array(0.0)
    counts = []
    for j, lg in enumerate(logits):
        with depth_stream(streams, j):
            target = tokens[:, j + 1]
            head_target = mx.where(target >= 0, index_map[mx.maximum(target, 0)], -1)
            valid = head_target >= 0
            lg = lg.astype(mx.float32)
            norm = fastmath.logsumexp(lg)  # CE(p, q) = norm - sum_k p_k lg_k for any p
            ce = norm - mx.take_along_axis(lg, mx.maximum(head_target, 0)[:, None], axis=-1)[:, 0]
            n = valid.sum()
            depth_loss = mx.where(valid, ce, 0.0).sum() / mx.maximum(n, 1)
            if soft > 0:
                states, rows = teacher
                probs = fastmath.softmax(mx.stop_gradient(states[:, j] @ rows.T))
                present = target >= 0
                soft_ce = norm - (probs * lg).sum(axis=-1)
                soft_loss = mx.where(present, soft_ce, 0.0).sum() / mx.maximum(present.sum(), 1)
                depth_loss = (1 - soft) * depth_loss + soft * soft_loss
        total = total + depth_loss
        counts.append(n)
    return total, mx.stack(counts)


def loss_and_grad(model: nn.Module, drafter: TreeDrafter, predict: int, soft: float) -> Callable[..., Any]:
    """`drafter_loss` and its gradient for `drafter` as one function of a micro-batch
    (hidden (M, D), windows (M, T+1), later states (M, T, D) or None): the LLM's embedding,
    the head's index map and, with soft targets, the teacher's head rows bound once."""
    embedding = model.embedding
    index_map = head_index_map(drafter)
    rows = teacher_head(model, drafter.config.hidden_size, head_token_ids(drafter)) if soft > 0 else None

    def loss_fn(d: TreeDrafter, hidden: mx.array, tokens: mx.array, later: mx.array | None) -> mx.array:
        teacher = None if later is None else (later, rows)
        return drafter_loss(d, embedding, hidden, tokens, index_map, predict, soft, teacher)[0]

    return nn.value_and_grad(drafter, loss_fn)
