"""Assigning weights by path, as a checkpoint loader does."""

import numpy as np
import pytest
from flax import nnx

from crasplab.models import param_shapes, set_params
from tests.tiny import STYLES, random_tokens, tiny_model


def test_parameter_tree_has_the_documented_paths():
    gpt2 = param_shapes(tiny_model(**STYLES["gpt2_ape"]))
    assert gpt2["embed.embedding"] == (16, 32) and gpt2["pos_embed.embedding"] == (64, 32)
    assert {"layers.1.mlp.fc.kernel", "layers.1.mlp.proj.bias", "layers.0.attn.o.bias", "final_norm.bias"} <= set(gpt2)
    assert "lm_head.kernel" not in gpt2  # tied
    llama = param_shapes(tiny_model(tie_embeddings=False, **STYLES["llama_rope_gqa"]))
    assert llama["layers.0.attn.q.kernel"] == (32, 32) and llama["layers.0.attn.k.kernel"] == (32, 16)
    assert llama["layers.0.attn.k.bias"] == (16,) and "layers.0.attn.o.bias" not in llama
    assert {"layers.1.mlp.gate.kernel", "layers.1.mlp.up.kernel", "layers.1.mlp.down.kernel"} <= set(llama)
    assert llama["lm_head.kernel"] == (32, 16) and "final_norm.bias" not in llama


def test_set_params_copies_a_model_exactly():
    source, target = tiny_model(seed=1), tiny_model(seed=2)
    tokens_BxT = random_tokens((2, 5))
    arrays = {".".join(map(str, path)): v[...] for path, v in nnx.to_flat_state(nnx.state(source, nnx.Param))}
    set_params(target, arrays, require_all=True)
    np.testing.assert_array_equal(target(tokens_BxT).logits_BxTxV, source(tokens_BxT).logits_BxTxV)


def test_set_params_rejects_unknown_paths_wrong_shapes_and_gaps_before_writing():
    model = tiny_model()
    before = np.asarray(model.embed.embedding[...]).copy()
    with pytest.raises(ValueError, match=r"unknown parameter path 'layers.0.attn.query.kernel' \(did you mean"):
        set_params(model, {"embed.embedding": np.zeros((16, 32)), "layers.0.attn.query.kernel": np.zeros((32, 32))})
    with pytest.raises(ValueError, match=r"layers.0.attn.q.kernel: got shape \(32, 16\), the model expects \(32, 32\)"):
        set_params(model, {"embed.embedding": np.zeros((16, 32)), "layers.0.attn.q.kernel": np.zeros((32, 16))})
    with pytest.raises(ValueError, match="final_norm.scale: not given"):
        set_params(model, {"embed.embedding": np.zeros((16, 32))}, require_all=True)
    np.testing.assert_array_equal(model.embed.embedding[...], before)
