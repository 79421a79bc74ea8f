"""`formats/slices.py`: a rank's block of a safetensors tensor, read by mapping the file, equals
the same block of the tensor MLX loads whole, in every float dtype."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from redrafter_mlx.formats.slices import read_block, tensor_index


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
def test_blocks_of_rows_and_columns_equal_the_loaded_tensor(tmp_path, dtype):
    mx.random.seed(0)
    tensors = {"a.weight": mx.random.normal((12, 10)).astype(dtype), "b.bias": mx.arange(6).astype(dtype)}
    tensors["c.weight"] = mx.random.normal((4, 8)).astype(dtype)  # after others: a non-zero offset
    mx.save_safetensors(str(tmp_path / "model-00001-of-00002.safetensors"), {k: tensors[k] for k in ("a.weight",)})
    mx.save_safetensors(
        str(tmp_path / "model-00002-of-00002.safetensors"), {k: tensors[k] for k in ("b.bias", "c.weight")}
    )
    index = tensor_index(tmp_path)
    assert set(index) == set(tensors) and index["c.weight"].shape == (4, 8)
    for name, rows, columns in (("a.weight", slice(6, 12), slice(None)), ("a.weight", slice(None), slice(5, 10))):
        block = read_block(index[name], rows, columns)
        assert block.dtype == dtype
        assert np.array_equal(
            np.array(block.astype(mx.float32)), np.array(tensors[name].astype(mx.float32))[rows, columns]
        )
    assert np.array_equal(np.array(read_block(index["b.bias"], slice(3, 6)).astype(mx.float32)), [3, 4, 5])
    whole = read_block(index["c.weight"], slice(None))
    assert np.array_equal(np.array(whole.astype(mx.float32)), np.array(tensors["c.weight"].astype(mx.float32)))
