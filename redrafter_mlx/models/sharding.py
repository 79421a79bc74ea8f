"""Tensor parallelism for the LLM (Megatron-style): every rank holds a slice of each layer and
one all-reduce per sharded block joins the slices.

A block's input projections are split by output (column-parallel: q/k/v by attention heads,
gate/up by hidden units) and its output projection by input (row-parallel: o, down), so each
rank computes its heads or units alone and `mx.distributed.all_sum` adds the partial outputs
once per block. Attention is split only where the heads divide among the ranks (SmolLM2-135M's
9 query / 3 key-value heads do not split in two: its attention runs whole on every rank); the
MLP, most of a layer's weights, splits wherever its hidden size divides. mlx-lm architectures
behind the adapter use mlx-lm's own `shard` where the architecture has one. By layers instead
(`pipeline_llm`, the CLI's `--pipeline`): `pipeline.py`.

The split sums in another order than one process does, so float32 logits can differ in the
last bits; greedy decoding is compared token for token with one process in the tests.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.nn.layers.distributed import QuantizedShardedToAllLinear, ShardedToAllLinear, shard_linear

from ..errors import InputError
from .llama import Model as Llama
from .llm import LLM
from .pipeline import Stage


def shard_llm(model: LLM, group: mx.distributed.Group) -> int:
    """Split `model` across the group's ranks in place (before its first forward pass: the
    compiled layers trace the sliced shapes); returns the all-reduces one forward pass makes."""
    if isinstance(model, Llama):
        for layer in model.layers:
            shard_attention(layer.self_attn, group)
            shard_mlp(layer.mlp, group)
    elif hasattr(getattr(model, "wrapped", None), "shard"):  # the adapter's mlx-lm model
        model.wrapped.shard(group)
    else:
        raise InputError(f"{model.args.model_type} models cannot be split across ranks yet: run one process")
    return sum(isinstance(m, (ShardedToAllLinear, QuantizedShardedToAllLinear)) for m in model.modules())


def pipeline_llm(model: LLM, group: mx.distributed.Group) -> int:
    """Split `model` across the group's ranks by layers (`pipeline.Stage`), in place; returns
    the all-reduces one forward pass makes (the last stage's output to every rank; the ranks
    also pass the activations along, one hop each)."""
    if not isinstance(model, Llama):
        raise InputError(f"{model.args.model_type} models cannot be split by layers yet: drop --pipeline")
    model.split_by_layers(Stage(group, len(model.layers)))
    return 1


def shard_attention(attention: nn.Module, group: mx.distributed.Group) -> None:
    ranks = group.size()
    if attention.n_heads % ranks or attention.n_kv_heads % ranks:
        return  # whole on every rank
    for name in ("q_proj", "k_proj", "v_proj"):
        setattr(attention, name, shard_linear(getattr(attention, name), "all-to-sharded", group=group))
    attention.o_proj = shard_linear(attention.o_proj, "sharded-to-all", group=group)
    attention.n_heads //= ranks
    attention.n_kv_heads //= ranks


def shard_mlp(mlp: nn.Module, group: mx.distributed.Group) -> None:
    if mlp.gate_proj.weight.shape[0] % group.size():
        return
    mlp.gate_proj = shard_linear(mlp.gate_proj, "all-to-sharded", group=group)
    mlp.up_proj = shard_linear(mlp.up_proj, "all-to-sharded", group=group)
    mlp.down_proj = shard_linear(mlp.down_proj, "sharded-to-all", group=group)
