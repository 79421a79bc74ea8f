"""exp-based element-wise functions that are fast on MLX's CPU backend.

MLX's CPU `exp` (and `sigmoid`, hence SiLU) is scalar code on x86 (ml-explore/mlx#3019):
about 40 ns per element, against about 1 ns for `add`. The LLM pays it per token in the
SwiGLU MLP (1536 SiLUs per layer for SmolLM2), the distillation loop 64 tokens at a time,
and drafter training once per head logit (K = 16384 per target and depth).
Here exp is the textbook range reduction, exp(x) = 2^n * 2^f with n = round(x log2 e) and
|f| <= 1/2, with 2^f a degree-7 polynomial (truncation error ~5e-9, below float32's
rounding) and 2^n written into the exponent bits, fused by `mx.compile` into one kernel:
about 4x faster than MLX's CPU exp, with the same accuracy (tests/test_fastmath.py; timings in
docs/architecture.md, "Fast CPU path").
Attention's softmax uses it too, wherever a call scores enough query-key pairs
(`models.attention`).

On a GPU every function falls back to MLX's own kernel, which is fast there.
"""

from __future__ import annotations

import math

import mlx.core as mx
from mlx_lm.models.activations import swiglu as _mlx_swiglu

from . import device as runtime

_LOG2E = 1.4426950408889634
_TAYLOR_2F = [math.log(2) ** k / math.factorial(k) for k in range(8)]  # 2^f = e^(f ln 2)


def _exp_parts(x: mx.array) -> tuple[mx.array, mx.array]:
    """2^f as a polynomial, and n as the bits of the float32 2^n."""
    t = mx.clip(x.astype(mx.float32) * _LOG2E, -126.0, 127.0)  # normal float32 exponents
    n = mx.round(t)
    f = t - n
    p = mx.array(_TAYLOR_2F[-1], mx.float32)
    for c in reversed(_TAYLOR_2F[:-1]):
        p = p * f + c
    return p, mx.left_shift(n.astype(mx.int32) + 127, 23)


def _poly_exp(x: mx.array) -> mx.array:
    p, bits = _exp_parts(x)
    return (p * mx.view(bits, mx.float32)).astype(x.dtype)


# Traced once for every shape (attention's scores change size at every step): `view` cannot be
# traced shapeless, so it and the product run after the compiled parts, as fast (two cheap ops).
_shapeless_parts = mx.compile(lambda x: _exp_parts(x), shapeless=True)


def _cpu_exp(x: mx.array) -> mx.array:
    p, bits = _shapeless_parts(x)
    return (p * mx.view(bits, mx.float32)).astype(x.dtype)


@mx.custom_function
def _exp_with_grad(x: mx.array) -> mx.array:
    return _cpu_exp(x)


@_exp_with_grad.vjp
def _exp_vjp(primals, cotangent, output):  # d exp(x) / dx = exp(x)
    return cotangent * output


def exp(x: mx.array) -> mx.array:
    """e^x (differentiable) for x in [-87, 88]; below, about 1e-38 instead of 0 (negligible
    where it is used: after subtracting a maximum), above, about 2e38 instead of inf."""
    return mx.exp(x) if runtime.on_gpu() else _exp_with_grad(x)


def softmax(x: mx.array, axis: int = -1) -> mx.array:
    e = exp(x - mx.stop_gradient(x.max(axis=axis, keepdims=True)))
    return e / e.sum(axis=axis, keepdims=True)


def logsumexp(x: mx.array, axis: int = -1) -> mx.array:
    top = mx.stop_gradient(x.max(axis=axis, keepdims=True))
    return (top + mx.log(exp(x - top).sum(axis=axis, keepdims=True))).squeeze(axis)


@mx.compile
def _cpu_swiglu(gate: mx.array, x: mx.array) -> mx.array:
    return gate / (1 + _poly_exp(-gate)) * x


def swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """SiLU(gate) * x, the Llama MLP's activation (mlx-lm's kernel on a GPU). Not
    differentiable on CPU (the exponent-bit trick has no vjp): `trainable_swiglu` is."""
    return _mlx_swiglu(gate, x) if runtime.on_gpu() else _cpu_swiglu(gate, x)


@mx.compile
def _cpu_sigmoid(x: mx.array) -> mx.array:
    return 1 / (1 + _poly_exp(-x))


@mx.custom_function
def _swiglu_with_grad(gate: mx.array, x: mx.array) -> mx.array:
    return _cpu_swiglu(gate, x)


@_swiglu_with_grad.vjp
def _swiglu_vjp(primals, cotangent, output):  # d silu(g) / dg = s (1 + g (1 - s)), s = sigmoid(g)
    gate, x = primals
    s = _cpu_sigmoid(gate)
    return cotangent * x * s * (1 + gate * (1 - s)), cotangent * gate * s


def trainable_swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """`swiglu` with a gradient (the same kernel forward; a few microseconds more per call on
    CPU, so the LLM keeps `swiglu`): for the layers that train, EAGLE's."""
    return _mlx_swiglu(gate, x) if runtime.on_gpu() else _swiglu_with_grad(gate, x)
