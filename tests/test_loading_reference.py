"""Logits of models loaded by models.loading against an independent implementation: Hugging Face
transformers on torch, on small random-weight Llama, Qwen2 and GPT-2 checkpoints written with
save_pretrained, and on GGUF files of every supported tensor type made from a random Llama."""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference implementation needs torch (pip install -e '.[reference]')")
transformers = pytest.importorskip(
    "transformers", reason="the reference implementation needs transformers (pip install -e '.[reference]')"
)
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

from crasplab.models.loading import load_pretrained  # noqa: E402
from tests.model_files import BYTE_LEVEL_ALPHABET, llama_cpp_permute, with_config, write_gguf  # noqa: E402

TOLERANCE = 1e-3
VOCAB = len(BYTE_LEVEL_ALPHABET)


def randomize(model, seed: int):
    """Weights far from the init's near-zero values, so a misplaced tensor changes the logits a lot."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if parameter.ndim == 1:  # norm scales around 1, biases around 0
                parameter.copy_(1 + 0.2 * noise if "norm" in name or "ln_" in name else 0.2 * noise)
            else:
                parameter.copy_(
                    noise / parameter.shape[-1] ** 0.5 * (1 if "emb" in name or "wte" in name or "wpe" in name else 1.5)
                )
    return model.eval()


def reference_logits(model, tokens_BxT: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(tokens_BxT)).logits.numpy()


def our_logits(path, tokens_BxT: np.ndarray) -> np.ndarray:
    return np.asarray(load_pretrained(path).model(tokens_BxT).logits_BxTxV)


def random_tokens(vocab: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(vocab, size=(2, 12)).astype(np.int32)


LLAMA = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
)
CHECKPOINTS = {
    "llama_gqa_untied": lambda: transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**LLAMA, tie_word_embeddings=False, rope_theta=500.0)
    ),
    "llama_tied_head_dim": lambda: transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**LLAMA | dict(head_dim=24), tie_word_embeddings=True)
    ),
    "qwen2_bias_gqa": lambda: transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(**LLAMA, tie_word_embeddings=False, rope_theta=1e6)
    ),
    "gpt2": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=32)
    ),
}


def assert_same_logits(reference, folder, label: str) -> None:
    tokens_BxT = random_tokens(VOCAB)
    expected = reference_logits(reference, tokens_BxT)
    difference = np.abs(our_logits(folder, tokens_BxT) - expected).max()
    print(f"{label}: max |logit difference| = {difference:.2e} (logit scale {np.abs(expected).max():.1f})")
    assert difference < TOLERANCE


@pytest.mark.parametrize("kind", sorted(CHECKPOINTS))
def test_safetensors_checkpoint_logits_match_transformers(tmp_path, kind):
    reference = randomize(CHECKPOINTS[kind](), seed=1)
    reference.save_pretrained(tmp_path)
    assert_same_logits(reference, tmp_path, kind)


def test_sharded_bfloat16_checkpoint_loads_every_shard(tmp_path):
    reference = randomize(CHECKPOINTS["qwen2_bias_gqa"](), seed=3)
    # The reference computes in float32 on the bfloat16-rounded weights (its RoPE buffers stay float32).
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).to(torch.float32))
    copy.deepcopy(reference).to(torch.bfloat16).save_pretrained(tmp_path, max_shard_size="40KB")
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    assert_same_logits(reference, tmp_path, "qwen2 bfloat16, sharded")


def test_gpt2_checkpoint_with_the_hub_names_loads(tmp_path):
    """The hub's gpt2 was saved from GPT2Model: no "transformer." prefix and no lm_head."""
    from safetensors.numpy import load_file, save_file

    reference = randomize(CHECKPOINTS["gpt2"](), seed=4)
    reference.save_pretrained(tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    renamed = {name.removeprefix("transformer."): array for name, array in tensors.items() if name != "lm_head.weight"}
    assert renamed.keys() != tensors.keys()
    save_file(renamed, str(tmp_path / "model.safetensors"))
    assert_same_logits(reference, tmp_path, "gpt2, hub names")


def _gguf_name(hf_name: str) -> str | None:
    """The llama.cpp tensor name of a Hugging Face Llama parameter (written out here independently
    of models.loading's table)."""
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf_name in fixed:
        return fixed[hf_name]
    _, _, layer, *rest = hf_name.split(".")
    block = {
        "self_attn.q_proj.weight": "attn_q",
        "self_attn.k_proj.weight": "attn_k",
        "self_attn.v_proj.weight": "attn_v",
        "self_attn.o_proj.weight": "attn_output",
        "mlp.gate_proj.weight": "ffn_gate",
        "mlp.up_proj.weight": "ffn_up",
        "mlp.down_proj.weight": "ffn_down",
        "input_layernorm.weight": "attn_norm",
        "post_attention_layernorm.weight": "ffn_norm",
    }[".".join(rest)]
    return f"blk.{layer}.{block}.weight"


@pytest.mark.parametrize("kind", ["F32", "F16", "Q8_0", "Q4_0", "Q4_1"])
def test_gguf_logits_match_transformers_on_the_same_dequantized_weights(tmp_path, kind):
    """A random Llama written the way llama.cpp writes it (Q/K rows permuted, matrices quantized,
    norms in F32); the reference gets the same rounded weights in its own layout."""
    qtype = GGMLQuantizationType[kind]
    config = transformers.LlamaConfig(**LLAMA, tie_word_embeddings=False, rope_theta=10000.0)
    reference = randomize(transformers.LlamaForCausalLM(config), seed=2)
    tensors, types = {}, {}
    with torch.no_grad():
        for hf_name, parameter in reference.named_parameters():
            weights = parameter.numpy()
            if weights.ndim == 2:
                # Quantization works on whole rows, so rounding commutes with the row permutation.
                rounded = dequantize(quantize(weights, qtype), qtype).reshape(weights.shape)
                parameter.copy_(torch.from_numpy(np.ascontiguousarray(rounded)))
                types[_gguf_name(hf_name)] = qtype
            if hf_name.endswith("q_proj.weight"):
                weights = llama_cpp_permute(weights, config.num_attention_heads)
            elif hf_name.endswith("k_proj.weight"):
                weights = llama_cpp_permute(weights, config.num_key_value_heads)
            tensors[_gguf_name(hf_name)] = weights
    hyper = {
        "block_count": 2,
        "embedding_length": 64,
        "feed_forward_length": 128,
        "attention.head_count": 4,
        "attention.head_count_kv": 2,
        "context_length": 64,
        "rope.freq_base": 10000.0,
        "attention.layer_norm_rms_epsilon": 1e-5,
    }
    path = write_gguf(tmp_path / "tiny.gguf", tensors, types=types, hyper=hyper)
    tokens_BxT = random_tokens(VOCAB)
    expected = reference_logits(reference, tokens_BxT)
    difference = np.abs(our_logits(path, tokens_BxT) - expected).max()
    print(f"GGUF {kind}: max |logit difference| = {difference:.2e} (logit scale {np.abs(expected).max():.1f})")
    assert difference < TOLERANCE


# Where each K-quant block keeps its float16 scales (d, and dmin where it has one), as ggml lays
# the block out; the other bytes are quantized values and sub-block scales, any bits of which decode.
_K_QUANT_SCALES = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
_K_QUANT_SCALE_SIZE = {"Q2_K": 2e-3, "Q3_K": 2e-3, "Q4_K": 2e-4, "Q5_K": 1e-4, "Q6_K": 1e-5}


def random_k_quant_blocks(rows: int, columns: int, kind: str, rng) -> np.ndarray:
    """Random K-quant blocks of a [rows, columns] matrix, with scales that keep the entries near
    1/sqrt(columns)."""
    qtype = GGMLQuantizationType[kind]
    block, size = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(rows, columns // block, size), dtype=np.uint8)
    for offset in _K_QUANT_SCALES[kind]:
        scale = (_K_QUANT_SCALE_SIZE[kind] * rng.uniform(0.5, 1.5, size=data.shape[:2])).astype(np.float16)
        data[:, :, offset : offset + 2] = scale[..., None].view(np.uint8).reshape(*data.shape[:2], 2)
    return data.reshape(rows, -1)


GEMMA3_WINDOW = 4
GEMMA3 = dict(
    vocab_size=VOCAB,
    hidden_size=256,  # K-quant rows hold 256 values
    intermediate_size=512,
    num_hidden_layers=6,  # five windowed layers, then a global one
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=128,
    query_pre_attn_scalar=128,
    sliding_window=GEMMA3_WINDOW,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    # llama.cpp's bases for every Gemma 3 (the windowed layers' is not in its GGUF files)
    rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    },
)
_GEMMA3_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
# Every supported block type but F16/BF16 somewhere: the K-quants as Q4_K_M mixes them, the rest beside.
_GEMMA3_TYPES = ["Q4_K", "Q6_K", "Q5_0", "Q8_0", "Q2_K", "Q3_K", "Q5_K", "Q5_1", "Q4_0", "Q4_1", "F16", "BF16"]


def _gemma3_gguf_name(hf_name: str) -> str:
    """The llama.cpp tensor name of a Hugging Face Gemma 3 parameter, written out independently of
    models.loading's table."""
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    _, _, layer, *rest = hf_name.split(".")
    return f"blk.{layer}.{_GEMMA3_NAMES['.'.join(rest).removesuffix('.weight')]}.weight"


@pytest.fixture(scope="module")
def gemma3_reference(tmp_path_factory):
    """A random Gemma 3 written the way llama.cpp writes it (norm weights plus one, no Q/K
    permutation, matrices of every block type), and the reference holding the same rounded weights."""
    reference = randomize(transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**GEMMA3)), seed=5)
    rng = np.random.default_rng(5)
    tensors, types, kinds = {}, {}, iter(_GEMMA3_TYPES * 10)
    with torch.no_grad():
        for hf_name, parameter in reference.named_parameters():
            if hf_name == "lm_head.weight":
                continue  # tied to the embedding
            name, weights = _gemma3_gguf_name(hf_name), parameter.numpy()
            if weights.ndim == 1:
                tensors[name] = weights + 1
                continue
            kind = next(kinds) if name != "token_embd.weight" else "Q8_0"
            qtype = GGMLQuantizationType[kind]
            stored = (
                random_k_quant_blocks(*weights.shape, kind, rng)
                if kind in _K_QUANT_SCALES
                else quantize(weights.astype(np.float32), qtype)
            )
            parameter.copy_(torch.from_numpy(dequantize(stored, qtype).reshape(weights.shape).astype(np.float32)))
            tensors[name], types[name] = stored, qtype
    hyper = {
        "block_count": 6,
        "embedding_length": 256,
        "feed_forward_length": 512,
        "attention.head_count": 2,
        "attention.head_count_kv": 1,
        "attention.key_length": 128,
        "attention.value_length": 128,
        "attention.sliding_window": GEMMA3_WINDOW,
        "context_length": 64,
        "rope.freq_base": 1e6,
        "attention.layer_norm_rms_epsilon": 1e-6,
    }
    path = write_gguf(
        tmp_path_factory.mktemp("gemma3") / "gemma3.gguf", tensors, types=types, architecture="gemma3", hyper=hyper
    )
    assert {t.name for t in types.values()} >= {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1", "BF16"}
    return reference.eval(), load_pretrained(path)


def test_gemma3_gguf_logits_match_transformers(gemma3_reference):
    reference, ours = gemma3_reference
    tokens_BxT = random_tokens(VOCAB)
    assert tokens_BxT.shape[1] > GEMMA3_WINDOW
    expected = reference_logits(reference, tokens_BxT)
    difference = np.abs(np.asarray(ours.model(tokens_BxT).logits_BxTxV) - expected).max()
    print(f"GGUF gemma3: max |logit difference| = {difference:.2e} (logit scale {np.abs(expected).max():.1f})")
    assert ours.architecture == "gguf/gemma3" and ours.config.tie_embeddings
    assert difference < TOLERANCE


@pytest.mark.parametrize(
    "wrong",
    [
        dict(sliding_window=10**9),  # the window dropped
        dict(global_every=None),  # no global layer
        dict(global_every=1),  # no windowed layer
        dict(rope_local_base=None),  # the windowed layers rotating by the global base
    ],
    ids=str,
)
def test_gemma3_reference_tells_a_wrong_layer_pattern_apart(gemma3_reference, wrong):
    """The comparison above can fail: the same weights in a model with one detail of the layer
    pattern wrong miss the reference by far more than the tolerance."""
    reference, ours = gemma3_reference
    mistaken = with_config(ours.model, **wrong)
    tokens_BxT = random_tokens(VOCAB)
    difference = np.abs(np.asarray(mistaken(tokens_BxT).logits_BxTxV) - reference_logits(reference, tokens_BxT)).max()
    assert difference > 100 * TOLERANCE
