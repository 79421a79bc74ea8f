"""EAGLE's training objective (arXiv 2401.15077, section 4; SafeAILab/EAGLE `eagle/train/main.py`),
on the distillation data every kind trains on.

Upstream, for one conversation with the LLM's final-norm features f_0..f_{L-1} and tokens
x_0..x_{L-1}, EAGLE reads the pairs (x_{t+1}, f_t) under a causal mask (positions 0..L-1) and
its output o_t is its guess of f_{t+1}; with the LLM's own head,

    loss = v_w * SmoothL1(o_t, f_{t+1}) + p_w * CE(softmax(head(f_{t+1})), log_softmax(head(o_t)))

v_w = 1, p_w = 0.1; SmoothL1 with beta 1 (torch's default) averaged over the feature, then both
terms averaged over the positions that have a target (the loss mask; the last position has
none). The input features get uniform noise: upstream's `(rand - 0.5) * std * 512 / L`, std
0.2 and L the sequence length (EAGLE issue #172 asks why 512 / L; the paper says U(-0.1, 0.1)).
Here the noise is U(-w/2, w/2) with a fixed width w = `EagleRecipe.noise` (default 0.2:
the paper's U(-0.1, 0.1), upstream's at L = 512). The embedding is the LLM's, frozen
(`drafting.eagle.Eagle`), the optimizer AdamW: only `fc` and the layers train.

Here the stored features are the answers' (`distill.HiddenStore`: h_{p-1}..h_{p+R-2} for a
prompt of p tokens and an answer y_0..y_{R-1}), so a training sequence is an answer, starting
at its first token: pair j = (y_j, h_{p-1+j}) (the answer token with the LLM state that
produced it), j = 0..R-1, at position j; its targets are the next feature h_{p+j} (store row
j + 1) and the next token y_{j+1}, for j = 0..R-2. The prompt's pairs, which upstream's
sequences include, are absent, so the EAGLEs trained here are saved with `stage_prompt: false`
(`EagleRecipe.stage_prompt`): at inference too their sequence starts at the first answer
token. The classification target is the answer's token y_{j+1} (cross-entropy of head(o_j)),
mixed with weight `EagleRecipe.soft_targets` with upstream's soft target softmax(head(h_{p+j}))
(1: upstream's term exactly); on a greedy answer y_{j+1} is that distribution's argmax.

Batching: `batch_positions` // `seq` answers per micro-batch (`batch_positions` tokens in
sequences of `seq`), answers longer than `seq` cropped at a random start (a crop's
last pair keeps its target when the answer goes on), right-padded to the longest (causal
attention: padding on the right changes no real position); the loss reads only the positions
with a target, gathered before the LLM head (the vocabulary matmul is most of the work). Crops
and noise are drawn from (seed, micro-batch number), so a resumed run repeats them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx_lm.models.llama import ModelArgs

from ...drafting.kinds.eagle import MODEL_TYPE, Eagle
from ...drafting.seam import TreeDrafter
from ...errors import InputError
from ...runtime import fastmath
from ..dataset import batch_rows
from ..recipe import Batches, Positions, Recipe

# The loss's inputs: tokens (B, S) int32, features (B, S, D), index (M,) int32 of the flat
# positions with a target, their target features (M, D) and target tokens (M,) int32.
Batch = tuple[mx.array, mx.array, mx.array, mx.array, mx.array]


def record_spans(windows: np.ndarray) -> np.ndarray:
    """(n, 2) [start, end) rows of each record of an `assemble`d array with a target anywhere
    (two rows or more): a record's last row is the one whose next token (column 1) is -1."""
    ends = np.flatnonzero(windows[:, 1] < 0) + 1
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    spans = np.stack([starts, ends], axis=1)
    return spans[spans[:, 1] - spans[:, 0] >= 2]


def crops(spans: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """Each span cut to at most `length` rows at a random start."""
    size = spans[:, 1] - spans[:, 0]
    start = spans[:, 0] + rng.integers(0, np.maximum(size - length, 0) + 1)
    return np.stack([start, start + np.minimum(size, length)], axis=1)


def sequence_batch(
    data: tuple[np.ndarray, np.ndarray],
    pieces: np.ndarray,
    noise: float = 0.0,
    rng: np.random.Generator | None = None,
) -> Batch:
    """The loss's inputs for the row ranges `pieces` (B, 2) of the `assemble`d `data` (hidden
    (N, D), windows (N, T+1)), each a part of one record: row r pairs token windows[r, 0] with
    feature hidden[r]; its targets, where windows[r, 1] >= 0 (same record), are hidden[r + 1]
    and windows[r, 1]. With `noise` > 0, U(-noise/2, noise/2) is added to the input features."""
    hidden, windows = data
    lengths = pieces[:, 1] - pieces[:, 0]
    width = int(lengths.max())
    rows = np.full((len(pieces), width), -1, np.int64)
    for b, (start, end) in enumerate(pieces):
        rows[b, : end - start] = np.arange(start, end)
    real = rows >= 0
    safe = np.where(real, rows, 0)
    tokens = np.where(real, windows[safe, 0], 0).astype(np.int32)
    features = np.where(real[..., None], hidden[safe], 0).astype(np.float32)
    if noise > 0:
        features += rng.uniform(-noise / 2, noise / 2, features.shape).astype(np.float32)
    index = np.flatnonzero(real & (windows[safe, 1] >= 0))
    targets = rows.reshape(-1)[index]
    return (
        mx.array(tokens),
        mx.array(features),
        mx.array(index.astype(np.int32)),
        mx.array(hidden[targets + 1].astype(np.float32)),
        mx.array(windows[targets, 1].astype(np.int32)),
    )


def training_batch(data: Positions, spans: np.ndarray, seq: int, noise: float, seed: int, micro_batch: int) -> Batch:
    """Micro-batch number `micro_batch` of the answers `spans` (chosen by the caller), cropped
    to `seq` tokens and noised with width `noise`, both drawn from (seed, micro_batch)."""
    rng = np.random.default_rng([seed, micro_batch, 1])
    return sequence_batch(data, crops(spans, seq, rng), noise, rng)


def eagle_outputs(eagle: Eagle, tokens: mx.array, features: mx.array, index: mx.array) -> mx.array:
    """(M, D): EAGLE's guesses of the next feature at the flat positions `index`, every
    sequence of the batch read causally from position 0."""
    out = eagle(tokens, features, None, 0, "causal")
    return out.reshape(-1, out.shape[-1])[index]


def eagle_loss(
    eagle: Eagle,
    model: nn.Module,
    tokens: mx.array,
    features: mx.array,
    index: mx.array,
    target_features: mx.array,
    target_tokens: mx.array,
    reg_weight: float = 1.0,
    cls_weight: float = 0.1,
    soft: float = 0.0,
) -> tuple[mx.array, tuple[mx.array, mx.array]]:
    """reg_weight * SmoothL1 + cls_weight * cross-entropy (module docstring), each averaged over
    the M positions with a target; `model.logits` is the LLM's head. Returns (loss, (reg, cls))."""
    out = eagle_outputs(eagle, tokens, features, index).astype(mx.float32)
    diff = mx.abs(out - target_features)
    reg = mx.where(diff < 1.0, 0.5 * diff * diff, diff - 0.5).mean(axis=-1).mean()
    logits = model.logits(out).astype(mx.float32)
    norm = fastmath.logsumexp(logits)
    cls = (norm - mx.take_along_axis(logits, target_tokens[:, None], axis=-1)[:, 0]).mean()
    if soft > 0:
        probs = fastmath.softmax(mx.stop_gradient(model.logits(target_features).astype(mx.float32)))
        cls = (1 - soft) * cls + soft * (norm - (probs * logits).sum(axis=-1)).mean()
    return reg_weight * reg + cls_weight * cls, (reg, cls)


def eagle_accuracy(
    eagle: Eagle,
    model: nn.Module,
    data: tuple[np.ndarray, np.ndarray],
    length: int,
    rows: int = 16,
) -> dict[str, list[float]]:
    """Held-out top-1 / top-5 of head(o_j) against the answer's next token y_{j+1}, teacher-forced
    on the LLM's features (depth 1; no noise), every answer read in consecutive pieces of
    `length` tokens, as the training crops."""
    spans = record_spans(data[1])
    pieces = np.array(
        [(s, min(s + length, end)) for start, end in spans for s in range(start, end - 1, length)], np.int64
    ).reshape(-1, 2)
    hits = np.zeros(2)
    total = 0
    for k in range(0, len(pieces), rows):
        tokens, features, index, _, target = sequence_batch(data, pieces[k : k + rows])
        logits = model.logits(eagle_outputs(eagle, tokens, features, index))
        top5 = mx.argpartition(-logits, kth=4, axis=-1)[:, :5]
        found = mx.stack([(mx.argmax(logits, axis=-1) == target).sum(), (top5 == target[:, None]).any(-1).sum()])
        hits += np.array(found)
        total += target.shape[0]
    total = max(total, 1)
    return {"top1": [float(hits[0] / total)], "top5": [float(hits[1] / total)]}


@dataclass(frozen=True)
class EagleRecipe(Recipe):
    """EAGLE-1 on whole answers: its decoder layers and its objective's settings."""

    kind: ClassVar[str] = "eagle"

    layers: int = 1  # decoder layers, each of the LLM's own shape (upstream's: 1)
    seq: int = 128  # tokens per training sequence: longer answers are cropped at random
    noise: float = 0.2  # width of the uniform noise on the input features: U(-0.1, 0.1)
    reg_weight: float = 1.0  # SmoothL1 on the next feature (upstream's v_w)
    cls_weight: float = 0.1  # cross-entropy of the LLM head on it (upstream's p_w)
    soft_targets: float = 0.0  # of that cross-entropy, the weight of the LLM's distribution as target
    stage_prompt: bool = False  # the saved config's stage_prompt (`drafting.kinds.eagle`)

    def __post_init__(self) -> None:
        if self.layers < 1 or self.seq < 2:
            raise ValueError("EAGLE's layers must be >= 1 and its seq >= 2")

    @property
    def depths(self) -> int:
        return 1  # trained at depth 1 on the LLM's true features

    def drafter_config(self, llm_config: dict[str, Any]) -> dict[str, Any]:
        """The LLM's Llama fields with `layers` layers, as upstream's EConfig."""
        llama = {f.name for f in fields(ModelArgs)}
        return {k: v for k, v in llm_config.items() if k in llama} | {
            "model_type": MODEL_TYPE,
            "num_hidden_layers": self.layers,
            "bias": True,
            "stage_prompt": self.stage_prompt,
        }

    def fresh(self, llm_config: dict[str, Any], model: nn.Module | None, token_ids: np.ndarray | None) -> Eagle:
        """Upstream's start (SafeAILab/EAGLE `cnets1.Model(config, load_emb=True)`): `fc` and the
        layers at their default init (torch's and MLX's nn.Linear alike: U(+-1/sqrt(fan_in)); norms
        1), `embed_tokens` a copy of the LLM's embedding (dequantized if need be; frozen by `Eagle`).
        Without `model`: the default random embedding."""
        eagle = Eagle(self.drafter_config(llm_config))
        if model is not None:
            vocab = llm_config["vocab_size"]
            eagle.embed_tokens.weight = model.embedding(mx.arange(vocab, dtype=mx.int32)).astype(mx.float32)
        return eagle

    def batches(self, data: Positions, positions: int, seed: int) -> Batches:
        """`positions` // `seq` answers (`record_spans`) a micro-batch, cropped and noised."""
        spans = record_spans(data[1])
        if not len(spans):
            raise InputError("no answers of two tokens or more to train EAGLE on")
        rows = max(1, positions // self.seq)

        def batch(k: int) -> Batch:
            chosen = spans[batch_rows(seed, len(spans), k, rows)]
            return training_batch(data, chosen, self.seq, self.noise, seed, k)

        return len(spans), rows, batch

    def loss_and_grad(self, model: nn.Module, drafter: TreeDrafter) -> Callable[..., Any]:
        """`eagle_loss` with the recipe's weights and its gradient (trainable parameters: all but
        the frozen embedding) as one function of a `Batch`."""

        def loss_fn(e: Eagle, *batch: mx.array) -> mx.array:
            return eagle_loss(e, model, *batch, self.reg_weight, self.cls_weight, self.soft_targets)[0]

        return nn.value_and_grad(drafter, loss_fn)

    def accuracy(self, drafter: TreeDrafter, model: nn.Module, data: Positions) -> dict[str, list[float]]:
        return eagle_accuracy(drafter, model, data, self.seq)


RECIPE = EagleRecipe
