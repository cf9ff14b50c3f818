"""Damaged or malformed model files: each is an UnsupportedModelError naming the file and what was
expected, never a traceback from the gguf, safetensors, tokenizers or json packages."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from crasplab.models.loading import UnsupportedModelError, load_pretrained
from crasplab.models.loading.tokenizer import tokenizer_from_folder, tokenizer_from_gguf_metadata
from tests.model_files import TINY_LLAMA_HYPER, tiny_llama_tensors, write_gguf
from tests.model_files import write_byte_level_tokenizer, write_tiny_llama

TINY_LLAMA_CONFIG = {
    "model_type": "llama",
    "hidden_size": 32,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "intermediate_size": 64,
    "vocab_size": 16,
}


def load_error(path: Path) -> UnsupportedModelError:
    with pytest.raises(UnsupportedModelError) as caught:
        load_pretrained(path)
    return caught.value


# --- GGUF ------------------------------------------------------------------------------------------


@pytest.fixture
def gguf_bytes(tmp_path) -> bytes:
    """A small valid GGUF (metadata of a few hundred bytes, then one 16x16 float32 tensor)."""
    return write_gguf(tmp_path / "valid.gguf", {"w": np.ones((16, 16))}).read_bytes()


def test_a_gguf_header_followed_by_garbage_is_a_clear_error(tmp_path, gguf_bytes):
    path = tmp_path / "garbage.gguf"
    path.write_bytes(gguf_bytes[:64] + np.random.default_rng(0).bytes(4096))
    error = load_error(path)
    assert error.where == str(path)
    assert "damaged or truncated GGUF" in error.problem and "expected a complete GGUF file" in error.problem


@pytest.mark.parametrize("keep", [100, -100], ids=["cut-in-metadata", "cut-in-tensor-data"])
def test_a_truncated_gguf_is_a_clear_error(tmp_path, gguf_bytes, keep):
    path = tmp_path / "truncated.gguf"
    path.write_bytes(gguf_bytes[:keep])
    error = load_error(path)
    assert error.where == str(path) and "damaged or truncated GGUF" in error.problem


@pytest.mark.parametrize("tokens", [None, [1, 2]], ids=["absent", "numbers"])
def test_a_gguf_byte_level_tokenizer_without_its_vocabulary_is_a_clear_error(tokens):
    metadata = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens}
    with pytest.raises(UnsupportedModelError, match="^m.gguf: a 'gpt2' tokenizer without its vocabulary"):
        tokenizer_from_gguf_metadata(metadata, "m.gguf")


# --- Hugging Face config.json ----------------------------------------------------------------------


def checkpoint_folder(folder: Path, config_text: str) -> Path:
    """A folder with this config.json (surrogate escapes stand for raw bytes) and one valid safetensors shard."""
    (folder / "config.json").write_bytes(config_text.encode("utf-8", "surrogateescape"))
    save_file({"x": np.zeros(2, np.float32)}, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[1, 2]", "holds a JSON array, not a JSON object; expected the model's hyperparameters"),
        ('"llama"', "holds a JSON string, not a JSON object"),
        ("{model_type: llama", "not valid JSON (Expecting property name"),
        ("\udcff", "not UTF-8 text"),
    ],
    ids=["array", "string", "invalid-json", "not-utf8"],
)
def test_a_config_json_that_is_not_a_json_object_is_a_clear_error(tmp_path, text, problem):
    error = load_error(checkpoint_folder(tmp_path, text))
    assert error.where == str(tmp_path / "config.json") and problem in error.problem


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"hidden_size": None}, "missing hyperparameter 'hidden_size' (expected a positive integer)"),
        ({"hidden_size": "big"}, "hyperparameter 'hidden_size' is 'big'; expected a positive integer"),
        ({"num_attention_heads": 0}, "hyperparameter 'num_attention_heads' is 0; expected a positive integer"),
        ({"rms_norm_eps": [1e-5]}, "hyperparameter 'rms_norm_eps' is [1e-05]; expected a number"),
        ({"rope_scaling": [1]}, "'rope_scaling' is [1]; expected a JSON object"),
        (
            {"num_key_value_heads": 3},
            "hyperparameters that make no valid model: n_heads=2 must be a multiple of n_kv_heads=3",
        ),
    ],
    ids=["missing", "string", "zero", "list", "rope-scaling-list", "inconsistent"],
)
def test_config_json_hyperparameters_of_the_wrong_kind_are_a_clear_error(tmp_path, change, problem):
    config = {key: value for key, value in (TINY_LLAMA_CONFIG | change).items() if value is not None}
    error = load_error(checkpoint_folder(tmp_path, json.dumps(config)))
    assert error.where == str(tmp_path / "config.json") and problem in error.problem


def test_a_model_type_that_is_not_a_string_is_a_clear_error(tmp_path):
    error = load_error(checkpoint_folder(tmp_path, json.dumps({"model_type": ["llama"]})))
    assert "unsupported architecture ['llama'] (config.json model_type)" in error.problem


# --- safetensors -----------------------------------------------------------------------------------


def _truncated_shard(path: Path) -> bytes:
    save_file({"w": np.zeros(256, np.float32)}, str(path))
    return path.read_bytes()[:-100]


@pytest.mark.parametrize(
    "contents",
    [
        lambda path: np.random.default_rng(0).bytes(300),
        lambda path: b"",
        lambda path: (10**6).to_bytes(8, "little") + b'{"w": {}}',  # header longer than the file
        _truncated_shard,
    ],
    ids=["garbage", "empty", "header-past-the-end", "truncated"],
)
def test_a_corrupt_safetensors_shard_is_a_clear_error(tmp_path, contents):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    shard = tmp_path / "model.safetensors"
    shard.write_bytes(contents(shard))
    error = load_error(tmp_path)
    assert error.where == str(shard)
    assert "not a readable safetensors file" in error.problem and "re-download or re-save it" in error.problem


# --- tokenizer files of a checkpoint folder --------------------------------------------------------


@pytest.mark.parametrize(
    "name, text, problem",
    [
        ("tokenizer.json", "{not json", "not a tokenizer the tokenizers library can read"),
        ("tokenizer_config.json", "[1]", "holds a JSON array, not a JSON object"),
        ("chat_template.jinja", "\udcff", "not UTF-8 text"),
    ],
)
def test_unreadable_tokenizer_files_are_a_clear_error(tmp_path, name, text, problem):
    write_byte_level_tokenizer(tmp_path)
    (tmp_path / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(UnsupportedModelError) as caught:
        tokenizer_from_folder(tmp_path)
    assert caught.value.where == str(tmp_path / name) and problem in caught.value.problem


# --- sizes a file declares: bounded before anything is built or read ------------------------------


def test_a_gguf_metadata_array_declaring_2_to_the_40_items_is_refused_at_once(tmp_path):
    # 57 bytes: header (GGUF v3, no tensors, one key), key "a", an array of uint8 that claims 2^40 items.
    path = tmp_path / "huge-array.gguf"
    path.write_bytes(
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + struct.pack("<Q", 1)
        + b"a"
        + struct.pack("<IIQ", 9, 0, 2**40)
        + b"\0" * 8
    )
    error = load_error(path)
    assert "damaged or truncated GGUF" in error.problem
    assert f"metadata 'a' declares {2**40} items of at least 1 bytes each, more than the 8 bytes left" in error.problem


def test_a_gguf_block_count_beyond_its_tensors_is_refused_before_the_model_is_built(tmp_path):
    path = write_gguf(
        tmp_path / "m.gguf",
        tiny_llama_tensors(np.random.default_rng(0)),
        hyper=TINY_LLAMA_HYPER | {"block_count": 10**8},
    )
    error = load_error(path)
    assert "the hyperparameters declare 100000000 blocks, and the file holds tensors for 1" in error.problem


def test_a_config_json_num_hidden_layers_beyond_its_tensors_is_refused_before_the_model_is_built(tmp_path):
    folder = write_tiny_llama(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 10**8}))
    assert "declare 100000000 blocks, and the file holds tensors for 2" in load_error(folder).problem


# --- malformed tensors and tokenizers --------------------------------------------------------------


def test_a_query_matrix_of_the_wrong_shape_is_a_clear_error(tmp_path):
    tensors = tiny_llama_tensors(np.random.default_rng(0)) | {"blk.0.attn_q.weight": np.ones((30, 32))}
    error = load_error(write_gguf(tmp_path / "m.gguf", tensors, hyper=TINY_LLAMA_HYPER))
    assert error.problem.startswith(
        "tensor 'blk.0.attn_q.weight' of shape (30, 32) does not fit the hyperparameters (unpermute_query_rows:"
    )


def gpt2_folder(folder: Path, c_attn_width: int, d: int = 8, vocab: int = 16) -> Path:
    """A one-block GPT-2 checkpoint in Hugging Face's names, its fused q/k/v `c_attn_width` wide."""
    (folder / "config.json").write_text(
        json.dumps(
            {"model_type": "gpt2", "n_embd": d, "n_layer": 1, "n_head": 2, "n_positions": 16, "vocab_size": vocab}
        )
    )
    shapes = {
        "wte.weight": (vocab, d),
        "wpe.weight": (16, d),
        "ln_f.weight": (d,),
        "ln_f.bias": (d,),
        "h.0.ln_1.weight": (d,),
        "h.0.ln_1.bias": (d,),
        "h.0.ln_2.weight": (d,),
        "h.0.ln_2.bias": (d,),
        "h.0.attn.c_attn.weight": (d, c_attn_width),
        "h.0.attn.c_attn.bias": (c_attn_width,),
        "h.0.attn.c_proj.weight": (d, d),
        "h.0.attn.c_proj.bias": (d,),
        "h.0.mlp.c_fc.weight": (d, 4 * d),
        "h.0.mlp.c_fc.bias": (4 * d,),
        "h.0.mlp.c_proj.weight": (4 * d, d),
        "h.0.mlp.c_proj.bias": (d,),
    }
    save_file({name: np.zeros(shape, np.float32) for name, shape in shapes.items()}, str(folder / "model.safetensors"))
    return folder


def test_a_gpt2_fused_attention_that_does_not_split_in_three_is_a_clear_error(tmp_path):
    load_pretrained(gpt2_folder(tmp_path, 24))  # 3 x 8: loads
    error = load_error(gpt2_folder(tmp_path, 25))
    assert error.problem.startswith("tensor 'h.0.attn.c_attn.bias' of shape (25,) holds") or error.problem.startswith(
        "tensor 'h.0.attn.c_attn.weight' of shape (8, 25) holds"
    )
    assert "so its last dimension must divide by 3" in error.problem


GPT2_TOKENIZER = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"]}


@pytest.mark.parametrize(
    "change, problem",
    [
        (
            {"tokenizer.ggml.merges": ["ab"]},
            "tokenizer.ggml.merges holds 'ab'; expected an array of strings, each two tokens separated by a space",
        ),
        ({"tokenizer.ggml.merges": [7]}, "tokenizer.ggml.merges holds '7'; expected an array of strings"),
        (
            {"tokenizer.ggml.merges": ["a zz"]},
            "tokenizer.ggml.merges merges 'a zz', a token of which is not in tokenizer.ggml.tokens",
        ),
        (
            {"tokenizer.ggml.token_type": 1},
            "tokenizer.ggml.token_type is int '1'; expected an array of integers, one per token",
        ),
    ],
    ids=["merge-without-space", "merge-not-a-string", "merge-of-unknown-token", "scalar-token-type"],
)
def test_malformed_gguf_tokenizer_metadata_is_a_clear_error(change, problem):
    tokenizer_from_gguf_metadata(GPT2_TOKENIZER | {"tokenizer.ggml.merges": ["a b"]}, "m.gguf")  # well formed: builds
    with pytest.raises(UnsupportedModelError) as caught:
        tokenizer_from_gguf_metadata(GPT2_TOKENIZER | change, "m.gguf")
    assert caught.value.where == "m.gguf" and caught.value.problem.startswith(problem)
