"""Reading a Hugging Face checkpoint folder: config.json and its *.safetensors shards."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open

from models.loading.errors import UnsupportedModelError


@dataclass(frozen=True)
class CheckpointFolder:
    path: Path
    config: dict[str, Any]
    _shard_of: dict[str, Path]  # tensor name -> the file holding it

    @property
    def model_type(self) -> str | None:
        return self.config.get("model_type")

    @property
    def tensor_names(self) -> tuple[str, ...]:
        return tuple(self._shard_of)

    def tensor(self, name: str) -> np.ndarray:
        # The flax framework reads bfloat16 too, which numpy alone cannot.
        with safe_open(self._shard_of[name], framework="flax") as shard:
            return np.asarray(shard.get_tensor(name), dtype=np.float32)


def read_checkpoint_folder(path: Path) -> CheckpointFolder:
    config_path = path / "config.json"
    if not config_path.is_file():
        raise UnsupportedModelError(str(path), "checkpoint folder without config.json")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise UnsupportedModelError(str(config_path), f"not valid JSON ({error})") from error
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise UnsupportedModelError(str(path), "checkpoint folder without *.safetensors weights")
    shard_of = {}
    for shard in shards:
        with safe_open(shard, framework="flax") as file:
            shard_of.update({name: shard for name in file.keys()})
    return CheckpointFolder(path=path, config=config, _shard_of=shard_of)
