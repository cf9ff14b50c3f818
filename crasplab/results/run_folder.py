"""The settings file of a run folder: written before anything else, and the guard that keeps a
folder from mixing results of two different commands.

A run is resumed by running the same command again: the folder's `config.json` must then equal
the settings of the new command (except for keys that only change how results are read, such as
a threshold). Everything that could fail is validated by the experiment before `open_run_folder`
is called, so a typo never leaves a folder that the corrected command refuses.
"""

from __future__ import annotations

import json
from pathlib import Path

from crasplab.results.files import write_json

CONFIG_FILE = "config.json"


class RunFolderError(ValueError):
    """A folder that cannot hold this run, or that holds no run of this experiment."""


def check_output_folder(path: Path) -> Path:
    """`path` as a run folder to write: refused when it is a file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"--out {path} is a file; give a folder (a new one, or the folder of a run to resume)")
    return path


def open_run_folder(path: Path, config: dict, may_change: tuple[str, ...] = ()) -> None:
    """Write `config` as the folder's settings, or refuse when the folder holds a run with other
    settings (keys in `may_change` excepted; their new values are written)."""
    path = check_output_folder(path)
    saved_file = path / CONFIG_FILE
    if saved_file.exists():
        saved = _read_object(saved_file)
        config_as_saved = json.loads(json.dumps(config))  # tuples become lists, as in the file
        changed = sorted(key for key in (saved or {}).keys() | config_as_saved.keys()
                         if key not in may_change and (saved or {}).get(key) != config_as_saved.get(key))
        if saved is None or changed:
            what = f"different settings ({', '.join(changed)})" if saved is not None else "an unreadable config.json"
            raise RunFolderError(f"{path} holds a run with {what}; use another --out, the original flags to resume "
                                 "it, or delete the folder to start over")
    write_json(saved_file, config)


def read_run_config(path: Path, required: tuple[str, ...], experiment: str) -> dict:
    """The settings a run of `experiment` wrote into folder `path`, which must hold `required`."""
    path = Path(path)
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise RunFolderError(f"{path} holds no run: it has no {CONFIG_FILE}; give the folder that {experiment} wrote "
                             "(the folder printed at the end of the run, or the one --out named)")
    config = _read_object(config_file)
    if config is None or not set(required) <= config.keys():
        raise RunFolderError(f"{config_file} is not the settings of a run of {experiment} (a JSON object with "
                             f"{', '.join(required)}); for a new run, give another --out")
    return config


def _read_object(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except ValueError:  # not JSON, or not even UTF-8 text
        return None
    return value if isinstance(value, dict) else None
