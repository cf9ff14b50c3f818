"""Small model files the loading and in-context tests write: GGUF and safetensors checkpoints of a
tiny Llama, a byte-level tokenizer, and the records an in-context run leaves."""

import json
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize
from safetensors.numpy import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

BYTE_LEVEL_ALPHABET = [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["Ġ", "Ċ"]


def llama_cpp_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute, which it applies to q and k rows."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def write_gguf(
    path: Path,
    tensors: dict[str, np.ndarray],
    *,
    types: dict[str, GGMLQuantizationType] | None = None,
    architecture: str = "llama",
    hyper: dict | None = None,
    tokens: list[str] | None = None,
) -> Path:
    """A GGUF file: `tensors` as numpy [out, in] arrays (or uint8 arrays of quantized blocks), each
    stored with its type from `types` (default F32), `architecture` hyperparameters from `hyper`,
    and a byte-level BPE tokenizer of `tokens`."""
    writer = GGUFWriter(str(path), architecture)
    for key, value in (hyper or {}).items():
        if isinstance(value, float):
            writer.add_float32(f"{architecture}.{key}", value)
        else:
            writer.add_uint32(f"{architecture}.{key}", value)
    tokens = tokens or BYTE_LEVEL_ALPHABET
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    writer.add_token_merges(["Ġ a"] if "Ġa" in tokens else [])
    writer.add_eos_token_id(0)
    for name, array in tensors.items():
        kind = (types or {}).get(name, GGMLQuantizationType.F32)
        if kind == GGMLQuantizationType.F32:
            writer.add_tensor(name, array.astype(np.float32))
        elif array.dtype == np.uint8:  # blocks already quantized (gguf.quants cannot write K-quants)
            writer.add_tensor(name, array, raw_dtype=kind)
        else:
            writer.add_tensor(name, quantize(array.astype(np.float32), kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def with_config(model, **changes):
    """The same weights in a models.Transformer whose config differs by `changes`."""
    from flax import nnx

    from crasplab.models.transformer import Transformer

    config = model.config.replace(**changes)
    return nnx.merge(nnx.graphdef(nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))), nnx.state(model))


def tiny_llama_tensors(rng, d=32, layers=1, vocab=len(BYTE_LEVEL_ALPHABET), ff=64):
    tensors = {"token_embd.weight": rng.normal(size=(vocab, d)), "output_norm.weight": np.ones(d)}
    for layer in range(layers):
        for name, shape in [
            ("attn_q", (d, d)),
            ("attn_k", (d, d)),
            ("attn_v", (d, d)),
            ("attn_output", (d, d)),
            ("ffn_gate", (ff, d)),
            ("ffn_up", (ff, d)),
            ("ffn_down", (d, ff)),
        ]:
            tensors[f"blk.{layer}.{name}.weight"] = rng.normal(size=shape)
        tensors[f"blk.{layer}.attn_norm.weight"] = np.ones(d)
        tensors[f"blk.{layer}.ffn_norm.weight"] = np.ones(d)
    return tensors


TINY_LLAMA_HYPER = {
    "block_count": 1,
    "embedding_length": 32,
    "feed_forward_length": 64,
    "attention.head_count": 2,
    "attention.head_count_kv": 2,
    "context_length": 64,
    "attention.layer_norm_rms_epsilon": 1e-5,
}


def write_byte_level_tokenizer(folder):
    backend = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(BYTE_LEVEL_ALPHABET)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))


def write_tiny_llama(folder, seed=0):
    """A random Llama checkpoint in Hugging Face's names and layout (Linear weights [out, in])."""
    rng = np.random.default_rng(seed)
    vocab, d, ff, layers = len(BYTE_LEVEL_ALPHABET) + 1, 32, 64, 2
    config = dict(
        model_type="llama",
        vocab_size=vocab,
        hidden_size=d,
        intermediate_size=ff,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        hidden_act="silu",
    )
    tensors = {"model.embed_tokens.weight": rng.normal(size=(vocab, d)), "model.norm.weight": np.ones(d)}
    shapes = {
        "self_attn.q_proj": (d, d),
        "self_attn.k_proj": (d // 2, d),
        "self_attn.v_proj": (d // 2, d),
        "self_attn.o_proj": (d, d),
        "mlp.gate_proj": (ff, d),
        "mlp.up_proj": (ff, d),
        "mlp.down_proj": (d, ff),
    }
    for layer in range(layers):
        for name, shape in shapes.items():
            tensors[f"model.layers.{layer}.{name}.weight"] = rng.normal(size=shape) / np.sqrt(shape[1])
        for name in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{layer}.{name}.weight"] = np.ones(d)
    save_file({k: v.astype(np.float32) for k, v in tensors.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    write_byte_level_tokenizer(folder)
    return folder


def answer_records(run):
    return [
        {k: v for k, v in r.items() if k != "seconds"}
        for r in map(json.loads, (run / "results.jsonl").read_text().splitlines())
    ]
