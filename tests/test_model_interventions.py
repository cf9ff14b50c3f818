"""Interventions as data: head masks, mean ablation and attention-edge knock-outs."""

import jax.numpy as jnp
import numpy as np
import pytest

from crasplab.models import Interventions, knockout_bias, mean_head_outputs, set_params
from tests.tiny import STYLES, random_tokens, tiny_model

LAYERS, HEADS = 2, 4


@pytest.mark.parametrize("style", ["gpt2_ape", "llama_rope_gqa", "gpt2_alibi"])
def test_head_mask_of_ones_is_the_identity(style):
    model = tiny_model(**STYLES[style])
    tokens_BxT = random_tokens((2, 6))
    masked = model(tokens_BxT, interventions=Interventions(head_mask_LxH=jnp.ones((LAYERS, HEADS))))
    np.testing.assert_array_equal(masked.logits_BxTxV, model(tokens_BxT).logits_BxTxV)


def test_masking_every_head_of_a_layer_equals_skipping_its_attention():
    model = tiny_model(**STYLES["llama_rope_gqa"])  # no output bias, so a silent layer adds exactly 0
    skipped = tiny_model(**STYLES["llama_rope_gqa"])
    set_params(skipped, {"layers.1.attn.o.kernel": np.zeros((32, 32))})
    tokens_BxT = random_tokens((2, 6))
    head_mask_LxH = jnp.ones((LAYERS, HEADS)).at[1].set(0.0)
    masked = model(tokens_BxT, interventions=Interventions(head_mask_LxH=head_mask_LxH)).logits_BxTxV
    np.testing.assert_allclose(masked, skipped(tokens_BxT).logits_BxTxV, atol=1e-6)
    assert np.abs(np.asarray(masked - model(tokens_BxT).logits_BxTxV)).max() > 1e-3


def test_knocked_out_edge_gets_zero_attention_and_the_rest_renormalizes():
    model = tiny_model(**STYLES["gpt2_ape"])
    tokens_BxT = random_tokens((2, 6))
    edges_LxBxHxTxS = np.zeros((LAYERS, 1, HEADS, 6, 6), bool)
    edges_LxBxHxTxS[1, :, 2, 4, 1] = True  # layer 1, head 2: query 4 -/-> key 1
    edges_LxBxHxTxS[0, :, :, 5, :5] = True  # layer 0, every head: query 5 sees only itself
    base = model(tokens_BxT, return_attention=True).attention_LxBxHxTxS
    attention = model(
        tokens_BxT,
        interventions=Interventions(attn_bias_LxBxHxTxS=knockout_bias(edges_LxBxHxTxS)),
        return_attention=True,
    ).attention_LxBxHxTxS
    assert np.all(np.asarray(attention[1, :, 2, 4, 1]) == 0.0)
    assert np.all(np.asarray(attention[0, :, :, 5, :5]) == 0.0)
    np.testing.assert_allclose(attention[0, :, :, 5, 5], 1.0)
    np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-6)
    assert np.asarray(base[1, :, 2, 4, 1]).min() > 0
    np.testing.assert_array_equal(attention[0, :, :, :5], base[0, :, :, :5])  # untouched queries


@pytest.mark.parametrize("style", ["gpt2_ape", "llama_rope_gqa", "gpt2_alibi"])
def test_mean_ablation_replaces_a_head_output_by_its_reference_mean(style):
    model = tiny_model(**STYLES[style])
    reference_BxT = random_tokens((4, 6), seed=9)
    mask_BxT = np.arange(6) < np.array([6, 5, 3, 6])[:, None]
    means_LxHxK = mean_head_outputs(model, reference_BxT, mask_BxT=mask_BxT)
    heads_LxBxTxHxK = np.asarray(
        model(reference_BxT, mask_BxT=mask_BxT, return_head_outputs=True).head_outputs_LxBxTxHxK
    )
    np.testing.assert_allclose(means_LxHxK, heads_LxBxTxHxK[:, mask_BxT].mean(axis=1), atol=1e-6)

    tokens_BxT = random_tokens((2, 6))
    head_mask_LxH = jnp.ones((LAYERS, HEADS)).at[0, 1].set(0.0)
    interventions = Interventions(head_mask_LxH=head_mask_LxH, head_mean_LxHxK=means_LxHxK)
    ablated = np.asarray(
        model(tokens_BxT, interventions=interventions, return_head_outputs=True).head_outputs_LxBxTxHxK
    )
    clean = np.asarray(model(tokens_BxT, return_head_outputs=True).head_outputs_LxBxTxHxK)
    np.testing.assert_allclose(ablated[0, :, :, 1], np.broadcast_to(means_LxHxK[0, 1], (2, 6, 32 // HEADS)), atol=1e-6)
    np.testing.assert_array_equal(ablated[0, :, :, [0, 2, 3]], clean[0, :, :, [0, 2, 3]])
    assert np.abs(ablated[1] - clean[1]).max() > 1e-4  # the change reaches the next layer
