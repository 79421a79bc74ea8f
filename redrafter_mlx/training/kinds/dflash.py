"""DFlash in training (arXiv 2602.06036; the objective as SpecForge's `specforge/core/dflash.py`
states it): block-wise cross-entropy over anchors.

For an answer with prompt and answer tokens x_0..x_{n-1} (the prompt's p first) and the LLM's
tapped features f_0..f_{n-1} (the inputs of the layers the drafter reads), a block at anchor a
(an answer position, a >= p, with a next token) is [x_a, mask x (b - 1)] at positions
a..a+b-1. It sees the context rows hidden_norm(fc(f_j)) for j < a (strictly: at decoding the
guaranteed token's own features do not exist yet) and, bidirectionally, its own block; blocks
never see each other. Block position k >= 1 is scored on x_{a+k} (where it exists) with weight
exp(-(k - 1) / gamma), and the loss is the weighted mean over every scored position. This is
the layout the decoder drafts with (`drafting.kinds.dflash.DFlashSession`): the context is
every position the LLM has run, the guaranteed token opens the block.

The data: every position of every answer and its prompt, with its features and the window
[x_t, x_{t+1}, ..., x_{t+b-1}] (-1 past the record's end; a prompt row's is [x_t, -2, ...]:
context only, never an anchor). A micro-batch is `positions` // (anchors (b - 1)) answers with
up to `anchors` anchors each, drawn from (seed, micro-batch number), so a resumed run repeats them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx_lm.models.llama import ModelArgs

from ...drafting.kinds.dflash import MODEL_TYPE, DFlash
from ...drafting.seam import TreeDrafter
from ...errors import InputError
from ...models.attention import additive
from ...runtime import fastmath
from ..dataset import batch_rows
from ..distill_file import DistillRecord
from ..recipe import Batches, Positions, Recipe

PROMPT = -2  # a window's label in a prompt row: the row is context, never an anchor
# The loss's inputs: features (B, S, F), block tokens (B, T) (-1: mask), block positions (B, T), the
# additive mask (B, 1, T, S + T), the flat block positions scored (M,), their targets (M,)
# and weights (M,).
Batch = tuple[mx.array, ...]


def target_layer_ids(num_layers: int, draft_layers: int) -> list[int]:
    """z-lab's default taps: one per draft layer, spread evenly over layers 1 .. n - 3 (the
    middle layer for one)."""
    if draft_layers == 1:
        return [num_layers // 2]
    span = num_layers - 4
    return [int(round(1 + i * span / (draft_layers - 1))) for i in range(draft_layers)]


def block_windows(record: DistillRecord, block_size: int) -> np.ndarray:
    """(n, b) windows of every prompt and answer position of `record` (module docstring)."""
    seq = np.asarray(record.prompt_ids + record.response_ids, np.int64)
    n, p = len(seq), len(record.prompt_ids)
    padded = np.concatenate([seq, np.full(block_size, -1)])
    windows = padded[np.arange(n)[:, None] + np.arange(block_size)[None]]
    windows[:p, 1:] = PROMPT
    return windows.astype(np.int32)


def record_spans(windows: np.ndarray) -> np.ndarray:
    """(n, 2) [start, end) rows of each record with an anchor: a record's last row is the one
    whose next token is -1."""
    ends = np.flatnonzero(windows[:, 1] == -1) + 1
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    spans = np.stack([starts, ends], axis=1)
    has_anchor = [(windows[s:e, 1] >= 0).any() for s, e in spans]
    return spans[np.asarray(has_anchor, bool)]


def block_batch(data: Positions, spans: np.ndarray, anchors: int, rng: np.random.Generator, gamma: float) -> Batch:
    """The loss's inputs for up to `anchors` blocks of each record in `spans`, drawn by `rng`
    (the blocks' mask positions hold -1: the drafter's mask token replaces them)."""
    features, windows = data
    b = windows.shape[1]
    chosen = []
    for start, end in spans:
        candidates = np.flatnonzero(windows[start:end, 1] >= 0)
        chosen.append(np.sort(rng.choice(candidates, min(anchors, len(candidates)), replace=False)))
    rows, blocks = len(spans), max(len(c) for c in chosen)
    context = max(int(c.max()) for c in chosen)  # the rows any block sees: those before its anchor
    feats = np.zeros((rows, context, features.shape[1]), np.float32)
    tokens = np.full((rows, blocks, b), -1, np.int32)
    positions = np.zeros((rows, blocks, b), np.int32)
    labels = np.full((rows, blocks, b), -1, np.int64)
    sees = np.zeros((rows, blocks, b, context + blocks * b), bool)
    own = np.kron(np.eye(blocks, dtype=bool), np.ones((b, b), bool)).reshape(blocks, b, blocks * b)
    sees[..., context:] = own[None]
    for r, ((start, end), picked) in enumerate(zip(spans, chosen)):
        size = min(end - start, context)
        feats[r, :size] = features[start : start + size]
        for j, a in enumerate(picked):
            tokens[r, j, 0] = windows[start + a, 0]
            positions[r, j] = a + np.arange(b)
            labels[r, j, 1:] = windows[start + a, 1:]
            sees[r, j, :, :a] = True
    weights = np.exp(-(np.arange(b) - 1).clip(0) / gamma)[None, None] * (labels >= 0)
    index = np.flatnonzero(weights.reshape(-1) > 0)
    return (
        mx.array(feats),
        mx.array(tokens.reshape(rows, -1)),
        mx.array(positions.reshape(rows, -1)),
        additive(mx.array(sees.reshape(rows, 1, blocks * b, -1)), mx.float32),
        mx.array(index.astype(np.int32)),
        mx.array(labels.reshape(-1)[index].astype(np.int32)),
        mx.array(weights.reshape(-1)[index].astype(np.float32)),
    )


def block_logits(dflash: DFlash, model: nn.Module, batch: Batch) -> tuple[mx.array, mx.array, mx.array]:
    """(logits (M, V) of the scored block positions, their targets, their weights)."""
    features, tokens, positions, seen, index, targets, weights = batch
    tokens = mx.where(tokens < 0, dflash.mask_token_id, tokens)
    hidden = dflash.blocks_hidden(model.embedding(tokens), positions, features, seen)
    logits = model.logits(hidden.reshape(-1, hidden.shape[-1])[index]).astype(mx.float32)
    return logits, targets, weights


def block_loss(dflash: DFlash, model: nn.Module, batch: Batch) -> mx.array:
    """The weighted mean cross-entropy of the scored block positions."""
    logits, targets, weights = block_logits(dflash, model, batch)
    ce = fastmath.logsumexp(logits) - mx.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    return (ce * weights).sum() / weights.sum()


@dataclass(frozen=True)
class DFlashRecipe(Recipe):
    """A DFlash block drafter for the LLM: its layers, block and objective."""

    kind: ClassVar[str] = "dflash"

    layers: int = 3  # draft layers, each of the LLM's own shape; as many taps (z-lab's rule)
    block_size: int = 16  # the guaranteed token and b - 1 drafted positions
    anchors: int = 8  # blocks drawn from each answer of a micro-batch
    loss_decay: float = 7.0  # gamma: position k's weight exp(-(k - 1) / gamma) (the paper's, for b = 16)
    mask_token_id: int | None = None  # None: the LLM's pad token, else token 0

    def __post_init__(self) -> None:
        if self.layers < 1 or self.block_size < 2 or self.anchors < 1 or self.loss_decay <= 0:
            raise ValueError("DFlash needs layers >= 1, block_size >= 2, anchors >= 1 and loss_decay > 0")

    @property
    def depths(self) -> int:
        return self.block_size - 1

    def layer_ids(self, llm_config: dict[str, Any]) -> list[int]:
        """The LLM layers whose outputs it reads (below the last: its output is final-normed)."""
        count = llm_config["num_hidden_layers"]
        ids = target_layer_ids(count, self.layers)
        if min(ids) < 0 or max(ids) > count - 2:
            raise InputError(f"a {self.layers}-layer DFlash reads layers {ids}, but the model has {count} layers")
        return ids

    def feature_layers(self, llm_config: dict[str, Any]) -> tuple[int, ...]:
        return tuple(i + 1 for i in self.layer_ids(llm_config))  # a layer's output is the next one's input

    def arrays(self, records: Sequence[DistillRecord], features: Sequence[np.ndarray]) -> Positions:
        if not records:
            return np.zeros((0, 0), np.float16), np.zeros((0, self.block_size), np.int32)
        windows = [block_windows(r, self.block_size) for r in records]
        return np.concatenate(features), np.concatenate(windows)

    def drafter_config(self, llm_config: dict[str, Any]) -> dict[str, Any]:
        """z-lab's config.json: the LLM's attention and MLP shape, `layers` layers, the taps."""
        llama = {f.name for f in fields(ModelArgs)}
        mask = self.mask_token_id
        if mask is None:
            mask = llm_config.get("pad_token_id") if isinstance(llm_config.get("pad_token_id"), int) else 0
        if not 0 <= mask < llm_config["vocab_size"]:
            raise InputError(f"mask token {mask} is outside the model's vocabulary of {llm_config['vocab_size']}")
        return {k: v for k, v in llm_config.items() if k in llama} | {
            "model_type": MODEL_TYPE,
            "num_hidden_layers": self.layers,
            "block_size": self.block_size,
            "dflash_config": {"target_layer_ids": self.layer_ids(llm_config), "mask_token_id": mask},
        }

    def fresh(self, llm_config: dict[str, Any], model: nn.Module | None, token_ids: np.ndarray | None) -> DFlash:
        """MLX's default initialisation (nn.Linear U(+-1/sqrt(fan_in)), norms 1); the embedding
        and head are the LLM's, never trained."""
        return DFlash(self.drafter_config(llm_config))

    def batches(self, data: Positions, positions: int, seed: int) -> Batches:
        spans = record_spans(data[1])
        if not len(spans):
            raise InputError("no answers of two tokens or more to train DFlash on")
        rows = max(1, positions // (self.anchors * self.depths))

        def batch(k: int) -> Batch:
            chosen = spans[batch_rows(seed, len(spans), k, rows)]
            rng = np.random.default_rng([seed, k, 2])
            return block_batch(data, chosen, self.anchors, rng, self.loss_decay)

        return len(spans), rows, batch

    def loss_and_grad(self, model: nn.Module, drafter: TreeDrafter) -> Callable[..., Any]:
        return nn.value_and_grad(drafter, lambda d, *batch: block_loss(d, model, batch))

    def accuracy(self, drafter: TreeDrafter, model: nn.Module, data: Positions) -> dict[str, list[float]]:
        """Top-1 / top-5 per block position k = 1 .. b - 1 on blocks at fixed anchors (every
        held-out answer, up to `anchors` each, seed 0), teacher-forced on the LLM's features."""
        spans = record_spans(data[1])
        rng = np.random.default_rng(0)
        hits = np.zeros((3, self.depths))
        for k in range(0, len(spans), 8):
            batch = block_batch(data, spans[k : k + 8], self.anchors, rng, self.loss_decay)
            logits, targets, _ = block_logits(drafter, model, batch)
            depth = np.array(batch[4]) % self.block_size - 1
            top5 = mx.argpartition(-logits, kth=4, axis=-1)[:, :5]
            found = np.array(mx.stack([mx.argmax(logits, -1) == targets, (top5 == targets[:, None]).any(-1)]))
            for row in range(2):
                np.add.at(hits[row], depth, found[row])
            np.add.at(hits[2], depth, 1)
        total = np.maximum(hits[2], 1)
        return {"top1": (hits[0] / total).tolist(), "top5": (hits[1] / total).tolist()}


RECIPE = DFlashRecipe
