"""Damaged or malformed model files: each is an UnsupportedModelError naming the file and what was
expected, never a traceback from the gguf, safetensors, tokenizers or json packages."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from crasplab.models.loading import UnsupportedModelError, load_pretrained
from crasplab.models.loading.tokenizer import tokenizer_from_folder, tokenizer_from_gguf_metadata
from tests.test_loading_formats import write_gguf
from tests.test_pretrained_experiment import write_byte_level_tokenizer

TINY_LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 1,
                     "intermediate_size": 64, "vocab_size": 16}


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
        ({"num_key_value_heads": 3},
         "hyperparameters that make no valid model: n_heads=2 must be a multiple of n_kv_heads=3"),
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
