"""A small LLM of the same tokenizer as the drafter (speculative decoding's classic draft model).

W = 1 is mlx-lm's chain (`--draft-model`); W > 1 beam-searches the draft model's own
log-probs, all beams in one forward per depth with a tree mask (`tree_cache.py`). The draft
model keeps its KV cache in step with the text: each step stages the tokens the LLM emitted
(a fixed-size block, the valid count still lazy) and commits them after the host read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx

from ...errors import DrafterLoadError
from ...formats.loading import load_draft
from ...models.llm import LLM, prefill
from ..seam import StepFn, TreeDrafter
from ..tree_cache import DraftCache


class DraftLLM(TreeDrafter):
    """A draft model of any architecture the verifier runs; `open` gives the per-generation
    session. `tokenizer` (when known) lets `check_tokenizer` prove both models share one."""

    kind = "draft-llm"
    stateful = True

    def __init__(self, model: LLM, source: str | Path | None = None, tokenizer: Any = None):
        self.model = model
        self.source = source
        self.tokenizer = tokenizer

    def for_target(self, model: Any, name: str) -> DraftLLM:
        """Token ids cross the seam, so both models must share one vocabulary."""
        ours, theirs = self.model.args.vocab_size, model.args.vocab_size
        if ours != theirs:
            raise DrafterLoadError(
                f"draft model {self.source} has vocab {ours}, but {name} has vocab {theirs}: "
                "a draft model must share the target's tokenizer"
            )
        return self

    def check_tokenizer(self, tokenizer: Any, name: str) -> None:
        """Raise `DrafterLoadError` unless this draft model's tokenizer gives every token the id
        `tokenizer` (the target `name`'s) gives it: equal vocabulary sizes are not enough."""
        if self.tokenizer is None or tokenizer is None:
            return
        ours, theirs = self.tokenizer.get_vocab(), tokenizer.get_vocab()
        differing = sorted(t for t in ours.keys() | theirs.keys() if ours.get(t) != theirs.get(t))
        if differing:
            token = differing[0]
            raise DrafterLoadError(
                f"draft model {self.source} has another tokenizer than {name}: {len(differing)} tokens "
                f"differ (e.g. {token!r} is id {ours.get(token)} vs {theirs.get(token)}); "
                "a draft model must share the target's tokenizer"
            )

    def open(self, model: Any, tokens: list[int], hidden: mx.array) -> DraftLLMSession:
        return DraftLLMSession(self.model, tokens)


class DraftLLMSession(TreeDrafter):
    """The draft model's cache for one generation, prefilled with the text before the answer."""

    kind = DraftLLM.kind
    stateful = True

    def __init__(self, model: LLM, tokens: list[int]):
        self.model = model
        self.cache = DraftCache(model.make_cache())
        if tokens:
            prefill(model, mx.array(tokens, mx.uint32), self.cache.cache)
        self.next_logits = mx.zeros((0,))

    def stage(self, tokens: mx.array, features: mx.array, count: mx.array) -> None:
        """Run the emitted block; the logits after its last valid token start the next draft."""
        positions, mask = self.cache.stage_inputs(tokens.shape[0], count)
        hidden = self.model(tokens[None].astype(mx.int32), self.cache.cache, positions, mask)[0]
        self.next_logits = self.model.logits(hidden[self.cache.count - 1])

    def commit(self, count: int) -> None:
        self.cache.commit(count)

    def draft_steps(self, context: mx.array, embedding: Any) -> tuple[mx.array, StepFn]:
        """The state is each beam's lineage of scratch slots (1, W, depth - 1)."""
        if context.shape[0] != 1:
            raise ValueError("a draft model drafts for one sequence at a time")
        scratch = self.cache.tree()

        def step(lineage: mx.array, tokens: mx.array, depth: int) -> tuple[mx.array, mx.array]:
            if depth == 0:  # the staged block already ran the guaranteed token
                return lineage, self.next_logits[None, None]
            positions, mask, lineage = scratch.step_inputs(lineage, depth)
            hidden = self.model(tokens.astype(mx.int32), scratch, positions, mask)
            return lineage, self.model.logits(hidden)

        return mx.zeros((1, 1, 0), mx.int32), step


def load(folder: Path, dtype: mx.Dtype) -> DraftLLM:
    """A draft model from a model folder (what `--drafter` finds with an LLM's model_type)."""
    loaded = load_draft(str(folder), dtype)
    return DraftLLM(loaded.model, folder, loaded.tokenizer)
