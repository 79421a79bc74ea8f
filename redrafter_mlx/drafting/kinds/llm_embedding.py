"""The LLM's input embedding as a drafter reads it, without owning it: token lookups, and
for a head tied to it, the rows the head scores against."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

import mlx.core as mx
import mlx.nn as nn

# The LLM's input embedding: a (V, hidden) table, an nn.Embedding / nn.QuantizedEmbedding,
# or any callable mapping ids (...) -> (..., hidden).
Embedding = Union[mx.array, nn.Module, Callable[[mx.array], mx.array]]


@dataclass(frozen=True)
class QuantizedRows:
    """A row subset of an nn.QuantizedEmbedding, used as a transposed linear layer."""

    weight: mx.array
    scales: mx.array
    biases: mx.array | None
    group_size: int
    bits: int
    mode: str

    def as_linear(self, x: mx.array) -> mx.array:
        return mx.quantized_matmul(
            x,
            self.weight,
            scales=self.scales,
            biases=self.biases,
            transpose=True,
            group_size=self.group_size,
            bits=self.bits,
            mode=self.mode,
        )


# What a tied head multiplies against: a (rows, hidden) table or an object with `as_linear`.
HeadTable = Union[mx.array, nn.QuantizedEmbedding, QuantizedRows]


def embed_tokens(embedding: Embedding, ids: mx.array) -> mx.array:
    """Look up ids (...) in the LLM embedding -> (..., hidden)."""
    return embedding[ids] if isinstance(embedding, mx.array) else embedding(ids)


def table_rows(embedding: Embedding, ids: mx.array | None) -> HeadTable:
    """The embedding rows `ids` (all rows when None) in a form a tied head can multiply by."""
    if isinstance(embedding, mx.array):
        return embedding if ids is None else embedding[ids]
    if isinstance(embedding, nn.QuantizedEmbedding):
        if ids is None:
            return embedding
        biases = embedding.get("biases")
        return QuantizedRows(
            embedding.weight[ids],
            embedding.scales[ids],
            None if biases is None else biases[ids],
            embedding.group_size,
            embedding.bits,
            embedding.mode,
        )
    if isinstance(embedding, nn.Embedding):
        return table_rows(embedding.weight, ids)
    raise TypeError(
        f"a tied drafter head needs the embedding table (mx.array, nn.Embedding or "
        f"nn.QuantizedEmbedding), got {type(embedding).__name__}"
    )
