"""Tokens per step of a drafter, replayed on recorded greedy answers (no LLM forward).

Greedy ReDrafter decoding emits exactly the LLM's greedy answer; the drafter only decides
how many of its tokens each step accepts. Given that answer and the LLM's hidden state at
every answer position (a distillation record and its `HiddenStore` rows), every step is
determined: beam-search from the state that produced the current guaranteed token, accept
the longest beam prefix that the answer continues with, move past it. So tokens/step on
hundreds of answers costs only the drafter's beam searches, batched across answers, and
none of the LLM's verify passes (on a 2-core x86 CPU, minutes for the 106 eval prompts,
where decoding them takes half an hour). Real decoding (`decoding.generate_redrafter`) gives the
same count up to floating-point near-ties between beams (its states come from the packed
verify pass) and the step that reaches an EOS (decoding may also accept drafts past it); the
tests compare the two.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
from mlx import nn

from ..drafting import TreeShape
from ..drafting.beam_search import DRAFT_TOP_K
from ..drafting.kinds.llm_embedding import Embedding
from ..drafting.kinds.rnn import RecurrentDrafter
from ..drafting.phase import propose
from ..errors import InputError
from .distill import generate_with_hidden


@dataclass
class ReplayResult:
    tokens: int  # tokens emitted over all steps (accepted drafts + one LLM token per step)
    steps: int  # verify steps (the prefill's first token is not a step, as in decoding)
    packed: Counter = field(default_factory=Counter)  # packed tree length -> steps verifying it

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0


def accepted_lengths(beams: np.ndarray, targets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Longest prefix of beams[b, w, 1:] equal to targets[b, :lengths[b]], best beam.

    beams: (B, W, L) drafted beams (column 0 is the guaranteed token); targets: (B, L-1)
    the answer's next tokens, valid up to lengths (B,) (an answer may end sooner).
    """
    drafts = beams[:, :, 1:]
    valid = np.arange(drafts.shape[-1])[None, :] < lengths[:, None]  # (B, L-1)
    match = (drafts == targets[:, None, :]) & valid[:, None, :]
    return np.cumprod(match, axis=-1).sum(axis=-1).max(axis=-1)


def packed_lengths(beams: np.ndarray) -> np.ndarray:
    """Unique prefixes (the packed tree's length) of each row of beams (B, W, L): what
    `tree_attention.tree_layout` counts, in numpy."""
    same = np.cumprod(beams[:, :, None, :] == beams[:, None, :, :], axis=-1)  # (B, W, W, L)
    owner = same.argmax(axis=2)  # smallest beam sharing each prefix
    return ((owner == np.arange(beams.shape[1])[None, :, None]) & (beams >= 0)).sum(axis=(1, 2))


def replay(
    drafter: RecurrentDrafter,
    embedding: Embedding,
    answers: Sequence[tuple[np.ndarray, np.ndarray]],
    shape: TreeShape,
    *,
    draft_top_k: int = DRAFT_TOP_K,
    max_tokens: int | None = None,
    prompts: Sequence[Sequence[int]] | None = None,
    lookup: bool = True,
) -> ReplayResult:
    """Greedy ReDrafter steps over `answers`, each (tokens (R,), hidden (R, D)): hidden[i]
    is the LLM's final-norm state that produced tokens[i] (`HiddenStore` layout), tokens
    the greedy answer (ending with EOS when the model stopped). Steps stop once
    `max_tokens` tokens are out, like decoding's limit; the last step may accept drafts
    beyond it, as in decoding, when the answer is longer. `shape` and `draft_top_k`: as in `beam_search`;
    `lookup`: as in decoding, copying from each answer's prompt (`prompts`, in the same
    order; none: from the answer alone) and the answer so far."""
    prompts = prompts if prompts is not None else [()] * len(answers)
    kept = [(p, a) for p, a in zip(prompts, answers) if len(a[0])]
    drafts = _Drafts(drafter, embedding, [a for _, a in kept], [p for p, _ in kept], shape, draft_top_k, lookup)
    limit = max_tokens or max((len(t) for _, (t, _) in kept), default=0)
    position = np.zeros(len(kept), dtype=np.int64)  # index of each answer's guaranteed token
    ends = np.array([min(len(t), limit) - 1 for _, (t, _) in kept], dtype=np.int64)  # no step after
    result = ReplayResult(0, 0)
    while (active := np.nonzero(position < ends)[0]).size:
        accepted, beams = drafts.accepted(active, position[active])
        result.packed.update(packed_lengths(beams).tolist())
        position[active] += accepted + 1
        result.tokens += int((accepted + 1).sum())
        result.steps += len(active)
    return result


def acceptance_table(
    drafter: RecurrentDrafter,
    embedding: Embedding,
    answer: tuple[np.ndarray, np.ndarray],
    shape: TreeShape,
    *,
    prompt: Sequence[int] = (),
    draft_top_k: int = DRAFT_TOP_K,
    lookup: bool = True,
) -> np.ndarray:
    """A tree's accepted drafts at every position of one greedy answer (tokens (R,), hidden
    (R, D), as `replay` takes): entry i is what a step from guaranteed token tokens[i]
    accepts, all R - 1 steps drafted in one batch. Greedy decoding's path through the answer
    depends only on these, whichever tree each step picks: what the step policy's offline
    replay reads (`profiling.policy_replay`)."""
    drafts = _Drafts(drafter, embedding, [answer], [prompt], shape, draft_top_k, lookup)
    positions = np.arange(len(answer[0]) - 1)
    return drafts.accepted(np.zeros_like(positions), positions)[0]


class _Drafts:
    """The beams a tree drafts from recorded answers' states, and how many of their drafts the
    answers continue with."""

    def __init__(
        self,
        drafter: RecurrentDrafter,
        embedding: Embedding,
        answers: Sequence[tuple[np.ndarray, np.ndarray]],
        prompts: Sequence[Sequence[int]],
        shape: TreeShape,
        draft_top_k: int,
        lookup: bool,
    ):
        if drafter.stateful:
            raise InputError(
                f"replaying recorded answers drafts from their hidden states alone; a {drafter.kind} "
                "drafter keeps its own cache of the text, which replay does not build (use plain `bench`)"
            )
        self.drafter, self.embedding, self.shape, self.draft_top_k = drafter, embedding, shape, draft_top_k
        self.answers = [(np.asarray(t), np.asarray(h)) for t, h in answers]
        self.lookup = lookup
        self.offsets = np.array([len(p) for p in prompts], dtype=np.int64)
        self.texts = np.zeros(
            (len(answers), max((len(p) + len(t) for p, (t, _) in zip(prompts, answers)), default=0)), dtype=np.int32
        )
        for row, (p, (t, _)) in enumerate(zip(prompts, answers)):  # the lookup's context: prompt and answer
            self.texts[row, : len(p) + len(t)] = np.concatenate([np.asarray(p, np.int32), t])

    def accepted(self, rows: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each answer rows[k] at guaranteed token positions[k]: the drafts accepted (K,)
        and the beams drafted (K, W, L)."""
        hidden = mx.array(np.stack([self.answers[r][1][p] for r, p in zip(rows, positions)]))
        guaranteed = mx.array(np.array([self.answers[r][0][p] for r, p in zip(rows, positions)], dtype=np.int32))
        looked_up = (mx.array(self.texts[rows]), mx.array(self.offsets[rows] + positions + 1)) if self.lookup else ()
        beams, _ = propose(
            self.drafter, self.embedding, self.shape, hidden, guaranteed, *looked_up, draft_top_k=self.draft_top_k
        )
        width = self.shape.beam_length - 1
        targets = np.zeros((len(rows), width), dtype=np.int64)
        lengths = np.zeros(len(rows), dtype=np.int64)
        for k, (r, p) in enumerate(zip(rows, positions)):
            following = self.answers[r][0][p + 1 : p + 1 + width]
            targets[k, : len(following)], lengths[k] = following, len(following)
        beams = np.array(beams)
        return accepted_lengths(beams, targets, lengths), beams


def record_answers(
    model: nn.Module,
    prompts: Sequence[list[int]],
    max_new_tokens: int,
    eos_ids: Iterable[int] = (),
    batch_size: int = 32,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The LLM's greedy answers to `prompts` with their hidden states, batched (the
    distillation loop), in prompt order: what `replay` takes."""
    jobs = [(str(i), list(ids), 0.0) for i, ids in enumerate(prompts)]
    answers = {
        record.id: (np.array(record.response_ids), hidden)
        for record, hidden in generate_with_hidden(
            model, jobs, eos_ids, max_new_tokens=max_new_tokens, batch_size=batch_size
        )
    }
    return [answers[job[0]] for job in jobs]
