"""Tree verification through mlx-lm's own model classes, for any architecture mlx-lm runs with
standard global or sliding-window attention (Qwen, Gemma, Phi, OLMo, Granite, ...).

mlx-lm's attention layers ask their cache for three things: `offset` (the RoPE position),
`update_and_fetch` (store this block, return every key so far) and, through
`create_attention_mask`, `make_mask`. `TreeModel` answers them from our `KVCache` for the
duration of one call: the offset is the block's per-token positions, the fetched keys are
the committed cache plus the pending (uncommitted) block (up to the mask's width, the cache's
`span`), and the mask is the caller's tree mask, narrowed to the layer's window where it has
one, made additive once per call. Each layer's `rope` is wrapped once so
that it rotates every token at its own position. Nothing of mlx-lm is copied, so a model
mlx-lm fixes or adds is verified as mlx-lm runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import KVCache as MlxKVCache
from mlx_lm.models.cache import RotatingKVCache

from .attention import additive
from .cache import BatchKVCache, KVCache
from .llm import Mask
from .rope import PositionedRoPE

ROLLBACK_CACHES = (MlxKVCache, RotatingKVCache)  # per-layer caches a tree verifier can stand in for
# Architectures whose attention masks scores grouped per key/value head, (B, kv, repeats, T, S):
# a (B, 1, T, S) mask of B > 1 rows would broadcast its rows against the heads.
GROUPED_SCORES = {"gemma2"}


class UnsupportedModel(ValueError):
    """The architecture cannot verify a tree exactly (its message says why, in one line)."""


@dataclass(frozen=True)
class Dimensions:
    """The sizes every part of the project reads off an LLM, whatever its architecture."""

    model_type: str
    num_hidden_layers: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None


_RECORDING: dict[type, type] = {}  # layer class -> its subclass that reports its input


def _report_inputs(layer: nn.Module) -> None:
    """Make `layer` call `layer.tap(x)` with its input first, whenever `tap` is set (taps
    read what enters a decoder layer, inside mlx-lm's own loop over them)."""
    cls = type(layer)
    if cls not in _RECORDING:

        def __call__(self: Any, x: mx.array, *args: Any, **kwargs: Any) -> Any:
            if self.tap is not None:
                self.tap(x)
            return cls.__call__(self, x, *args, **kwargs)

        _RECORDING[cls] = type(cls.__name__, (cls,), {"__call__": __call__, "tap": None})
    layer.__class__ = _RECORDING[cls]


class _Block:
    """One forward call's block as the layers see it: where it sits and what it may attend."""

    def __init__(self, cache: Any, positions: mx.array | None, mask: Mask, grouped: bool, dtype: mx.Dtype):
        self.cache, self.positions, self.mask, self.grouped, self.dtype = cache, positions, mask, grouped, dtype
        self.columns = mask.shape[-1] if isinstance(mask, mx.array) else None  # keys each layer reads
        self._windowed: dict[tuple[int | None, bool], Mask] = {}

    @property
    def offset(self) -> int | mx.array:
        return self.positions if self.positions is not None else self.cache.length

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> Mask:
        mask = self._mask(N, return_array, window_size)
        return mask[:, :, None] if self.grouped and isinstance(mask, mx.array) and mask.ndim == 4 else mask

    def _mask(self, N: int, return_array: bool, window_size: int | None) -> Mask:
        if self.positions is None and (window_size is not None or return_array and not isinstance(self.mask, mx.array)):
            return create_causal_mask(N, self.cache.length, window_size=window_size)  # a plain causal block
        key = (window_size, return_array)
        if key not in self._windowed:
            plain = window_size is None and not (return_array and not isinstance(self.mask, mx.array))
            self._windowed[key] = additive(self.mask if plain else self._explicit(window_size), self.dtype)
        return self._windowed[key]

    def _explicit(self, window: int | None) -> mx.array:
        """The caller's mask as a bool array, keys farther than `window` positions hidden
        (every cache says where its keys sit: `key_positions`)."""
        keys = self.cache.key_positions(self.positions, self.columns)  # (B, S)
        B, T = self.positions.shape
        mask = self.mask if isinstance(self.mask, mx.array) else mx.ones((B, 1, T, keys.shape[1]), mx.bool_)
        if window is not None:
            mask = mask & ((self.positions[:, None, :, None] - keys[:, None, None, :]) < window)
        return mask


class _LayerView:
    """The cache one mlx-lm attention layer talks to during one call."""

    def __init__(self, block: _Block, layer: int):
        self.block, self.layer = block, layer

    @property
    def offset(self) -> int | mx.array:
        return self.block.offset

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return self.block.cache.write(self.layer, keys, values, self.block.columns)

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> Mask:
        return self.block.make_mask(N, return_array, window_size)


class TreeModel(nn.Module):
    """An mlx-lm `Model` with the interface the decoding loop verifies trees through
    (the same as `models.llama.Model`): hidden states for tokens at given positions under a
    given mask, written to our cache uncommitted; logits only where asked."""

    def __init__(self, model: nn.Module):
        super().__init__()
        check_rollback(model)
        self.wrapped = model
        text = model.language_model if "language_model" in model else model  # multimodal folders
        self._text = text
        for _, module in text.named_modules():
            rope = module.get("rope") if isinstance(module, dict) else None
            if isinstance(rope, nn.Module) and not isinstance(rope, PositionedRoPE):
                module.rope = PositionedRoPE(rope)
        for layer in text.model.layers:
            _report_inputs(layer)
        args = text.args if hasattr(text, "args") else model.args
        self.args = Dimensions(
            model_type=getattr(args, "model_type", "") or type(text).__module__.rsplit(".", 1)[-1],
            num_hidden_layers=len(text.model.layers),
            hidden_size=args.hidden_size,
            vocab_size=args.vocab_size,
            max_position_embeddings=getattr(args, "max_position_embeddings", None),
        )

    def __call__(
        self,
        tokens: mx.array,
        cache: KVCache | BatchKVCache | None = None,
        positions: mx.array | None = None,
        mask: Mask = "causal",
        taps: tuple[int, ...] = (),
    ) -> mx.array:
        """Final-norm hidden states (B, T, D), then the `taps` layers' inputs (`models.llm.LLM`)."""
        cache = cache if cache is not None else self.make_cache()
        if isinstance(mask, str) and tokens.shape[1] == 1:
            mask = None
        dtype = self.embedding(tokens[:1, :1]).dtype  # the activations' (a quantized table's scales)
        block = _Block(cache, positions, mask, self.args.model_type in GROUPED_SCORES, dtype)
        views = [_LayerView(block, i) for i in range(self.args.num_hidden_layers)]
        if not taps:
            return self._text.model(tokens, cache=views)
        seen: dict[int, mx.array] = {}
        for i in taps:
            self.layers[i].tap = partial(seen.__setitem__, i)
        try:
            hidden = self._text.model(tokens, cache=views)
        finally:
            for i in taps:
                self.layers[i].tap = None
        return mx.concatenate([hidden, *(seen[i] for i in taps)], axis=-1)

    def logits(self, hidden: mx.array) -> mx.array:
        """Vocabulary logits (..., V), with the architecture's own soft-capping or scaling."""
        text, cap = self._text, self.logit_softcap
        out = text.lm_head(hidden) if "lm_head" in text else self.embedding.as_linear(hidden)
        if cap:
            out = mx.tanh(out / cap) * cap
        scaling = getattr(text, "logits_scaling", None)
        return out / scaling if scaling else out

    @property
    def logit_softcap(self) -> float | None:
        """Gemma 2's final tanh soft-capping: its logits are not a linear map of the hidden state."""
        return getattr(self._text, "final_logit_softcapping", None)

    @property
    def embedding(self) -> nn.Embedding:
        return self._text.model.embed_tokens

    @property
    def layers(self) -> list[Any]:
        return self._text.model.layers

    def make_cache(self) -> KVCache:
        return KVCache(self.args.num_hidden_layers)


def check_rollback(model: nn.Module) -> None:
    """Raise `UnsupportedModel` unless every layer keeps a key/value cache: recurrent state
    (Mamba, GatedDeltaNet, ...) cannot be rolled back to the accepted prefix of a tree."""
    if not hasattr(model, "make_cache"):
        return
    kinds = {type(c).__name__ for c in model.make_cache() if not isinstance(c, ROLLBACK_CACHES)}
    if kinds:
        raise UnsupportedModel(
            f"its layers keep recurrent state ({', '.join(sorted(kinds))}) that cannot be rolled back "
            "to an accepted prefix, so speculative decoding could not be exact"
        )
