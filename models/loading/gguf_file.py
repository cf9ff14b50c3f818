"""Reading a GGUF file: its metadata and its tensors, dequantized to float32 with the `gguf` package.

Tensors come back in the row-major orientation the file implies (ggml lists dimensions innermost
first, so a matrix with ggml shape [in, out] is a numpy [out, in] array, the layout of a
Hugging Face `nn.Linear.weight`). Undoing llama.cpp's Q/K row permutation is a transform in the
name-mapping table, not done here.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.constants import GGUF_MAGIC
from gguf.quants import dequantize

from crasplab.models.loading.errors import UnsupportedModelError

SUPPORTED_TENSOR_TYPES = (
    GGMLQuantizationType.F32,
    GGMLQuantizationType.F16,
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q4_0,
    GGMLQuantizationType.Q4_1,
)

# GGUFReader parses a file without checking it against the file's size, so damage shows as whatever
# the parse trips over: an IndexError (a read past the end), a ValueError (an unknown type code,
# bad UTF-8, tensor data shorter than its shape) or a KeyError (a duplicate key, an unknown
# quantization type).
_DAMAGED_GGUF_ERRORS = (IndexError, ValueError, KeyError)


def is_gguf(path: Path) -> bool:
    with open(path, "rb") as file:
        magic = file.read(4)
    return len(magic) == 4 and int.from_bytes(magic, "little") == GGUF_MAGIC


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    metadata: dict[str, Any]
    _tensors: dict[str, ReaderTensor]

    @property
    def architecture(self) -> str:
        return self.metadata["general.architecture"]

    @property
    def tensor_names(self) -> tuple[str, ...]:
        return tuple(self._tensors)

    def tensor(self, name: str) -> np.ndarray:
        """The named tensor as float32, dequantized; shape in numpy (outermost-first) order."""
        tensor = self._tensors[name]
        if tensor.tensor_type not in SUPPORTED_TENSOR_TYPES:
            supported = ", ".join(kind.name for kind in SUPPORTED_TENSOR_TYPES)
            raise UnsupportedModelError(
                str(self.path),
                f"tensor {name!r} has type {tensor.tensor_type.name}, which this loader cannot "
                f"dequantize (supported tensor types: {supported})",
            )
        values = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        # ggml's shape is innermost-first; a 1-D tensor's data may already have that shape.
        return values.reshape(tuple(reversed([int(n) for n in tensor.shape])))


def read_gguf(path: Path) -> GGUFFile:
    if not is_gguf(path):
        raise UnsupportedModelError(str(path), "not a GGUF file (its first bytes are not the GGUF magic)")
    try:
        reader = GGUFReader(path)
        metadata = {key: field.contents() for key, field in reader.fields.items()}
    except _DAMAGED_GGUF_ERRORS as error:
        raise UnsupportedModelError(
            str(path),
            f"damaged or truncated GGUF ({type(error).__name__}: {error}); expected a complete GGUF file as "
            "llama.cpp or the gguf package writes it: re-download or re-convert it",
        ) from error
    if "general.architecture" not in metadata:
        raise UnsupportedModelError(str(path), "GGUF without general.architecture metadata")
    return GGUFFile(path=path, metadata=metadata, _tensors={tensor.name: tensor for tensor in reader.tensors})
