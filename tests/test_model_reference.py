"""Against an independent implementation: tiny random Hugging Face Llama, Qwen2 and GPT-2 models,
copied into ours by parameter path, give the same logits (RoPE layout, GQA order, norms, GELU)."""

import numpy as np
import pytest
from flax import nnx

from crasplab.models import ModelConfig, Transformer, set_params
from tests.tiny import random_tokens

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB, D, LAYERS, HEADS, KV_HEADS, D_FF = 16, 32, 2, 4, 2, 48


def numpy_state(hf_model) -> dict[str, np.ndarray]:
    return {name: tensor.detach().numpy() for name, tensor in hf_model.state_dict().items()}


def llama_arrays(state, qkv_bias: bool) -> dict[str, np.ndarray]:
    arrays = {
        "embed.embedding": state["model.embed_tokens.weight"],
        "final_norm.scale": state["model.norm.weight"],
        "lm_head.kernel": state["lm_head.weight"].T,
    }
    for i in range(LAYERS):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        for name in ("q", "k", "v", "o"):
            arrays[ours + f"attn.{name}.kernel"] = state[hf + f"self_attn.{name}_proj.weight"].T
        for name in ("q", "k", "v")[: 3 * qkv_bias]:
            arrays[ours + f"attn.{name}.bias"] = state[hf + f"self_attn.{name}_proj.bias"]
        for name in ("gate", "up", "down"):
            arrays[ours + f"mlp.{name}.kernel"] = state[hf + f"mlp.{name}_proj.weight"].T
        arrays[ours + "attn_norm.scale"] = state[hf + "input_layernorm.weight"]
        arrays[ours + "mlp_norm.scale"] = state[hf + "post_attention_layernorm.weight"]
    return arrays


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_llama_and_qwen2_blocks_match_hugging_face(architecture):
    qkv_bias = architecture == "qwen2"
    shape = dict(
        vocab_size=VOCAB,
        hidden_size=D,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        intermediate_size=D_FF,
        rope_theta=500.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    if qkv_bias:
        hf_model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**shape))
    else:
        hf_model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape))
    state = numpy_state(hf_model)
    if qkv_bias:  # Qwen2 initializes biases to zero; make them matter
        for i in range(LAYERS):
            for name in ("q", "k", "v"):
                state[f"model.layers.{i}.self_attn.{name}_proj.bias"] = (
                    np.random.default_rng(i)
                    .normal(size=state[f"model.layers.{i}.self_attn.{name}_proj.bias"].shape)
                    .astype(np.float32)
                )
        hf_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    config = ModelConfig(
        vocab_size=VOCAB,
        d_model=D,
        n_layers=LAYERS,
        n_heads=HEADS,
        n_kv_heads=KV_HEADS,
        d_ff=D_FF,
        block="llama",
        position="rope",
        rope_base=500.0,
        norm_eps=1e-6,
        qkv_bias=qkv_bias,
        tie_embeddings=False,
    )
    model = Transformer(config, rngs=nnx.Rngs(0))
    set_params(model, llama_arrays(state, qkv_bias), require_all=True)
    tokens_BxT = np.asarray(random_tokens((2, 7)))
    with torch.no_grad():
        expected = hf_model(torch.tensor(tokens_BxT, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(model(tokens_BxT).logits_BxTxV, expected, atol=1e-4)


def test_gpt2_block_matches_hugging_face():
    torch.manual_seed(0)
    hf_config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_embd=D,
        n_layer=LAYERS,
        n_head=HEADS,
        n_positions=32,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    hf_model = transformers.GPT2LMHeadModel(hf_config).eval()
    state = numpy_state(hf_model)
    arrays = {
        "embed.embedding": state["transformer.wte.weight"],
        "pos_embed.embedding": state["transformer.wpe.weight"],
        "final_norm.scale": state["transformer.ln_f.weight"],
        "final_norm.bias": state["transformer.ln_f.bias"],
    }
    for i in range(LAYERS):
        hf, ours = f"transformer.h.{i}.", f"layers.{i}."
        # GPT-2's Conv1D stores [in, out] already; c_attn holds q, k, v side by side.
        for name, kernel, bias in zip(
            "qkv", np.split(state[hf + "attn.c_attn.weight"], 3, axis=1), np.split(state[hf + "attn.c_attn.bias"], 3)
        ):
            arrays[ours + f"attn.{name}.kernel"], arrays[ours + f"attn.{name}.bias"] = kernel, bias
        for hf_name, our_name in (("attn.c_proj", "attn.o"), ("mlp.c_fc", "mlp.fc"), ("mlp.c_proj", "mlp.proj")):
            arrays[ours + our_name + ".kernel"] = state[hf + hf_name + ".weight"]
            arrays[ours + our_name + ".bias"] = state[hf + hf_name + ".bias"]
        for hf_name, our_name in (("ln_1", "attn_norm"), ("ln_2", "mlp_norm")):
            arrays[ours + our_name + ".scale"] = state[hf + hf_name + ".weight"]
            arrays[ours + our_name + ".bias"] = state[hf + hf_name + ".bias"]
    config = ModelConfig(vocab_size=VOCAB, d_model=D, n_layers=LAYERS, n_heads=HEADS, d_ff=4 * D, max_positions=32)
    model = Transformer(config, rngs=nnx.Rngs(0))
    set_params(model, arrays, require_all=True)
    tokens_BxT = np.asarray(random_tokens((2, 7)))
    with torch.no_grad():
        expected = hf_model(torch.tensor(tokens_BxT, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(model(tokens_BxT).logits_BxTxV, expected, atol=1e-4)
