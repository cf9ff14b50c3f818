"""Reading a GGUF file: its metadata and its tensors, dequantized to float32 with the `gguf` package.

Tensors come back in the row-major orientation the file implies (ggml lists dimensions innermost
first, so a matrix with ggml shape [in, out] is a numpy [out, in] array, the layout of a
Hugging Face `nn.Linear.weight`). Undoing llama.cpp's Q/K row permutation is a transform in the
name-mapping table, not done here.
"""

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.constants import GGUF_MAGIC
from gguf.quants import dequantize

from crasplab.models.loading.errors import UnsupportedModelError

# Every type gguf.quants dequantizes that llama.cpp's usual quantizations write: the legacy block types
# and the K-quants that Q4_K_M and its kin mix (Gemma 3 270M's Q4_K_M file holds Q5_0, Q8_0, Q4_K and
# Q6_K matrices).
SUPPORTED_TENSOR_TYPES = (
    GGMLQuantizationType.F32,
    GGMLQuantizationType.F16,
    GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q4_0,
    GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q5_0,
    GGMLQuantizationType.Q5_1,
    GGMLQuantizationType.Q2_K,
    GGMLQuantizationType.Q3_K,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q5_K,
    GGMLQuantizationType.Q6_K,
)

# GGUFReader parses a file without checking it against the file's size, so damage shows as whatever
# the parse trips over: an IndexError (a read past the end), a ValueError (an unknown type code,
# bad UTF-8, tensor data shorter than its shape) or a KeyError (a duplicate key, an unknown
# quantization type).
_DAMAGED_GGUF_ERRORS = (IndexError, ValueError, KeyError)


# GGUF metadata value types (gguf.GGUFValueType): the size of each scalar type, and the two others.
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_SMALLEST_BYTES = {**_SCALAR_BYTES, _STRING: 8, _ARRAY: 12}  # a string's length; an array's type and count
_HEADER_BYTES = 24  # magic, version, tensor count, metadata count
_SMALLEST_TENSOR_INFO = 8 + 4 + 8 + 4 + 8  # name length, dimension count, one dimension, type, offset


class _Damaged(ValueError):
    """A GGUF whose declared sizes do not fit in the file."""


class _SizeCheck:
    """Walks a GGUF's header and metadata, checking every declared count against the bytes left in
    the file before anything is read for it: GGUFReader believes the counts and loops over them, so
    a 94-byte file declaring an array of 2^40 items grew its memory without bound."""

    def __init__(self, data):
        self.data, self.offset = data, 0

    def take(self, size: int, what: str) -> int:
        start, left = self.offset, len(self.data) - self.offset
        if size > left:
            raise _Damaged(f"{what} needs {size} bytes, and the file has {left} left")
        self.offset += size
        return start

    def integer(self, fmt: str, what: str) -> int:
        return struct.unpack_from(fmt, self.data, self.take(struct.calcsize(fmt), what))[0]

    def count(self, what: str, smallest: int) -> int:
        """A declared count of items of at least `smallest` bytes each, bounded by the bytes left."""
        count = self.integer("<Q", what)
        if count * smallest > len(self.data) - self.offset:
            raise _Damaged(
                f"{what} declares {count} items of at least {smallest} bytes each, more than the "
                f"{len(self.data) - self.offset} bytes left in the file"
            )
        return count

    def value(self, kind: int, what: str) -> None:
        if kind in _SCALAR_BYTES:
            self.take(_SCALAR_BYTES[kind], what)
        elif kind == _STRING:
            self.take(self.integer("<Q", what), what)
        elif kind == _ARRAY:
            item = self.integer("<I", what)
            if item not in _SMALLEST_BYTES:
                raise _Damaged(f"{what} is an array of unknown value type {item}")
            count = self.count(what, _SMALLEST_BYTES[item])
            if item in _SCALAR_BYTES:
                self.take(count * _SCALAR_BYTES[item], what)
            else:
                for _ in range(count):
                    self.value(item, what)
        else:
            raise _Damaged(f"{what} has unknown value type {kind}")

    def metadata(self) -> None:
        self.take(8, "the header")  # magic and version
        self.count("the tensor count", _SMALLEST_TENSOR_INFO)
        for index in range(self.count("the metadata count", 8 + 4)):
            key_bytes = self.integer("<Q", f"metadata key {index}")
            key = bytes(self.data[self.take(key_bytes, f"metadata key {index}") : self.offset]).decode(errors="replace")
            self.value(self.integer("<I", f"metadata {key!r}"), f"metadata {key!r}")


def _check_declared_sizes(path: Path) -> None:
    with open(path, "rb") as file:
        if file.seek(0, 2) < _HEADER_BYTES:
            raise _Damaged(f"the file has {file.tell()} bytes, fewer than a GGUF header's {_HEADER_BYTES}")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _SizeCheck(data).metadata()


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
        _check_declared_sizes(path)
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
