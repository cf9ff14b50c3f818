"""LayerNorm and softmax along the last axis, with backward passes written out and, on a CPU, their
row sums taken as matrix products.

Both are the functions jax differentiates (the tests compare values and gradients with flax's
LayerNorm and jax.nn.softmax), computed in another order. Why this order: on a CPU, XLA hands
reductions to YNNPACK, whose sums over rows as short as the quick model's (64 features, 43 keys)
are slow: in the quick training step one such reduction of a 1376 x 64 block took about 0.4 ms,
as long as a 1376 x 64 x 256 matrix product, and the step made about ten of them; autodiff
added more through the division in the softmax and the mean in the norm. A sum over the last
axis written as a product with a column of ones runs through YNNPACK's matrix kernels instead,
and the backward passes below need two row sums per LayerNorm and one per softmax. Together they
make the quick step about 1.3x as fast on one pinned thread (docs/calibration.md, round 28, "The
CPU step against Hugging Face, again"). On an accelerator XLA fuses row sums into the
elementwise work around them, so there `row_sum` is a plain sum.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def row_sum(x_NxD: jax.Array) -> jax.Array:
    """Sum over the last axis, kept as an axis of size 1: on a CPU a product with a column of
    ones, at full float32 precision whatever ModelConfig.matmul_precision asks of the model's
    products (tf32 would round the summands)."""
    if jax.default_backend() != "cpu":
        return x_NxD.sum(-1, keepdims=True)
    ones_Dx1 = jnp.ones((x_NxD.shape[-1], 1), x_NxD.dtype)
    return jnp.dot(x_NxD, ones_Dx1, precision=jax.lax.Precision.HIGHEST)


def row_mean(x_NxD: jax.Array) -> jax.Array:
    return row_sum(x_NxD) * jnp.asarray(1 / x_NxD.shape[-1], x_NxD.dtype)


@jax.custom_vjp
def layer_norm(x_NxD: jax.Array, scale_D: jax.Array, bias_D: jax.Array, epsilon: float) -> jax.Array:
    """(x - mean) * rsqrt(mean((x - mean)^2) + epsilon) * scale + bias, in x's dtype."""
    return _layer_norm_forward(x_NxD, scale_D, bias_D, epsilon)[0]


def _layer_norm_forward(x_NxD, scale_D, bias_D, epsilon):
    centered_NxD = x_NxD - row_mean(x_NxD)
    inverse_std_Nx1 = jax.lax.rsqrt(row_mean(centered_NxD * centered_NxD) + epsilon)
    normalized_NxD = centered_NxD * inverse_std_Nx1
    return normalized_NxD * scale_D + bias_D, (normalized_NxD, inverse_std_Nx1, scale_D)


def _layer_norm_backward(saved, gradient_NxD):
    normalized_NxD, inverse_std_Nx1, scale_D = saved
    scaled_NxD = gradient_NxD * scale_D
    # d/dx of the normalized row: the gradient less its mean and less its projection on the row.
    input_gradient_NxD = inverse_std_Nx1 * (
        scaled_NxD - row_mean(scaled_NxD) - normalized_NxD * row_mean(scaled_NxD * normalized_NxD)
    )
    leading = tuple(range(gradient_NxD.ndim - 1))
    scale_gradient_D = (gradient_NxD * normalized_NxD).sum(leading).astype(scale_D.dtype)
    bias_gradient_D = gradient_NxD.sum(leading).astype(scale_D.dtype)
    return input_gradient_NxD, scale_gradient_D, bias_gradient_D, None


layer_norm.defvjp(_layer_norm_forward, _layer_norm_backward)


@jax.custom_vjp
def softmax(logits_NxS: jax.Array) -> jax.Array:
    """jax.nn.softmax over the last axis: exp(x - max) / sum(exp(x - max)). A row whose every
    logit is MASKED_LOGIT gets uniform finite weights, as there."""
    return _softmax_forward(logits_NxS)[0]


def _softmax_forward(logits_NxS):
    unnormalized_NxS = jnp.exp(logits_NxS - logits_NxS.max(-1, keepdims=True))
    weights_NxS = unnormalized_NxS / row_sum(unnormalized_NxS)
    return weights_NxS, weights_NxS


def _softmax_backward(weights_NxS, gradient_NxS):
    return (weights_NxS * (gradient_NxS - row_sum(gradient_NxS * weights_NxS)),)


softmax.defvjp(_softmax_forward, _softmax_backward)
