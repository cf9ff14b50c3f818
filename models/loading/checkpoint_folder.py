"""Reading a Hugging Face checkpoint folder: config.json and its *.safetensors shards."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

from crasplab.models.loading.errors import UnsupportedModelError
from crasplab.models.loading.text_files import read_json_object

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class CheckpointFolder:
    path: Path
    config: dict[str, Any]
    _shard_of: dict[str, Path]  # tensor name -> the file holding it

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def model_type(self) -> Any:  # a string in any config.json that transformers wrote
        return self.config.get("model_type")

    @property
    def tensor_names(self) -> tuple[str, ...]:
        return tuple(self._shard_of)

    def tensor(self, name: str) -> np.ndarray:
        # The flax framework reads bfloat16 too, which numpy alone cannot.
        with safe_open(self._shard_of[name], framework="flax") as shard:
            return np.asarray(shard.get_tensor(name), dtype=np.float32)


def read_checkpoint_folder(path: Path) -> CheckpointFolder:
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise UnsupportedModelError(str(path), f"checkpoint folder without {CONFIG_FILE}")
    config = read_json_object(config_path, "the model's hyperparameters, as transformers' save_pretrained writes them")
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise UnsupportedModelError(str(path), "checkpoint folder without *.safetensors weights")
    shard_of = {}
    for shard in shards:
        shard_of.update({name: shard for name in _tensor_names(shard)})
    return CheckpointFolder(path=path, config=config, _shard_of=shard_of)


def _tensor_names(shard: Path) -> list[str]:
    # Opening a shard reads and checks its header (its length, its JSON, that the tensors it lists
    # fit in the file), so a damaged or truncated shard fails here, before any weight is read.
    try:
        with safe_open(shard, framework="flax") as file:
            return list(file.keys())
    except SafetensorError as error:
        raise UnsupportedModelError(
            str(shard),
            f"not a readable safetensors file ({error}); it may be damaged or truncated: re-download or re-save it",
        ) from error
