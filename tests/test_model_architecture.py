"""Properties of the transformer that a wrong implementation breaks: causality, positions, GQA,
determinism, parameter counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from crasplab.models import (
    PRESETS,
    Transformer,
    count_params,
    forward_flops_per_token,
    param_shapes,
    parameter_count,
    preset,
    set_params,
)
from crasplab.models.positions import POSITIONS
from crasplab.models.transformer import LayerNorm
from crasplab.train.config import PRESETS as TRAIN_PRESETS
from flax import nnx

from tests.tiny import STYLES, random_tokens, tiny_model


@pytest.mark.parametrize("style", STYLES)
def test_output_at_t_has_zero_gradient_wrt_later_inputs(style):
    model = tiny_model(**STYLES[style])
    tokens_BxT = random_tokens((2, 7))
    positions_BxT = jnp.broadcast_to(jnp.arange(7), (2, 7))
    x_BxTxD = model.embed_inputs(tokens_BxT, positions_BxT)
    for t in (0, 3, 6):

        def output_at_t(x):
            return model.forward_embeddings(x, positions_BxT).logits_BxTxV[:, t].sum()

        gradient_BxTxD = jax.grad(output_at_t)(x_BxTxD)
        assert np.all(np.asarray(gradient_BxTxD[:, t + 1 :]) == 0.0)
        assert np.all(np.abs(np.asarray(gradient_BxTxD[:, : t + 1])).sum(-1) > 0)


@pytest.mark.parametrize("style", ["llama_rope_gqa", "llama_partial_rope", "gpt2_alibi", "gemma3_window"])
def test_relative_encodings_unchanged_when_all_positions_shift(style):
    model = tiny_model(**STYLES[style])
    tokens_BxT = random_tokens((2, 6))
    positions_BxT = jnp.broadcast_to(jnp.arange(6), (2, 6))
    base = model(tokens_BxT, positions_BxT, return_attention=True)
    shifted = model(tokens_BxT, positions_BxT + 37, return_attention=True)
    np.testing.assert_allclose(shifted.attention_LxBxHxTxS, base.attention_LxBxHxTxS, atol=1e-5)
    np.testing.assert_allclose(shifted.logits_BxTxV, base.logits_BxTxV, atol=1e-4)


def test_ape_attention_changes_when_all_positions_shift():
    model = tiny_model(**STYLES["gpt2_ape"])
    tokens_BxT = random_tokens((2, 6))
    positions_BxT = jnp.broadcast_to(jnp.arange(6), (2, 6))
    base = model(tokens_BxT, positions_BxT, return_attention=True).attention_LxBxHxTxS
    shifted = model(tokens_BxT, positions_BxT + 37, return_attention=True).attention_LxBxHxTxS
    assert np.abs(np.asarray(shifted - base)).max() > 1e-3


def test_rope_is_the_hugging_face_rotate_half_layout():
    from crasplab.models import apply_rope

    x_BxTxHxK = np.random.default_rng(0).normal(size=(1, 3, 2, 8)).astype(np.float32)
    positions_BxT = np.array([[0, 5, 11]])
    rotary, base = 6, 100.0
    # Hugging Face: inv_freq = 1 / base^(arange(0, dim, 2) / dim); q*cos + rotate_half(q)*sin.
    inv_freq = 1.0 / base ** (np.arange(0, rotary, 2) / rotary)
    angles = positions_BxT[..., None] * inv_freq
    cos = np.concatenate([np.cos(angles)] * 2, -1)[:, :, None]
    sin = np.concatenate([np.sin(angles)] * 2, -1)[:, :, None]
    x_rot = x_BxTxHxK[..., :rotary]
    rotate_half = np.concatenate([-x_rot[..., rotary // 2 :], x_rot[..., : rotary // 2]], -1)
    expected = np.concatenate([x_rot * cos + rotate_half * sin, x_BxTxHxK[..., rotary:]], -1)
    np.testing.assert_allclose(apply_rope(x_BxTxHxK, positions_BxT, base, rotary), expected, atol=1e-5)


def test_alibi_slopes_are_press_et_al_geometric_sequences():
    from crasplab.models.positions import alibi_slopes

    np.testing.assert_allclose(alibi_slopes(8), [2.0**-k for k in range(1, 9)])
    np.testing.assert_allclose(alibi_slopes(4), [2.0**-k for k in (2, 4, 6, 8)])
    # 6 heads: the 4-head slopes, then slopes 1 and 3 of the 8-head sequence.
    np.testing.assert_allclose(alibi_slopes(6), [2.0**-k for k in (2, 4, 6, 8, 1, 3)])


def test_alibi_scores_fall_linearly_with_distance_at_each_heads_slope():
    from crasplab.models.positions import alibi_slopes

    # With zero query and key weights every score is the bias alone: weights ~ exp(-slope * distance).
    model = tiny_model(n_layers=1, **STYLES["gpt2_alibi"])
    model.layers[0].attn.q.kernel[...] = jnp.zeros_like(model.layers[0].attn.q.kernel[...])
    model.layers[0].attn.q.bias[...] = jnp.zeros_like(model.layers[0].attn.q.bias[...])
    positions_1xT = jnp.array([[3, 4, 5, 6, 7]])
    weights_HxS = model(random_tokens((1, 5)), positions_1xT, return_attention=True).attention_LxBxHxTxS[0, 0, :, 4]
    expected_HxS = jax.nn.softmax(-alibi_slopes(4)[:, None] * jnp.arange(4, -1, -1)[None, :], axis=-1)
    np.testing.assert_allclose(weights_HxS, expected_HxS, atol=1e-6)


@pytest.mark.parametrize("style", ["gpt2_nope", "gpt2_alibi"])
def test_encodings_without_a_table_have_no_positional_parameters(style):
    model = tiny_model(**STYLES[style])
    assert not any("pos" in path for path in param_shapes(model))
    assert count_params(model) == parameter_count(model.config)


def test_one_layer_nope_last_output_ignores_order_of_earlier_tokens():
    model = tiny_model(n_layers=1, **STYLES["gpt2_nope"])
    tokens_1xT = random_tokens((1, 8), seed=3)
    permutation = np.random.default_rng(1).permutation(7)
    permuted_1xT = tokens_1xT.at[0, :7].set(tokens_1xT[0, permutation])
    assert not np.array_equal(permuted_1xT, tokens_1xT)
    np.testing.assert_allclose(
        model(permuted_1xT).logits_BxTxV[0, -1], model(tokens_1xT).logits_BxTxV[0, -1], atol=1e-5
    )
    ape_model = tiny_model(n_layers=1, **STYLES["gpt2_ape"])
    difference = ape_model(permuted_1xT).logits_BxTxV[0, -1] - ape_model(tokens_1xT).logits_BxTxV[0, -1]
    assert np.abs(np.asarray(difference)).max() > 1e-3


def test_grouped_query_attention_equals_repeated_kv_heads():
    gqa = tiny_model(block="llama", position="rope", n_kv_heads=2, qkv_bias=True)
    mha = tiny_model(seed=1, block="llama", position="rope", qkv_bias=True)
    group, head_dim = 2, gqa.config.head_dim

    def repeat_heads(array):  # [..., N*K] -> [..., N*G*K], kv head n serving query heads n*G..n*G+G-1
        heads = np.asarray(array).reshape(*array.shape[:-1], -1, head_dim)
        return np.repeat(heads, group, axis=-2).reshape(*array.shape[:-1], -1)

    arrays = {}
    for path, variable in nnx.to_flat_state(nnx.state(gqa, nnx.Param)):
        name = ".".join(map(str, path))
        is_kv = any(f"attn.{p}." in name for p in ("k", "v"))
        arrays[name] = repeat_heads(variable[...]) if is_kv else variable[...]
    set_params(mha, arrays, require_all=True)
    tokens_BxT = random_tokens((2, 6))
    np.testing.assert_allclose(mha(tokens_BxT).logits_BxTxV, gqa(tokens_BxT).logits_BxTxV, atol=1e-5)


def test_same_seed_same_parameters_and_outputs_other_seed_differs():
    tokens_BxT = random_tokens((2, 5))
    first, second, other = tiny_model(seed=7), tiny_model(seed=7), tiny_model(seed=8)
    same = jax.tree.map(np.array_equal, nnx.state(first, nnx.Param), nnx.state(second, nnx.Param))
    assert all(jax.tree.leaves(same))
    np.testing.assert_array_equal(first(tokens_BxT).logits_BxTxV, second(tokens_BxT).logits_BxTxV)
    assert not np.array_equal(first(tokens_BxT).logits_BxTxV, other(tokens_BxT).logits_BxTxV)


def test_out_of_table_ape_position_is_a_clear_error_and_nan_under_jit():
    model = tiny_model(max_positions=8)
    tokens_1xT = random_tokens((1, 4))
    with pytest.raises(ValueError, match=r"position 8 at index \(0, 2\) is outside .*\[0, 8\).*max_positions"):
        model(tokens_1xT, jnp.array([[6, 7, 8, 9]]))
    with pytest.raises(ValueError, match="position -1"):
        model(tokens_1xT, jnp.array([[-1, 0, 1, 2]]))
    with pytest.raises(ValueError, match="token id 16"):
        model(jnp.array([[1, 16]]))
    jitted = nnx.jit(lambda m, positions: m(tokens_1xT, positions).logits_BxTxV)
    assert np.isnan(np.asarray(jitted(model, jnp.array([[6, 7, 8, 9]])))).any()
    assert np.isfinite(np.asarray(jitted(model, jnp.array([[4, 5, 6, 7]])))).all()


# Every architecture the lab builds: the pretrained shapes, and each from-scratch size with each
# position encoding (GPT-2 blocks for APE and NoPE, Llama blocks for RoPE).
ARCHITECTURES = {
    **PRESETS,
    **{
        f"{size}-{pe}": TRAIN_PRESETS[size].model.replace(pe=pe).model_config(128, 512)
        for size in TRAIN_PRESETS
        for pe in POSITIONS
    },
}


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_parameter_count_from_config_equals_actual_parameters(name):
    config = ARCHITECTURES[name]
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    assert count_params(abstract) == parameter_count(config)


@pytest.mark.parametrize("name", ["paper-ape", "paper-rope", "smollm2_135m"])
def test_flops_per_token_counts_every_matrix_product(name):
    config = ARCHITECTURES[name]
    shapes = param_shapes(nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0))))
    kernels = sum(int(np.prod(shape)) for path, shape in shapes.items() if path.endswith(".kernel"))
    output_head = config.vocab_size * config.d_model if config.tie_embeddings else 0
    attention_per_key = 2 * 2 * config.n_layers * config.n_heads * config.head_dim
    for context in (1, 100):
        assert forward_flops_per_token(config, context) == 2 * (kernels + output_head) + attention_per_key * context


def test_published_parameter_counts_of_pretrained_shapes():
    # The totals Hugging Face reports for these checkpoints (tied embeddings counted once).
    assert parameter_count(PRESETS["smollm2_135m"]) == 134_515_008
    assert parameter_count(PRESETS["qwen2.5_0.5b"]) == 494_032_768
    assert parameter_count(PRESETS["gpt2_124m"]) == 124_439_808
    assert parameter_count(PRESETS["gemma3_270m"]) == 268_098_176  # the tensors of its GGUF file


def test_bad_config_and_preset_names_are_clear_errors():
    with pytest.raises(ValueError, match="position='xpos'; accepted"):
        preset("gpt2_124m", position="xpos")
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        preset("gpt2_124m", n_kv_heads=5)
    with pytest.raises(KeyError, match="unknown model preset 'big'"):
        preset("big")


def test_bfloat16_compute_approximates_float32():
    tokens_BxT = random_tokens((2, 6))
    full = tiny_model(**STYLES["llama_rope_gqa"])(tokens_BxT).logits_BxTxV
    half = tiny_model(dtype="bfloat16", **STYLES["llama_rope_gqa"])(tokens_BxT).logits_BxTxV
    assert half.dtype == jnp.float32
    assert np.abs(np.asarray(half - full)).max() < 0.05 * np.abs(np.asarray(full)).max()
    assert not np.array_equal(half, full)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_layer_norm_equals_flax_layer_norm_in_values_and_gradients(dtype):
    """Our LayerNorm (written out for a faster step) is flax's nnx.LayerNorm with the variance of
    x - mean (torch's), up to rounding: outputs and the gradients for input, scale and bias, with
    rows of very different means and spreads; statistics in float32 also under bfloat16."""
    rng = np.random.default_rng(0)
    spread_and_mean_rows = rng.uniform(0.01, 100, size=(3, 5, 1)), rng.normal(size=(3, 5, 1)) * 50
    x_BxTxD = jnp.asarray(rng.normal(size=(3, 5, 16)) * spread_and_mean_rows[0] + spread_and_mean_rows[1], dtype)
    ours = LayerNorm(16, epsilon=1e-5, dtype=dtype, param_dtype=jnp.float32, rngs=nnx.Rngs(0))
    theirs = nnx.LayerNorm(
        16, epsilon=1e-5, use_fast_variance=False, dtype=dtype, param_dtype=jnp.float32, rngs=nnx.Rngs(0)
    )
    for name in ("scale", "bias"):
        value = jnp.asarray(rng.normal(size=16), jnp.float32)
        getattr(ours, name)[...] = value
        getattr(theirs, name)[...] = value
    weights_BxTxD = jnp.asarray(rng.normal(size=x_BxTxD.shape), jnp.float32)

    def weighted_sum(module, x):
        return (module(x).astype(jnp.float32) * weights_BxTxD).sum()

    (ours_param_grads, ours_dx), (theirs_param_grads, theirs_dx) = (
        nnx.grad(weighted_sum, argnums=(0, 1))(norm, x_BxTxD) for norm in (ours, theirs)
    )
    assert ours(x_BxTxD).dtype == dtype
    tolerance = dict(rtol=1e-4, atol=1e-4) if dtype == jnp.float32 else dict(rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(ours(x_BxTxD).astype(jnp.float32), theirs(x_BxTxD).astype(jnp.float32), **tolerance)
    np.testing.assert_allclose(ours_dx.astype(jnp.float32), theirs_dx.astype(jnp.float32), **tolerance)
    for name in ("scale", "bias"):
        np.testing.assert_allclose(
            getattr(ours_param_grads, name)[...], getattr(theirs_param_grads, name)[...], **tolerance
        )


def test_windowed_layers_attend_only_within_the_window_and_global_layers_beyond():
    model = tiny_model(**STYLES["gemma3_window"])  # layer 0 windowed (3 positions), layer 1 global
    weights_LxBxHxTxS = np.asarray(model(random_tokens((2, 8)), return_attention=True).attention_LxBxHxTxS)
    distance_TxS = np.arange(8)[:, None] - np.arange(8)[None, :]
    assert np.all(weights_LxBxHxTxS[0][..., distance_TxS >= 3] == 0)
    assert np.all(weights_LxBxHxTxS[0][..., (distance_TxS >= 0) & (distance_TxS < 3)] > 0)
    assert np.all(weights_LxBxHxTxS[1][..., distance_TxS >= 0] > 0)
