"""The bridge to `models`: which architecture each positional encoding gets, and decoding.

APE and NoPE use GPT-2 blocks (LayerNorm, GELU); RoPE uses Llama blocks (RMSNorm, SwiGLU) with
base 500, as in the official from-scratch setups of the retrieval/copying paper.
"""

from __future__ import annotations

from flax import nnx

from crasp.tasks import EOS_ID, PAD_ID
from models.config import ModelConfig
from models.generate import generate
from models.transformer import Transformer

PE_STYLE = {
    "ape": dict(block="gpt2", position="ape"),
    "nope": dict(block="gpt2", position="nope"),
    "rope": dict(block="llama", position="rope", rope_base=500.0, tie_embeddings=False),
}


def model_config(pe: str, settings: dict, vocab_size: int, max_positions: int) -> ModelConfig:
    """ModelConfig from the run's model settings (n_layers, n_heads, d_model, optional d_ff, dtype)."""
    settings = dict(settings)
    settings.setdefault("d_ff", 4 * settings["d_model"])
    return ModelConfig(vocab_size=vocab_size, max_positions=max_positions, **{**settings, **PE_STYLE[pe]})


def build_model(pe: str, settings: dict, vocab_size: int, max_positions: int, seed: int):
    return Transformer(model_config(pe, settings, vocab_size, max_positions), rngs=nnx.Rngs(seed))


def greedy_decode(model, tokens_NxT, prompt_lengths_N, max_new_tokens: int):
    """The model's KV-cache greedy continuation of each prompt: generated_NxM (M = max_new_tokens)."""
    return generate(model, tokens_NxT, prompt_lengths_N, max_new_tokens=max_new_tokens, eos_id=EOS_ID,
                    pad_id=PAD_ID).tokens_BxN
