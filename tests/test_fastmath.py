"""The CPU exp and what is built on it agree with MLX's own kernels (float32 rounding)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.models.activations import swiglu as mlx_lm_swiglu

from redrafter_mlx.runtime import fastmath


def test_exp_matches_float64_reference_and_its_gradient_is_exp():
    x = mx.concatenate([mx.linspace(-87, 88, 200_001), mx.random.normal((10_000,)) * 5])
    want = np.exp(np.array(x).astype(np.float64))
    ours = np.abs(np.array(fastmath.exp(x)) - want) / want
    mlx = np.abs(np.array(mx.exp(x)) - want) / want
    for limit in (1, 10, 88):  # the error grows with |x|: float32 rounding of x * log2(e)
        within = np.abs(np.array(x)) <= limit
        assert ours[within].max() <= 1.1 * mlx[within].max(), limit
        assert ours[within].mean() <= 1.1 * mlx[within].mean(), limit
    assert ours[np.abs(np.array(x)) <= 1].max() < 2e-7
    grad = mx.grad(lambda a: fastmath.exp(a).sum())(x[::997])
    np.testing.assert_allclose(np.array(grad), np.array(mx.exp(x[::997])), rtol=1e-5)
    assert fastmath.exp(mx.array([-1e4, 0.0], mx.float16)).dtype == mx.float16
    assert float(fastmath.exp(mx.array(-1e4))) < 1e-37


def test_softmax_logsumexp_and_swiglu_match_mlx():
    x = mx.random.normal((37, 1000)) * 8
    np.testing.assert_allclose(np.array(fastmath.softmax(x)), np.array(mx.softmax(x, axis=-1)), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(np.array(fastmath.logsumexp(x)), np.array(mx.logsumexp(x, axis=-1)), rtol=1e-6)
    target = mx.random.randint(0, 1000, (37,))

    def ce(fn):
        return lambda a: (fn(a) - mx.take_along_axis(a, target[:, None], axis=-1)[:, 0]).sum()

    g_ours = mx.grad(ce(fastmath.logsumexp))(x)
    g_mlx = mx.grad(ce(lambda a: mx.logsumexp(a, axis=-1)))(x)
    np.testing.assert_allclose(np.array(g_ours), np.array(g_mlx), rtol=1e-5, atol=1e-7)
    gate, up = mx.random.normal((5, 300)) * 10, mx.random.normal((5, 300))
    np.testing.assert_allclose(
        np.array(fastmath.swiglu(gate, up)), np.array(mlx_lm_swiglu(gate, up)), rtol=1e-5, atol=1e-6
    )
