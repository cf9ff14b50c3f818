"""One declarative table per source architecture: how its hyperparameters become a ModelConfig,
and how each of its tensors becomes a parameter of models.Transformer.

A rule maps a source tensor name (a regular expression, matched whole; `(?P<layer>\\d+)` names the
block) to parameter paths in the Transformer's tree (`layers.{layer}.attn.q.kernel`), through
transforms applied in order. A rule with several targets splits the transformed array into equal
parts along its last axis (GPT-2's fused q/k/v); a rule with none skips the tensor on purpose.
Parameter kernels are [in, out] (nnx.Linear); Hugging Face Linear weights and GGUF matrices are
[out, in], hence `transpose`; GPT-2's Conv1D weights are [in, out] already.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from crasplab.models.config import ModelConfig
from crasplab.models.loading.errors import UnsupportedModelError

Transform = Callable[[np.ndarray, ModelConfig], np.ndarray]


def transpose(array: np.ndarray, config: ModelConfig) -> np.ndarray:
    return array.T


def _undo_llama_cpp_rope_permutation(array: np.ndarray, heads: int) -> np.ndarray:
    # llama.cpp's converter reorders each head's rows from the rotate_half layout (i pairs with
    # i + K/2) to the interleaved one (2i pairs with 2i + 1): reshape(heads, 2, K/2).swap(1, 2).
    # This is the inverse.
    rows, columns = array.shape
    return array.reshape(heads, rows // heads // 2, 2, columns).swapaxes(1, 2).reshape(rows, columns)


def unpermute_query_rows(array: np.ndarray, config: ModelConfig) -> np.ndarray:
    return _undo_llama_cpp_rope_permutation(array, config.n_heads)


def unpermute_key_rows(array: np.ndarray, config: ModelConfig) -> np.ndarray:
    return _undo_llama_cpp_rope_permutation(array, config.kv_heads)


@dataclass(frozen=True)
class Rule:
    source: str
    targets: tuple[str, ...]
    transforms: tuple[Transform, ...] = ()


@dataclass(frozen=True)
class Architecture:
    """A source format's architecture: its hyperparameters and its name-mapping table."""

    name: str
    # (GGUF metadata or config.json, the source's tensor names, where) -> config, its position aside
    config: Callable[[dict[str, Any], frozenset[str], str], ModelConfig]
    rules: tuple[Rule, ...]
    position: str  # the encoding of every model it loads (a code of models.positions.SCHEMES)


_REQUIRED = object()


def _value(values: dict[str, Any], key: str, where: str, default: Any, expected: str, valid: Callable[[Any], bool]):
    """values[key], or `default` where it is absent or null; a value the file gives must be `valid`."""
    value = values.get(key)
    if value is None:
        if default is _REQUIRED:
            raise UnsupportedModelError(where, f"missing hyperparameter {key!r} (expected {expected})")
        return default
    if not valid(value):
        raise UnsupportedModelError(where, f"hyperparameter {key!r} is {value!r}; expected {expected}")
    return value


def _size(values: dict[str, Any], key: str, where: str, default: Any = _REQUIRED) -> int:
    """A count or a width: every integer hyperparameter of these tables is one."""
    return _value(
        values,
        key,
        where,
        default,
        "a positive integer",
        lambda value: isinstance(value, int) and not isinstance(value, bool) and value > 0,
    )


def _real(values: dict[str, Any], key: str, where: str, default: Any = _REQUIRED) -> float:
    return float(
        _value(
            values,
            key,
            where,
            default,
            "a number",
            lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
        )
    )


def _section(values: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """A nested group of hyperparameters such as rope_scaling; {} where absent or null."""
    return _value(values, key, where, {}, "a JSON object", lambda value: isinstance(value, dict))


# --- GGUF, architecture "llama" (SmolLM, Llama 1-3 without rope scaling) -------------------------


@dataclass(frozen=True)
class _GGUFHyperparameters:
    """A GGUF's hyperparameters, which llama.cpp keys by architecture ("llama.block_count")."""

    metadata: dict[str, Any]
    architecture: str
    where: str

    def size(self, name: str, default: Any = _REQUIRED) -> int:
        return _size(self.metadata, f"{self.architecture}.{name}", self.where, default)

    def real(self, name: str, default: Any = _REQUIRED) -> float:
        return _real(self.metadata, f"{self.architecture}.{name}", self.where, default)

    def rotary_decoder(self, tensor_names: frozenset[str], context: int, rope_base: float, **fields) -> ModelConfig:
        """The fields every GGUF decoder with RoPE shares, then the architecture's own `fields`."""
        n_heads, d_model = self.size("attention.head_count"), self.size("embedding_length")
        return ModelConfig(
            **dict(
                vocab_size=self.size("vocab_size", len(self.metadata.get("tokenizer.ggml.tokens", ()))),
                d_model=d_model,
                n_layers=self.size("block_count"),
                n_heads=n_heads,
                n_kv_heads=self.size("attention.head_count_kv", n_heads),
                d_ff=self.size("feed_forward_length"),
                d_head=self.size("attention.key_length", d_model // n_heads),
                max_positions=self.size("context_length", context),
                rope_base=self.real("rope.freq_base", rope_base),
                norm_eps=self.real("attention.layer_norm_rms_epsilon"),
                tie_embeddings="output.weight" not in tensor_names,
            )
            | fields
        )


def _gguf_llama_config(metadata: dict[str, Any], tensor_names: frozenset[str], where: str) -> ModelConfig:
    hyper = _GGUFHyperparameters(metadata, "llama", where)
    if "rope_freqs.weight" in tensor_names or hyper.real("rope.scaling.factor", 1.0) != 1.0:
        raise UnsupportedModelError(
            where, "RoPE scaling (Llama 3.1 style rope_freqs, llama.rope.scaling.*) is not supported"
        )
    head_dim = hyper.size("attention.key_length", hyper.size("embedding_length") // hyper.size("attention.head_count"))
    return hyper.rotary_decoder(
        tensor_names, 2048, 10000.0, block="llama", rope_dim=hyper.size("rope.dimension_count", head_dim)
    )


_GGUF_BLOCK = r"blk\.(?P<layer>\d+)\."
GGUF_LLAMA = Architecture(
    name="llama",
    config=_gguf_llama_config,
    position="rope",
    rules=(
        Rule(r"token_embd\.weight", ("embed.embedding",)),
        Rule(r"output_norm\.weight", ("final_norm.scale",)),
        Rule(r"output\.weight", ("lm_head.kernel",), (transpose,)),
        Rule(_GGUF_BLOCK + r"attn_norm\.weight", ("layers.{layer}.attn_norm.scale",)),
        Rule(_GGUF_BLOCK + r"attn_q\.weight", ("layers.{layer}.attn.q.kernel",), (unpermute_query_rows, transpose)),
        Rule(_GGUF_BLOCK + r"attn_k\.weight", ("layers.{layer}.attn.k.kernel",), (unpermute_key_rows, transpose)),
        Rule(_GGUF_BLOCK + r"attn_v\.weight", ("layers.{layer}.attn.v.kernel",), (transpose,)),
        Rule(_GGUF_BLOCK + r"attn_output\.weight", ("layers.{layer}.attn.o.kernel",), (transpose,)),
        Rule(_GGUF_BLOCK + r"ffn_norm\.weight", ("layers.{layer}.mlp_norm.scale",)),
        Rule(_GGUF_BLOCK + r"ffn_gate\.weight", ("layers.{layer}.mlp.gate.kernel",), (transpose,)),
        Rule(_GGUF_BLOCK + r"ffn_up\.weight", ("layers.{layer}.mlp.up.kernel",), (transpose,)),
        Rule(_GGUF_BLOCK + r"ffn_down\.weight", ("layers.{layer}.mlp.down.kernel",), (transpose,)),
    ),
)


# --- GGUF, architecture "gemma3" (Gemma 3 text models) -------------------------------------------

# llama.cpp's hyperparameters of every Gemma 3, which its GGUF files do not carry (llama-model.cpp):
# every 6th block attends globally, the others through the window, rotating with base 10000.
GEMMA3_GLOBAL_EVERY = 6
GEMMA3_LOCAL_ROPE_BASE = 10000.0


def minus_one(array: np.ndarray, config: ModelConfig) -> np.ndarray:
    # llama.cpp's converter stores Gemma's norm weights plus one (its RMSNorm multiplies by the
    # weight); the gemma3 block multiplies by (1 + scale), as Hugging Face's does.
    return array - 1


def _gguf_gemma3_config(metadata: dict[str, Any], tensor_names: frozenset[str], where: str) -> ModelConfig:
    hyper = _GGUFHyperparameters(metadata, "gemma3", where)
    if hyper.real("rope.scaling.factor", 1.0) != 1.0:
        raise UnsupportedModelError(
            where, "RoPE scaling (gemma3.rope.scaling.*, Gemma 3 4B and larger) is not supported"
        )
    head_dim = hyper.size("attention.key_length")
    if hyper.size("attention.value_length", head_dim) != head_dim:
        raise UnsupportedModelError(where, "gemma3.attention.value_length differs from key_length; expected equal")
    return hyper.rotary_decoder(
        tensor_names,
        32768,
        1000000.0,
        block="gemma3",
        sliding_window=hyper.size("attention.sliding_window"),
        global_every=GEMMA3_GLOBAL_EVERY,
        rope_local_base=GEMMA3_LOCAL_ROPE_BASE,
    )


GGUF_GEMMA3 = Architecture(
    name="gemma3",
    config=_gguf_gemma3_config,
    position="rope",
    # Gemma rotates in the rotate_half layout and llama.cpp keeps it (NEOX rope): no row permutation.
    rules=(
        Rule(r"token_embd\.weight", ("embed.embedding",)),
        Rule(r"output_norm\.weight", ("final_norm.scale",), (minus_one,)),
        Rule(r"output\.weight", ("lm_head.kernel",), (transpose,)),
        Rule(_GGUF_BLOCK + r"attn_norm\.weight", ("layers.{layer}.attn_norm.scale",), (minus_one,)),
        Rule(_GGUF_BLOCK + r"post_attention_norm\.weight", ("layers.{layer}.post_attn_norm.scale",), (minus_one,)),
        Rule(_GGUF_BLOCK + r"ffn_norm\.weight", ("layers.{layer}.mlp_norm.scale",), (minus_one,)),
        Rule(_GGUF_BLOCK + r"post_ffw_norm\.weight", ("layers.{layer}.post_mlp_norm.scale",), (minus_one,)),
        Rule(_GGUF_BLOCK + r"attn_(?P<p>[qk])_norm\.weight", ("layers.{layer}.attn.{p}_norm.scale",), (minus_one,)),
        Rule(_GGUF_BLOCK + r"attn_(?P<p>[qkv])\.weight", ("layers.{layer}.attn.{p}.kernel",), (transpose,)),
        Rule(_GGUF_BLOCK + r"attn_output\.weight", ("layers.{layer}.attn.o.kernel",), (transpose,)),
        Rule(_GGUF_BLOCK + r"ffn_(?P<p>gate|up|down)\.weight", ("layers.{layer}.mlp.{p}.kernel",), (transpose,)),
    ),
)


# --- Hugging Face config.json + safetensors: llama, qwen2, gpt2 ----------------------------------


def _rope(config: dict[str, Any], where: str) -> tuple[float, float]:
    """(base, partial rotary factor); transformers 5 writes `rope_parameters`, 4.x `rope_theta`."""
    parameters = _section(config, "rope_parameters", where)
    scaling = _section(config, "rope_scaling", where) or parameters
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind != "default":
        raise UnsupportedModelError(where, f"RoPE type {kind!r} is not supported (only 'default')")
    base = _real(config, "rope_theta", where, _real(parameters, "rope_theta", where, 10000.0))
    factor = _real(config, "partial_rotary_factor", where, _real(parameters, "partial_rotary_factor", where, 1.0))
    return base, factor


def _reject(config: dict[str, Any], where: str, unsupported: dict[str, Any]) -> None:
    for key, accepted in unsupported.items():
        value = config.get(key, accepted[0])
        if value not in accepted:
            raise UnsupportedModelError(where, f"config.json sets {key}={value!r}; supported: {list(accepted)}")


def _llama_family_config(config: dict[str, Any], where: str, *, qkv_bias: bool) -> ModelConfig:
    _reject(config, where, {"hidden_act": ("silu",), "mlp_bias": (False,), "use_sliding_window": (False,)})
    n_heads, d_model = _size(config, "num_attention_heads", where), _size(config, "hidden_size", where)
    head_dim = _size(config, "head_dim", where, d_model // n_heads)
    base, factor = _rope(config, where)
    return ModelConfig(
        vocab_size=_size(config, "vocab_size", where),
        d_model=d_model,
        n_layers=_size(config, "num_hidden_layers", where),
        n_heads=n_heads,
        n_kv_heads=_size(config, "num_key_value_heads", where, n_heads),
        d_ff=_size(config, "intermediate_size", where),
        d_head=head_dim,
        block="llama",
        max_positions=_size(config, "max_position_embeddings", where, 2048),
        rope_base=base,
        rope_dim=int(head_dim * factor),
        qkv_bias=qkv_bias,
        norm_eps=_real(config, "rms_norm_eps", where, 1e-6),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
    )


def _hf_llama_config(config: dict[str, Any], tensor_names: frozenset[str], where: str) -> ModelConfig:
    # Llama's attention_bias also puts a bias on o_proj, which the llama block does not have.
    _reject(config, where, {"attention_bias": (False,)})
    return _llama_family_config(config, where, qkv_bias=False)


def _hf_qwen2_config(config: dict[str, Any], tensor_names: frozenset[str], where: str) -> ModelConfig:
    return _llama_family_config(config, where, qkv_bias=True)


def _hf_gpt2_config(config: dict[str, Any], tensor_names: frozenset[str], where: str) -> ModelConfig:
    _reject(
        config,
        where,
        {
            "activation_function": ("gelu_new", "gelu_pytorch_tanh"),
            "scale_attn_weights": (True,),
            "scale_attn_by_inverse_layer_idx": (False,),
            "tie_word_embeddings": (True,),
        },
    )
    d_model = _size(config, "n_embd", where)
    return ModelConfig(
        vocab_size=_size(config, "vocab_size", where),
        d_model=d_model,
        n_layers=_size(config, "n_layer", where),
        n_heads=_size(config, "n_head", where),
        d_ff=_size(config, "n_inner", where, 4 * d_model),
        block="gpt2",
        max_positions=_size(config, "n_positions", where),
        norm_eps=_real(config, "layer_norm_epsilon", where, 1e-5),
        tie_embeddings=True,
    )


_HF_LAYER = r"model\.layers\.(?P<layer>\d+)\."
_HF_LLAMA_RULES = (
    Rule(r"model\.embed_tokens\.weight", ("embed.embedding",)),
    Rule(r"model\.norm\.weight", ("final_norm.scale",)),
    Rule(r"lm_head\.weight", ("lm_head.kernel",), (transpose,)),
    Rule(_HF_LAYER + r"self_attn\.rotary_emb\.inv_freq", ()),  # a buffer older checkpoints saved
    Rule(_HF_LAYER + r"input_layernorm\.weight", ("layers.{layer}.attn_norm.scale",)),
    Rule(_HF_LAYER + r"post_attention_layernorm\.weight", ("layers.{layer}.mlp_norm.scale",)),
    Rule(_HF_LAYER + r"self_attn\.(?P<p>[qkv])_proj\.weight", ("layers.{layer}.attn.{p}.kernel",), (transpose,)),
    Rule(_HF_LAYER + r"self_attn\.(?P<p>[qkv])_proj\.bias", ("layers.{layer}.attn.{p}.bias",)),
    Rule(_HF_LAYER + r"self_attn\.o_proj\.weight", ("layers.{layer}.attn.o.kernel",), (transpose,)),
    Rule(_HF_LAYER + r"mlp\.(?P<p>gate|up|down)_proj\.weight", ("layers.{layer}.mlp.{p}.kernel",), (transpose,)),
)
HF_LLAMA = Architecture(name="llama", config=_hf_llama_config, rules=_HF_LLAMA_RULES, position="rope")
HF_QWEN2 = Architecture(name="qwen2", config=_hf_qwen2_config, rules=_HF_LLAMA_RULES, position="rope")

# GPT2LMHeadModel saves names under "transformer."; GPT2Model (the hub's gpt2) without it.
_GPT2 = r"(?:transformer\.)?"
_GPT2_LAYER = _GPT2 + r"h\.(?P<layer>\d+)\."


def _gpt2_affine(source: str, *targets: str, weight: str) -> tuple[Rule, Rule]:
    """GPT-2 stores a layer as `weight` and `bias`; our kernels/norm scales take the weight."""
    return (
        Rule(source + r"\.weight", tuple(f"{target}.{weight}" for target in targets)),
        Rule(source + r"\.bias", tuple(f"{target}.bias" for target in targets)),
    )


HF_GPT2 = Architecture(
    name="gpt2",
    config=_hf_gpt2_config,
    position="ape",
    rules=(
        Rule(_GPT2 + r"wte\.weight", ("embed.embedding",)),
        Rule(_GPT2 + r"wpe\.weight", ("pos_embed.embedding",)),
        Rule(r"lm_head\.weight", ()),  # tied to wte
        Rule(_GPT2_LAYER + r"attn\.(?:masked_)?bias", ()),  # causal-mask buffers, not weights
        *_gpt2_affine(_GPT2 + r"ln_f", "final_norm", weight="scale"),
        *_gpt2_affine(_GPT2_LAYER + r"ln_1", "layers.{layer}.attn_norm", weight="scale"),
        *_gpt2_affine(_GPT2_LAYER + r"ln_2", "layers.{layer}.mlp_norm", weight="scale"),
        # Conv1D weights are [in, out] already; c_attn holds q, k and v side by side.
        *_gpt2_affine(_GPT2_LAYER + r"attn\.c_attn", *(f"layers.{{layer}}.attn.{x}" for x in "qkv"), weight="kernel"),
        *_gpt2_affine(_GPT2_LAYER + r"attn\.c_proj", "layers.{layer}.attn.o", weight="kernel"),
        *_gpt2_affine(_GPT2_LAYER + r"mlp\.c_fc", "layers.{layer}.mlp.fc", weight="kernel"),
        *_gpt2_affine(_GPT2_LAYER + r"mlp\.c_proj", "layers.{layer}.mlp.proj", weight="kernel"),
    ),
)

GGUF_ARCHITECTURES = {"llama": GGUF_LLAMA, "gemma3": GGUF_GEMMA3}
HF_ARCHITECTURES = {"llama": HF_LLAMA, "qwen2": HF_QWEN2, "gpt2": HF_GPT2}
