"""DFlash (arXiv 2602.06036): a block drafter. One bidirectional forward over [the guaranteed
token, mask x (b - 1)], conditioned on features of several target layers, gives a distribution
for each of the next b - 1 positions at once. The beam search runs over those distributions
(positions are independent, so it keeps the likeliest paths exactly) and the node budget keeps
the likeliest prefixes: one drafter forward, one tree (DDTree's idea, arXiv 2604.12989).

Upstream layout (z-lab/dflash `dflash/model.py` and `dflash/model_mlx.py`; e.g.
z-lab/Qwen3-4B-DFlash-b16): a Qwen3-style config.json (`hidden_size`, `num_hidden_layers`,
heads, KV heads, `head_dim`, `intermediate_size`, `rms_norm_eps`, `rope_theta`,
`max_position_embeddings`, `vocab_size`, `block_size`) with `dflash_config`
{`target_layer_ids`, `mask_token_id`}; model.safetensors holds `fc.weight` (H, n H) over the n
tapped layers' outputs (decoder layer outputs before the final norm, concatenated in
`target_layer_ids` order), `hidden_norm.weight`, `layers.{i}.self_attn.{q,k,v,o}_proj.weight`,
`layers.{i}.self_attn.{q,k}_norm.weight`, `layers.{i}.mlp.{gate,up,down}_proj.weight`,
`layers.{i}.{input,post_attention}_layernorm.weight` and `norm.weight`, no biases, and no
embedding or head: the target's are borrowed.

Each layer attends from the block over two sets of keys and values: the context's, projected
from hidden_norm(fc(features)) of every position the target has run (`k_norm`, then RoPE at the
position), and the block's own, from the layer's normed input; no mask. The context's keys and
values are kept per generation (`DFlashSession`), the block's are not. A layer's output is the
next layer's input, so the taps asked of the target are the inputs of layers `id + 1`.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.llama import ModelArgs
from mlx_lm.models.rope_utils import initialize_rope

from ...errors import DrafterLoadError
from ...formats.checkpoint import (
    CONFIG_FILE,
    check_target,
    read_checkpoint,
    save_staged,
)
from ...models.attention import additive, attention
from ...models.cache import KVCache
from ...models.rope import PositionedRoPE
from ..seam import StepFn, TreeDrafter
from .eagle import EagleMLP, build_eagle, read_json, save
from .eagle import load as load_eagle

MODEL_TYPE = "dflash_drafter"
UPSTREAM_WEIGHTS = "model.safetensors"


class BlockAttention(nn.Module):
    """Attention from the block over the context's keys/values and the block's own."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.heads, self.kv_heads = args.num_attention_heads, args.num_key_value_heads
        self.head_dim = args.head_dim or args.hidden_size // self.heads
        self.scale = self.head_dim**-0.5
        width = args.hidden_size
        self.q_proj = nn.Linear(width, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, width, bias=False)
        self.q_norm = nn.RMSNorm(self.head_dim, eps=args.rms_norm_eps)
        self.k_norm = nn.RMSNorm(self.head_dim, eps=args.rms_norm_eps)
        self.rope = PositionedRoPE(
            initialize_rope(self.head_dim, args.rope_theta, False, args.rope_scaling, args.max_position_embeddings)
        )

    def keys_values(self, x: mx.array, offset: int | mx.array) -> tuple[mx.array, mx.array]:
        """Keys (k_norm, RoPE from `offset`, or at positions (B, T)) and values (B, kv heads, T, Dh)
        of `x` (B, T, H)."""
        B, T, _ = x.shape
        k = self.k_norm(self.k_proj(x).reshape(B, T, self.kv_heads, -1)).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(B, T, self.kv_heads, -1).transpose(0, 2, 1, 3)
        return self.rope(k, offset=offset), v

    def __call__(self, x: mx.array, offset: mx.array, context: tuple[mx.array, mx.array], seen: mx.array) -> mx.array:
        """The block x (B, b, H) at positions offset.. (or (B, b) positions) over `context` (keys,
        values) and itself; `seen` (B, 1, 1 or b, S + b): the additive mask of the columns it sees."""
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).reshape(B, T, self.heads, -1)).transpose(0, 2, 1, 3)
        k, v = self.keys_values(x, offset)
        keys, values = mx.concatenate([context[0], k], axis=2), mx.concatenate([context[1], v], axis=2)
        out = attention(self.rope(q, offset=offset), keys, values, self.scale, seen)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, T, -1))


class BlockLayer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.self_attn = BlockAttention(args)
        self.mlp = EagleMLP(args)  # the Llama MLP, differentiable: DFlash trains
        self.input_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)

    def __call__(self, x: mx.array, offset: mx.array, context: tuple[mx.array, mx.array], seen: mx.array) -> mx.array:
        h = x + self.self_attn(self.input_layernorm(x), offset, context, seen)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlash(nn.Module, TreeDrafter):
    """The DFlash draft network; as a drafter it runs through `DFlashSession` (`open`)."""

    kind = "dflash"
    label = "DFlash"  # in messages
    stateful = True

    def __init__(self, config: dict[str, Any]):
        super().__init__()
        self.config = config
        self.args = ModelArgs.from_dict(config | {"model_type": "llama"})
        settings = config.get("dflash_config") or {}
        self.layer_ids = tuple(int(i) for i in settings.get("target_layer_ids") or ())
        if not self.layer_ids or "mask_token_id" not in settings:
            raise ValueError("dflash_config needs target_layer_ids and mask_token_id")
        self.mask_token_id = int(settings["mask_token_id"])
        self.block_size = int(settings.get("block_size", config.get("block_size", 16)))
        self.max_beam_length = self.block_size  # the guaranteed token and b - 1 drafts
        width = self.args.hidden_size
        self.fc = nn.Linear(len(self.layer_ids) * width, width, bias=False)
        self.hidden_norm = nn.RMSNorm(width, eps=self.args.rms_norm_eps)
        self.layers = [BlockLayer(self.args) for _ in range(self.args.num_hidden_layers)]
        self.norm = nn.RMSNorm(width, eps=self.args.rms_norm_eps)
        self.source: Path | None = None

    @property
    def target_layers(self) -> tuple[int, ...]:
        """The target layers whose inputs are the outputs DFlash reads (`id + 1`)."""
        return tuple(i + 1 for i in self.layer_ids)

    def check_target_sizes(self, vocab_size: Any, hidden_size: Any, num_layers: Any, name: str) -> None:
        """Raise `DrafterLoadError` unless the LLM `name` has this drafter's width, a vocabulary
        holding its mask token, and the layers it reads (not the last one: its output is
        final-normed on the way to the head)."""
        if hidden_size != self.args.hidden_size:
            raise DrafterLoadError(
                f"dflash drafter {self.source} reads hidden size {self.args.hidden_size}, but {name} has {hidden_size}"
            )
        if not isinstance(vocab_size, int) or not 0 <= self.mask_token_id < vocab_size:
            raise DrafterLoadError(
                f"dflash drafter {self.source}: mask_token_id {self.mask_token_id} is outside "
                f"{name}'s vocabulary of {vocab_size}"
            )
        if not isinstance(num_layers, int) or not all(0 <= i < num_layers - 1 for i in self.layer_ids):
            raise DrafterLoadError(
                f"dflash drafter {self.source} reads layers {list(self.layer_ids)}, but {name} has "
                f"{num_layers} layers (the taps must be below the last)"
            )

    def for_target(self, model: Any, name: str) -> DFlash:
        args = model.args
        self.check_target_sizes(args.vocab_size, args.hidden_size, args.num_hidden_layers, name)
        return self

    def context(self, features: mx.array) -> mx.array:
        """The context rows (1, n, H) of the tapped features (n, n_taps H)."""
        return self.hidden_norm(self.fc(features[None]))

    def block_hidden(self, block: mx.array, offset: mx.array, contexts: list, seen: mx.array) -> mx.array:
        """Final-normed outputs (1, b, H) of the embedded block (1, b, H) at positions offset.."""
        h = block
        for layer, context in zip(self.layers, contexts):
            h = layer(h, offset, context, seen)
        return self.norm(h)

    def blocks_hidden(self, blocks: mx.array, positions: mx.array, features: mx.array, seen: mx.array) -> mx.array:
        """Training's forward: final-normed outputs (B, T, H) of the embedded blocks (B, T, H) at
        `positions` (B, T), each row over its own context, the tapped features (B, S, n_taps H)
        of its positions 0..S-1; `seen` (B, 1, T, S + T) is the additive mask of which context
        rows and block columns each block position sees."""
        rows = self.hidden_norm(self.fc(features))
        where = mx.broadcast_to(mx.arange(rows.shape[1])[None], rows.shape[:2])
        contexts = [layer.self_attn.keys_values(rows, where) for layer in self.layers]
        return self.block_hidden(blocks, positions, contexts, seen)

    def open(self, model: Any, tokens: list[int], hidden: mx.array) -> DFlashSession:
        return DFlashSession(self, model, tokens, hidden)


class DFlashSession(TreeDrafter):
    """DFlash's context keys/values for one generation. `open`'s features are those of the
    prompt's last T positions; all but the last join the context at once, the last (which
    predicted the first answer token) with the decoder's first `stage`, as every later
    position joins: staged lazily, kept by `commit`."""

    stateful = True
    kind = DFlash.kind

    def __init__(self, dflash: DFlash, target: Any, tokens: list[int], hidden: mx.array):
        self.dflash, self.target = dflash, target
        self.target_layers, self.max_beam_length = dflash.target_layers, dflash.max_beam_length
        self.start = len(tokens) - hidden.shape[0]  # the position of hidden[0]
        self.cache = KVCache(len(dflash.layers))
        self.count = mx.array(0, mx.int32)  # staged rows that are real (lazy)
        self.staged = 0
        if hidden.shape[0] > 1:
            self._write(hidden[:-1])
            self.cache.commit(hidden.shape[0] - 1)

    def _write(self, features: mx.array) -> None:
        """Project `features` (n, F) into every layer's context keys/values after the committed ones."""
        rows, offset = self.dflash.context(features), self.start + self.cache.length
        columns = self.cache.span(features.shape[0])
        for i, layer in enumerate(self.dflash.layers):
            self.cache.write(i, *layer.self_attn.keys_values(rows, offset), columns)

    def stage(self, tokens: mx.array, features: mx.array, count: mx.array) -> None:
        self._write(features)
        self.staged, self.count = features.shape[0], count.astype(mx.int32)

    def commit(self, count: int) -> None:
        self.cache.commit(count)
        self.staged = 0

    def block_hidden(self, token: mx.array, embedding: Any) -> mx.array:
        """DFlash's final-normed outputs (1, b, H) for the block after `token` (1, 1): position
        i >= 1 holds its distribution of the i-th token after `token`."""
        dflash, cache = self.dflash, self.cache
        masks = mx.full((1, dflash.block_size - 1), dflash.mask_token_id, mx.int32)
        block = embedding(mx.concatenate([token.astype(mx.int32), masks], axis=1))
        real = cache.length + self.count  # context rows, and the block's first position
        columns = cache.span(self.staged)
        seen = mx.concatenate([mx.arange(columns) < real, mx.ones((dflash.block_size,), mx.bool_)])
        contexts = [(k[..., :columns, :], v[..., :columns, :]) for k, v in zip(cache.keys, cache.values)]
        seen = additive(seen[None, None, None], block.dtype)  # built once, not by every layer
        return dflash.block_hidden(block, (self.start + real).reshape(1), contexts, seen)

    def draft_steps(self, context: mx.array, embedding: Any) -> tuple[Any, StepFn]:
        """One block forward at depth 0; depth d reads the target's head at its position d + 1,
        whichever tokens the beams hold (the positions are drafted independently), so a tree
        of L tokens pays the head for L - 1 positions, not the block's b - 1."""
        if context.shape[0] != 1:
            raise ValueError("DFlash drafts for one sequence at a time")
        block: list[mx.array] = []

        def step(state: mx.array, tokens: mx.array, depth: int) -> tuple[mx.array, mx.array]:
            if depth == 0:
                block.append(self.block_hidden(tokens, embedding))
            return state, self.target.logits(block[0][:, None, depth + 1])

        return mx.zeros((1, 1, 0)), step


def load(folder: Path, dtype: mx.Dtype) -> DFlash:
    """An MLX DFlash folder: config.json + model.safetensors (upstream keys)."""
    return load_eagle(folder, dtype, DFlash)


def is_upstream(folder: Path) -> bool:
    """A z-lab DFlash folder: a config.json with `dflash_config` beside model.safetensors."""
    try:
        config = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "dflash_config" in config and (folder / UPSTREAM_WEIGHTS).is_file()


def convert(
    src: Path, out: Path, *, dtype: mx.Dtype, llm_config: dict[str, Any] | None = None, force: bool = False
) -> Path:
    """A z-lab DFlash folder as an MLX folder at OUT, every key and shape checked, and the
    taps and the mask token checked against the LLM's config; nothing is written otherwise."""
    src, out = Path(src).expanduser(), Path(out).expanduser().absolute()
    folder = src.parent if src.is_file() else src
    if not (folder / UPSTREAM_WEIGHTS).is_file():
        raise DrafterLoadError(f"{src}: no DFlash weights (expected {UPSTREAM_WEIGHTS})")
    check_target(out, force)
    config = read_json(folder / CONFIG_FILE) | {"model_type": MODEL_TYPE}
    dflash = build_eagle(config, read_checkpoint(folder / UPSTREAM_WEIGHTS), folder / UPSTREAM_WEIGHTS, dtype, DFlash)
    if llm_config is not None:
        dflash.source = src
        sizes = (llm_config.get(k) for k in ("vocab_size", "hidden_size", "num_hidden_layers"))
        dflash.check_target_sizes(*sizes, "the model")
    return save_staged(partial(save, dflash), out)
