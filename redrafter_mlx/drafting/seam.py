"""The drafting seam: what the decoding loop needs from any drafter.

Everything after "propose candidates" is drafter-independent (packing, the one verify
forward, acceptance, cache compaction), so a drafter only has to say how to grow beams:
`draft_steps` gives a start state and a step function mapping (state, each beam's last
token, depth) to the next token's logits, and `beam_search.beam_search` does the rest
(top-k, scoring, the choice of the W beams to verify). The state is any pytree of arrays
shaped (B, W or 1, ...): the search reorders it by each new beam's parent.

Acceptance treats the candidate tree as a deterministic function of the context, so greedy
output equals plain decoding and sampling is exact for every drafter: no drafter
probability crosses the seam.

Stateless drafters (ReDrafter's RNN, Medusa, the MLP speculator) read only the LLM's
hidden state after the guaranteed token. Stateful ones (a draft LLM, EAGLE) keep a small KV
cache per generation: `open` returns a session that is told about the tokens the LLM
emitted (`stage`, lazily, before the host knows how many were accepted) and then how many
were (`commit`), the same two-phase contract as the LLM's cache, so one host read per
step still holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx.utils import tree_map

from ..errors import DrafterLoadError

# (state, last tokens (B, W or 1) int32, depth 0..L-2) -> (state, logits (B, W or 1, V'))
StepFn = Callable[[Any, mx.array, int], tuple[Any, mx.array]]


class TreeDrafter:
    """Base of every drafter kind; the defaults describe a stateless drafter."""

    kind: str  # its kind's name in `registry.KINDS` (a session's is its drafter's): bench tables, messages
    stateful = False  # True: `open` returns a per-generation session (not compiled: its cache grows)
    ngrams = None  # an `ngrams.NgramTable` the lookup layer may use, if the drafter ships one
    max_beam_length: int | None = None  # deepest beam it can draft (guaranteed token included); None: any
    # LLM layers whose inputs it reads, concatenated, where others read the final hidden state
    # (EAGLE-3); the decoding loop asks the LLM for them (`LLM.__call__`'s `taps`).
    target_layers: tuple[int, ...] = ()

    def check_sizes(self, vocab_size: int, hidden_size: int, model: Any, name: str) -> None:
        """Raise `DrafterLoadError` unless LLM `model` (named `name`) has the vocabulary this
        drafter drafts in and the hidden size it reads."""
        args = model.args
        if (vocab_size, hidden_size) != (args.vocab_size, args.hidden_size):
            raise DrafterLoadError(
                f"{self.kind} drafter {getattr(self, 'source', None)} was built for vocab {vocab_size} / hidden "
                f"{hidden_size}, but {name} has vocab {args.vocab_size} / hidden {args.hidden_size}"
            )

    def for_target(self, model: Any, name: str) -> TreeDrafter:
        """This drafter made ready to draft for LLM `model` (named `name` in errors): raises
        `DrafterLoadError` when its sizes do not fit the model's."""
        return self

    def open(self, model: Any, tokens: list[int], hidden: mx.array) -> TreeDrafter:
        """The drafter for one generation. tokens: the text the LLM's cache holds before the
        answer (earlier turns and the prompt); hidden (T, D): the LLM's hidden states of
        the prompt's last T tokens (T >= 1), the last of which predicts the first answer token."""
        return self

    def stage(self, tokens: mx.array, features: mx.array, count: mx.array) -> None:
        """tokens[:count] (L,) joined the text (lazy count); features[j] (L, D) is the LLM
        hidden state that predicted tokens[j]. Called before every `draft_steps`."""

    def commit(self, count: int) -> None:
        """The host read says `count` staged tokens are kept."""

    def draft_steps(self, context: mx.array, embedding: Any) -> tuple[Any, StepFn]:
        """context (B, 1, D): the LLM's hidden state that predicted the guaranteed token;
        embedding: the LLM's input embedding. Returns (start state, step function)."""
        raise NotImplementedError

    def vocab_ids(self, head_ids: mx.array) -> mx.array:
        """The head's indices (...) as full-vocabulary ids (...) int32."""
        return head_ids.astype(mx.int32)


def reorder(state: Any, parents: mx.array) -> Any:
    """Every leaf (B, W or 1, ...) of `state` re-indexed along axis 1 by parents (B, W)."""
    batch, width = parents.shape

    def pick(leaf: mx.array) -> mx.array:
        leaf = mx.broadcast_to(leaf, (batch, width, *leaf.shape[2:]))
        index = parents.reshape(batch, width, *([1] * (leaf.ndim - 2)))
        return mx.take_along_axis(leaf, index, axis=1)

    return tree_map(pick, state)
