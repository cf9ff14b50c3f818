"""The one error a user sees when a model source cannot be loaded, always naming what is supported."""

from crasplab.errors import LabError

SUPPORTED_SOURCES = (
    "supported model sources: a GGUF file (architecture 'llama', e.g. SmolLM2 or Llama, or 'gemma3'; "
    "tensor types F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants Q2_K-Q6_K), a Hugging Face "
    "checkpoint folder with config.json and *.safetensors (model_type 'llama', 'qwen2' or 'gpt2'), or a "
    "named model ('smollm2', 'gemma3-270m')"
)


class UnsupportedModelError(LabError, ValueError):
    """A model source that is missing, malformed or outside what the loaders support."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}; {SUPPORTED_SOURCES}")
        self.where = where
        self.problem = problem
