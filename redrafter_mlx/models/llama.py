"""Pure-MLX Llama forward that can verify a token tree in one pass.

Differs from mlx-lm's `llama.Model` in exactly what ReDrafter needs: every call takes
per-token position ids and an explicit attention mask, writes its block into a `KVCache`
without committing it, and returns final-norm hidden states; logits are computed only for
the positions the caller asks for. Parameter names match mlx-lm / Hugging Face, so
`mlx_lm.utils.load_model` (incl. 4-bit folders) loads weights straight into this class.
Short blocks (a decoding step, a verified tree) run each layer's work before and after
attention compiled, which cuts a one-token forward by about 12% and a 6-token verify pass
by about 6% on a 2-core x86 CPU (fewer, fused ops to dispatch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.llama import ModelArgs
from mlx_lm.models.rope_utils import initialize_rope

from ..runtime import fastmath
from .attention import additive, attention
from .cache import KVCache
from .llm import Mask, Segment
from .pipeline import Stage
from .rope import PositionedRoPE

# Blocks up to this long per row, under an array mask, run compiled layers (traced per length).
COMPILED_MAX_TOKENS = 64
# A short block's layers are handed to the device this many at a time (`mx.async_eval`), so
# that building the next layers' graph overlaps their compute: 5 to 7% of a verify step on a
# 2-core CPU (B = 1, 4 and 16), where the graph of 30 layers takes 5 ms to build.
ASYNC_EVERY = 8


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.num_attention_heads
        self.n_kv_heads = args.num_key_value_heads
        self.head_dim = args.head_dim or args.hidden_size // self.n_heads
        self.scale = self.head_dim**-0.5
        bias = args.attention_bias
        self.q_proj = nn.Linear(args.hidden_size, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(args.hidden_size, self.n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(args.hidden_size, self.n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, args.hidden_size, bias=bias)
        self.rope = PositionedRoPE(
            initialize_rope(
                self.head_dim,
                args.rope_theta,
                args.rope_traditional,
                args.rope_scaling,
                args.max_position_embeddings,
            )
        )

    def project(self, x: mx.array, positions: mx.array | int) -> tuple[mx.array, mx.array, mx.array]:
        """Queries, keys and values (B, heads, T, Dh) of `x` (B, T, D), RoPE applied."""
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.n_heads, -1).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(B, T, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(B, T, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
        return self.rope(q, positions), self.rope(k, positions), v

    def attend(self, q: mx.array, k: mx.array, v: mx.array, mask: Mask, cache: KVCache | None, layer: int) -> mx.array:
        """Attention over the cache and this block (B, heads, T, Dh); writes the block's keys
        and values to `cache` (uncommitted)."""
        if cache is None:
            return attention(q, k, v, self.scale, mask)
        columns = mask.shape[-1] if isinstance(mask, mx.array) else None  # the cache's `span`
        extents = cache.key_extents(q.shape[2])
        return attention(q, *cache.write(layer, k, v, columns), self.scale, mask, extents)

    def output(self, attended: mx.array) -> mx.array:
        B, _, T, _ = attended.shape
        return self.o_proj(attended.transpose(0, 2, 1, 3).reshape(B, T, -1))

    def __call__(
        self, x: mx.array, positions: mx.array | int, mask: Mask, cache: KVCache | None, layer: int
    ) -> mx.array:
        return self.output(self.attend(*self.project(x, positions), mask, cache, layer))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        dim, hidden, bias = args.hidden_size, args.intermediate_size, args.mlp_bias
        self.gate_proj = nn.Linear(dim, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, dim, bias=bias)
        self.up_proj = nn.Linear(dim, hidden, bias=bias)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(fastmath.swiglu(self.gate_proj(x), self.up_proj(x)))


class CompiledParts:
    """The parts of a layer around attention, compiled once for all the layers of a model.

    Short blocks (decoding, verification) run them compiled: on a CPU a layer's many small ops
    cost more to dispatch than to compute. The layer's weights are inputs of the compiled
    function, so a new block shape traces once for every layer (not once per layer: 30 traces
    per part on the embedded model, a fresh process's first steps' stall), and loading or
    quantizing weights later is seen. Tracing runs the layer's own code on its weights'
    placeholders, then gives the layer its weights back."""

    def __init__(self):
        self._layer: TransformerBlock | None = None
        self._before = mx.compile(partial(self._traced, "before_attention"))
        self._after = mx.compile(partial(self._traced, "after_attention"))

    def _traced(self, part: str, weights: dict, *args: mx.array):
        layer = self._layer
        own = layer.parameters()
        layer.update(weights)
        try:
            return getattr(layer, part)(*args)
        finally:
            layer.update(own)

    def before(self, layer: TransformerBlock, x: mx.array, positions: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        self._layer = layer
        return self._before(layer.parameters(), x, positions)

    def after(self, layer: TransformerBlock, x: mx.array, attended: mx.array) -> mx.array:
        self._layer = layer
        return self._after(layer.parameters(), x, attended)


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp = MLP(args)
        self.input_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.compiled: CompiledParts | None = None  # set by the model: shared by its layers

    def before_attention(self, x: mx.array, positions: mx.array | int) -> tuple[mx.array, mx.array, mx.array]:
        return self.self_attn.project(self.input_layernorm(x), positions)

    def after_attention(self, x: mx.array, attended: mx.array) -> mx.array:
        h = x + self.self_attn.output(attended)
        return h + self.mlp(self.post_attention_layernorm(h))

    def __call__(
        self,
        x: mx.array,
        positions: mx.array | int,
        mask: Mask,
        cache: KVCache | None,
        layer: int,
        compiled: bool = False,
    ) -> mx.array:
        """`compiled` needs array `positions` (an int offset would be traced as a constant)."""
        if not compiled:
            return self.after_attention(
                x, self.self_attn.attend(*self.before_attention(x, positions), mask, cache, layer)
            )
        q, k, v = self.compiled.before(self, x, positions)
        return self.compiled.after(self, x, self.self_attn.attend(q, k, v, mask, cache, layer))

    def run_together(
        self, x: mx.array, positions: mx.array, segments: Sequence[Segment], layer: int, compiled: bool
    ) -> mx.array:
        """`x` (1, N, D): the tokens of every segment end to end. The per-token work (norms,
        projections, MLP) runs on all N at once; attention runs per segment, over its cache."""
        q, k, v = self.compiled.before(self, x, positions) if compiled else self.before_attention(x, positions)
        attended, start = [], 0
        for segment in segments:
            rows, length = segment.tokens.shape
            end = start + rows * length

            def own(a: mx.array) -> mx.array:  # (rows, heads, length, Dh)
                return a[:, :, start:end].reshape(a.shape[1], rows, length, -1).transpose(1, 0, 2, 3)

            out = self.self_attn.attend(own(q), own(k), own(v), segment.mask, segment.cache, layer)
            attended.append(out.transpose(1, 0, 2, 3).reshape(1, out.shape[1], rows * length, -1))
            start = end
        attended = mx.concatenate(attended, axis=2)
        return self.compiled.after(self, x, attended) if compiled else self.after_attention(x, attended)


class LlamaModel(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = [TransformerBlock(args) for _ in range(args.num_hidden_layers)]
        self.norm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        compiled = CompiledParts()
        for layer in self.layers:
            layer.compiled = compiled


class Model(nn.Module):
    """Llama / Vicuna / SmolLM2 (tied embeddings) / Llama-3 (RoPE scaling), GQA, biases."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.model_type = args.model_type
        self.model = LlamaModel(args)
        if not args.tie_word_embeddings:
            self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.stage: Stage | None = None  # across ranks by layers (`sharding.pipeline_llm`): this rank's

    def split_by_layers(self, stage: Stage) -> None:
        """Keep only `stage`'s layers (the others' weights are never read); the cache then
        holds only theirs too."""
        self.model.layers = self.model.layers[stage.start : stage.stop]
        self.stage = stage

    def __call__(
        self,
        tokens: mx.array,
        cache: KVCache | None = None,
        positions: mx.array | None = None,
        mask: Mask = "causal",
        taps: tuple[int, ...] = (),
    ) -> mx.array:
        """Final-norm hidden states (B, T, D) for `tokens` (B, T).

        positions: (B, T) RoPE positions; default = cache.length + arange(T).
        mask: attention over [committed cache, this block]; "causal" for plain sequences.
        The block's keys/values are written to `cache` but not committed. `taps`: layers whose
        inputs follow the hidden states, concatenated (`models.llm.LLM`).
        """
        B, T = tokens.shape
        h = self.model.embed_tokens(tokens)
        if self.stage is not None:
            h = self.stage.receive(h)
        # Compiled for a token and the few block lengths decoding uses (trees, joins' widths);
        # a plain prompt would trace them again for every new length (about 0.2 s each).
        compiled = T <= COMPILED_MAX_TOKENS and (T == 1 or not isinstance(mask, str))
        pos = positions if positions is not None else (cache.length if cache else 0)
        if compiled and isinstance(pos, int):
            pos = mx.broadcast_to(mx.arange(pos, pos + T)[None], (B, T))
        if isinstance(mask, str) and T == 1:
            mask = None
        mask = additive(mask, h.dtype)
        seen = {}
        for i, layer in enumerate(self.model.layers):
            if i in taps:
                seen[i] = h
            h = layer(h, pos, mask, cache, i, compiled)
            if compiled and i % ASYNC_EVERY == ASYNC_EVERY - 1:
                mx.async_eval(h)  # these layers compute while the next ones' graph is built
        if self.stage is not None:
            h = self.stage.pass_on(h)
        h = self.model.norm(h)
        return mx.concatenate([h, *(seen[i] for i in taps)], axis=-1) if taps else h

    def run_together(self, segments: Sequence[Segment], taps: tuple[int, ...] = ()) -> list[mx.array]:
        """`__call__` for several segments (each its tokens, cache, positions and mask) in ONE
        pass: the weights stream once for all of them, which on a CPU is most of a short
        pass's cost (a joining prompt's chunk rides in the rows' verify pass). Returns each
        segment's hidden states (B, T, D (+ taps)), as `__call__` would."""
        sizes = [s.tokens.size for s in segments]
        h = self.model.embed_tokens(mx.concatenate([s.tokens.reshape(-1) for s in segments]))[None]
        segments = [replace(s, mask=additive(s.mask, h.dtype)) for s in segments]
        positions = mx.concatenate([s.positions.reshape(-1) for s in segments])[None]
        seen = {}
        for i, layer in enumerate(self.model.layers):
            if i in taps:
                seen[i] = h
            # Uncompiled: the summed lengths vary with every chunk, and a compiled layer would
            # trace (a stall of its own) for each.
            h = layer.run_together(h, positions, segments, i, compiled=False)
        h = mx.concatenate([self.model.norm(h), *(seen[i] for i in taps)], axis=-1)[0]
        parts, start = [], 0
        for segment, size in zip(segments, sizes):
            parts.append(h[start : start + size].reshape(*segment.tokens.shape, -1))
            start += size
        return parts

    def logits(self, hidden: mx.array) -> mx.array:
        """Vocabulary logits (..., V) for hidden states (..., D)."""
        if self.args.tie_word_embeddings:
            return self.model.embed_tokens.as_linear(hidden)
        return self.lm_head(hidden)

    @property
    def embedding(self) -> nn.Embedding:
        return self.model.embed_tokens

    @property
    def layers(self) -> list[TransformerBlock]:
        return self.model.layers

    def make_cache(self) -> KVCache:
        return KVCache(len(self.model.layers))

    def sanitize(self, weights: dict[str, mx.array]) -> dict[str, mx.array]:
        """Drop what Hugging Face checkpoints carry but this model computes itself."""
        weights = {k: v for k, v in weights.items() if "rotary_emb.inv_freq" not in k}
        if self.args.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
        return weights
