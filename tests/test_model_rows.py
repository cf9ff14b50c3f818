"""models.rows: the softmax and the row sums the model computes with are jax's functions up to
rounding, in values and in gradients, on rows with masked keys and on rows with none left
(LayerNorm against flax's: tests/test_model_architecture.py)."""

import jax
import jax.numpy as jnp
import numpy as np
from crasplab.models.rows import layer_norm, row_mean, row_sum, softmax
from crasplab.models.transformer import MASKED_LOGIT
from hypothesis import given, settings
from hypothesis import strategies as st


# Row widths: one key, a few, the quick model's 43 positions and a power of two. Each new width
# compiles jax's operations anew, so a free width made this test 13-32 s.
WIDTHS = (1, 2, 7, 43, 64)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(WIDTHS), st.floats(0.01, 30.0))
def test_softmax_equals_jax_softmax_in_values_and_gradients(seed, width, spread):
    """Random logits of any spread, some keys masked (a masked row whole), and a random incoming
    gradient: the weights and the gradient of the logits are jax.nn.softmax's."""
    rng = np.random.default_rng(seed)
    logits_NxS = rng.normal(size=(6, width)) * spread
    logits_NxS[rng.random(size=logits_NxS.shape) < 0.3] = MASKED_LOGIT
    logits_NxS[0] = MASKED_LOGIT
    logits_NxS = jnp.asarray(logits_NxS, jnp.float32)
    incoming_NxS = jnp.asarray(rng.normal(size=logits_NxS.shape), jnp.float32)
    ours, ours_vjp = jax.vjp(softmax, logits_NxS)
    theirs, theirs_vjp = jax.vjp(lambda x: jax.nn.softmax(x, axis=-1), logits_NxS)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ours[0], np.full(width, 1 / width), rtol=1e-6)
    np.testing.assert_allclose(ours_vjp(incoming_NxS)[0], theirs_vjp(incoming_NxS)[0], rtol=1e-4, atol=1e-6)


def test_softmax_of_a_batch_of_heads_is_each_rows_softmax():
    """The attention's [B, H, T, S] logits: each row along S normalised alone."""
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 4, 5)), jnp.float32)
    np.testing.assert_allclose(softmax(logits), jax.nn.softmax(logits, axis=-1), rtol=1e-6)
    np.testing.assert_allclose(softmax(logits).sum(-1), 1.0, rtol=1e-6)


def test_row_sums_and_means_keep_a_unit_axis_and_equal_numpys():
    x = np.random.default_rng(1).normal(size=(2, 7, 64)).astype(np.float32) * 1e3
    np.testing.assert_allclose(row_sum(jnp.asarray(x)), x.sum(-1, keepdims=True), rtol=1e-5, atol=1e-2)
    np.testing.assert_allclose(row_mean(jnp.asarray(x)), x.mean(-1, keepdims=True), rtol=1e-5, atol=1e-3)


def test_row_sums_stay_float32_under_tensorfloat32_products():
    """A model under ModelConfig.matmul_precision "tensorfloat32" keeps its statistics in float32:
    the CPU's product of a row with ones asks for full precision whatever the model's products do."""
    with jax.default_matmul_precision("tensorfloat32"):
        lowered = jax.jit(row_sum).lower(jnp.ones((4, 64), jnp.float32)).as_text()
    assert "precision = [HIGHEST, HIGHEST]" in lowered


def test_on_an_accelerator_row_sums_are_plain_sums_and_give_the_cpus_values_and_gradients(monkeypatch):
    """The branch a GPU takes (a reduction, not a product with ones), rehearsed here: the same
    LayerNorm and softmax, in values and gradients, as the CPU's form."""
    rng = np.random.default_rng(2)
    x_NxD = jnp.asarray(rng.normal(size=(5, 43)) * 10, jnp.float32)
    scale_D, bias_D = (jnp.asarray(rng.normal(size=43), jnp.float32) for _ in range(2))
    incoming_NxD = jnp.asarray(rng.normal(size=x_NxD.shape), jnp.float32)

    def values_and_gradients():
        norm, norm_vjp = jax.vjp(lambda x, s, b: layer_norm(x, s, b, 1e-5), x_NxD, scale_D, bias_D)
        weights, softmax_vjp = jax.vjp(softmax, x_NxD)
        return [norm, *norm_vjp(incoming_NxD), weights, *softmax_vjp(incoming_NxD)]

    on_cpu = values_and_gradients()
    assert "dot_general" in str(jax.make_jaxpr(row_sum)(x_NxD))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    jax.clear_caches()  # traces made with the CPU's branch would be reused
    assert "reduce_sum" in str(jax.make_jaxpr(row_sum)(x_NxD))
    for accelerator, cpu in zip(values_and_gradients(), on_cpu, strict=True):
        np.testing.assert_allclose(accelerator, cpu, rtol=1e-5, atol=1e-5)
    jax.clear_caches()  # nor must later tests reuse the accelerator's
