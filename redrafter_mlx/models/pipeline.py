"""Pipeline parallelism: each rank runs one run of the LLM's layers, in rank order.

Rank 0 embeds the block and runs the first layers; every later rank receives the previous
rank's activations (`recv_like`), runs its layers and sends them on (`send`). The last rank's
output then reaches every rank in one all-reduce (the others add zeros), so the final norm,
the logits, acceptance and drafting run on every rank as in one process, from the same
numbers: greedy output is bit-identical to one process's and each rank still reads each
step's result once. Everything stays in the lazy graph: the sends are kept in it by the
all-reduce that depends on them.
"""

from __future__ import annotations

import mlx.core as mx


class Stage:
    """This rank's place in the pipeline: layers [start, stop) of `layers` in all."""

    def __init__(self, group: mx.distributed.Group, layers: int):
        self.group, self.rank, self.ranks = group, group.rank(), group.size()
        if layers < self.ranks:
            raise ValueError(f"{layers} layers cannot be split among {self.ranks} ranks")
        share, extra = divmod(layers, self.ranks)
        self.start = self.rank * share + min(self.rank, extra)
        self.stop = self.start + share + (self.rank < extra)

    @property
    def last(self) -> bool:
        return self.rank == self.ranks - 1

    def receive(self, embedded: mx.array) -> mx.array:
        """The block's activations entering this stage (rank 0: the embeddings)."""
        if self.rank == 0:
            return embedded
        return mx.distributed.recv_like(embedded, self.rank - 1, group=self.group)

    def pass_on(self, h: mx.array) -> mx.array:
        """This stage's output sent on; returns the last stage's output, on every rank."""
        if not self.last:
            h = mx.distributed.send(h, self.rank + 1, group=self.group)
        mine = h if self.last else mx.where(mx.array(False), h, mx.array(0, h.dtype))  # zeros, after the send
        return mx.distributed.all_sum(mine, group=self.group)
