"""A rank's slices of a checkpoint's split matrices, read straight from its safetensors files.

MLX's loader reads a tensor whole even when only a slice of it is kept, so every rank of a
model split N ways would read the whole checkpoint. A safetensors file is a JSON header of
byte offsets, then row-major tensors: mapped into memory, a block of rows (a column-parallel
layer's share) or of columns (a row-parallel layer's) reads only the pages it covers. Float
tensors (F32, F16, BF16) are read this way; any other tensor (quantized, renamed on load)
keeps the lazily loaded slice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.nn.layers.distributed import AllToShardedLinear, ShardedToAllLinear

# safetensors dtype -> (how numpy maps the bytes, what MLX views them as)
DTYPES = {"F32": (np.float32, mx.float32), "F16": (np.float16, mx.float16), "BF16": (np.uint16, mx.bfloat16)}


class Stored(NamedTuple):
    file: Path
    dtype: str
    shape: tuple[int, ...]
    offset: int  # of the tensor's first byte in the file


def tensor_index(folder: Path) -> dict[str, Stored]:
    """Where every tensor of a folder's model*.safetensors files lies."""
    index = {}
    for file in sorted(Path(folder).glob("model*.safetensors")):
        with open(file, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        for name, meta in header.items():
            if name != "__metadata__":
                index[name] = Stored(file, meta["dtype"], tuple(meta["shape"]), 8 + size + meta["data_offsets"][0])
    return index


def read_block(stored: Stored, rows: slice, columns: slice = slice(None)) -> mx.array:
    """stored[rows, columns] (a vector: stored[rows]), reading only the pages it covers."""
    layout, view = DTYPES[stored.dtype]
    data = np.memmap(stored.file, layout, "r", stored.offset, stored.shape)
    block = np.ascontiguousarray(data[rows] if len(stored.shape) == 1 else data[rows, columns])
    return mx.array(block).view(view)


def read_own_slices(model: nn.Module, folder: Path, rank: int, ranks: int) -> int:
    """Replace each split linear layer's lazily sliced weights by this rank's block read from
    the folder's files (in the dtype the model runs in); returns how many layers were read so."""
    index = tensor_index(folder)

    def find(layer: str, tensor: str) -> Stored | None:  # the adapter's layers are its mlx-lm model's
        return index.get(f"{layer}.{tensor}") or index.get(f"{layer.removeprefix('wrapped.')}.{tensor}")

    done = 0
    for name, module in model.named_modules():
        if not isinstance(module, (AllToShardedLinear, ShardedToAllLinear)):
            continue
        stored = find(name, "weight")
        axis = 0 if isinstance(module, AllToShardedLinear) else 1
        expected = tuple(n * ranks if a == axis else n for a, n in enumerate(module.weight.shape))
        if stored is None or stored.dtype not in DTYPES or stored.shape != expected:
            continue
        share = expected[axis] // ranks
        own = slice(rank * share, (rank + 1) * share)
        block = read_block(stored, own) if axis == 0 else read_block(stored, slice(None), own)
        module.weight = block.astype(module.weight.dtype)
        bias = find(name, "bias")
        if axis == 0 and "bias" in module and bias is not None and bias.dtype in DTYPES:
            module.bias = read_block(bias, own).astype(module.bias.dtype)
        done += 1
    return done
