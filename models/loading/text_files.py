"""Reading the text files of a checkpoint folder (config.json, tokenizer_config.json, a chat
template), with errors that name the file and what it should have held."""

import json
from pathlib import Path
from typing import Any

from crasplab.models.loading.errors import UnsupportedModelError

_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UnsupportedModelError(str(path), f"not UTF-8 text ({error})") from error


def read_json_object(path: Path, expected: str) -> dict[str, Any]:
    """The JSON object `path` holds; `expected` says what it should hold, for the error messages."""
    try:
        value = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise UnsupportedModelError(str(path), f"not valid JSON ({error}); expected {expected}") from error
    if not isinstance(value, dict):
        raise UnsupportedModelError(
            str(path), f"holds a JSON {_JSON_KINDS[type(value)]}, not a JSON object; expected {expected}"
        )
    return value
