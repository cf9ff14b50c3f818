"""Pretrained weights and tokenizers for models.Transformer: GGUF files, Hugging Face checkpoint
folders (safetensors + config.json) and named models such as "smollm2". No torch."""

from models.loading.errors import UnsupportedModelError
from models.loading.loader import NAMED_MODELS, Pretrained, build_model, load_pretrained, resolve_model_path
from models.loading.tokenizer import PretrainedTokenizer

__all__ = [
    "NAMED_MODELS",
    "Pretrained",
    "PretrainedTokenizer",
    "UnsupportedModelError",
    "build_model",
    "load_pretrained",
    "resolve_model_path",
]
