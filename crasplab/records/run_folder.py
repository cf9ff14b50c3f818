"""The settings file of a run folder: written before anything else, and the guard that keeps a
folder from mixing results of two different commands.

A run is resumed by running the same command again: the folder's `config.json` must then equal
the settings of the new command (except for keys that only change how results are read, such as
a threshold). Everything that could fail is validated by the experiment before `open_run_folder`
is called, so a typo never leaves a folder that the corrected command refuses.

`open_run_folder` also takes the folder's lock (`.lock`, an exclusive flock): a second process
on the same folder is refused at once, instead of both evaluating the same prompts and the
results file holding every record twice. The lock is held until `release_run_folders()` (the
experiment scripts call it when a run ends, through `holding_run_folders`) or the process ends;
opening a folder this process holds again is allowed, so a resumed run in the same process works.
While the lock is held, temporaries that a writer killed mid-write left in the folder are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TextIO, TypeVar

from crasplab.errors import LabError
from crasplab.records.files import (
    ResultFileError,
    cannot_write,
    compress_jsonl,
    is_temporary,
    remove_stale_temporaries,
    write_json,
)
from crasplab.records.settings import Settings

CONFIG_FILE = "config.json"
# The records of the experiments that answer prompts (pretrained, realistic, finetune): one line
# per answered prompt, appended as answers come, so an interrupted run keeps every answer.
RESULTS_FILE = "results.jsonl"
# The JSON-lines logs that grow with a run (a job's metrics, an experiment's answers): a kept copy
# of a run stores them compressed (compress_logs; docs/evidence.md).
LOG_FILES = ("metrics.jsonl", RESULTS_FILE)
LOCK_FILE = ".lock"
_held: dict[Path, TextIO] = {}  # run folder (resolved) -> its open lock file
S = TypeVar("S", bound=Settings)


class RunFolderError(LabError, ValueError):
    """A folder that cannot hold this run, or that holds no run of this experiment."""


def check_output_folder(path: Path, marker: str = CONFIG_FILE, writer: str = "an experiment of the lab") -> Path:
    """`path` as a folder for a command to write: refused when it is a file, or when it holds files
    but not `marker`, the file the command writes first into every folder of its own (an
    experiment's config.json, a compile's compiled.json). The command would otherwise write beside
    the files of something else, or over them; a folder of its own is resumed or rewritten by the
    command (whose own check then refuses one of another run)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"--out {path} is a file; give a folder (a new one, or the folder of a run to resume)")
    if path.is_dir() and not (path / marker).exists():
        others = sorted(entry.name for entry in path.iterdir() if entry.name != LOCK_FILE and not is_temporary(entry))
        if others:
            listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise RunFolderError(
                f"--out {path} holds {listed} and no {marker}: not a folder {writer} wrote, and writing there "
                "would mix its files with those or replace them; give a new or empty folder (or the folder of "
                "a run of this command, to resume it)"
            )
    return path


def compress_logs(folder: Path) -> list[Path]:
    """Store every log (LOG_FILES) under `folder`, at any depth, compressed; return those it compressed."""
    logs = sorted(path for name in LOG_FILES for path in Path(folder).rglob(name) if path.is_file())
    for path in logs:
        compress_jsonl(path)
    return logs


def check_new_folder(path: Path, flag: str = "--out") -> Path:
    """`path` as a folder that a command fills with files of its own: absent or empty (nothing in
    it is replaced without asking), else a RunFolderError naming the flag."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or path.is_symlink() or any(path.iterdir())):
        problem = "is not empty" if path.is_dir() and not path.is_symlink() else "is not a folder"
        raise RunFolderError(f"{flag} {path}: {problem}; give a new folder")
    return path


def lock_run_folder(path: Path) -> None:
    """Take the run folder's lock (creating the folder), or refuse when another process holds it."""
    path = Path(path)
    key = path.resolve()
    if key in _held:
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle = open(path / LOCK_FILE, "a")
    except OSError as error:
        raise RunFolderError(str(cannot_write(path / LOCK_FILE, error))) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise RunFolderError(
            f"{path} is in use by another process (it holds {path / LOCK_FILE}); wait for that run to "
            "end, or give another --out"
        ) from None
    _held[key] = handle


def release_run_folders() -> None:
    """Release every run folder lock this process holds."""
    while _held:
        _held.popitem()[1].close()


@contextlib.contextmanager
def holding_run_folders() -> Iterator[None]:
    """Release, at the end of the block, the run folders the block opened."""
    try:
        yield
    finally:
        release_run_folders()


def open_run_folder(path: Path, config: dict, may_change: tuple[str, ...] = ()) -> None:
    """Lock the folder, remove stale temporaries from it, and write `config` as its settings, or
    refuse when the folder holds a run with other settings (keys in `may_change` excepted; their
    new values are written)."""
    path = check_output_folder(path)
    lock_run_folder(path)
    remove_stale_temporaries(path)
    saved_file = path / CONFIG_FILE
    if saved_file.exists():
        saved = _read_object(saved_file)
        config_as_saved = json.loads(json.dumps(config))  # tuples become lists, as in the file
        changed = [
            f"{name}: {_shown(before)} in the folder, {_shown(now)} now"
            for name, before, now in _changed_settings(saved or {}, config_as_saved)
            if name.split(".")[0] not in may_change
        ]
        if saved is None or changed:
            what = f"different settings ({'; '.join(changed)})" if saved is not None else "an unreadable config.json"
            raise RunFolderError(
                f"{path} holds a run with {what}; use another --out, the original flags to resume "
                "it, or delete the folder to start over"
            )
    try:
        write_json(saved_file, config)
    except ResultFileError as error:
        raise RunFolderError(str(error)) from None


_ABSENT = object()


def _changed_settings(saved: dict, given: dict, prefix: str = "") -> Iterator[tuple[str, object, object]]:
    """(name, value in the folder, value now) of each setting that differs, in name order; settings
    grouped in an object (a job's `train`) named one by one, dotted (`train.max_steps`)."""
    for key in sorted(saved.keys() | given.keys()):
        before, now = saved.get(key, _ABSENT), given.get(key, _ABSENT)
        if isinstance(before, dict) and isinstance(now, dict):
            yield from _changed_settings(before, now, f"{prefix}{key}.")
        elif before != now:
            yield f"{prefix}{key}", before, now


def _shown(value: object) -> str:
    return "absent" if value is _ABSENT else json.dumps(value)


def read_run_config(path: Path, required: tuple[str, ...], experiment: str, upgrade=lambda config: config) -> dict:
    """The settings a run of `experiment` wrote into folder `path`, which must hold `required`
    once `upgrade` has rewritten a file that an earlier version of the experiment wrote."""
    path = Path(path)
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise RunFolderError(
            f"{path} holds no run: it has no {CONFIG_FILE}; give the folder that {experiment} wrote "
            "(the folder printed at the end of the run, or the one --out named)"
        )
    config = _read_object(config_file)
    if config is not None:
        config = upgrade(config)
    if config is None or not set(required) <= config.keys():
        raise RunFolderError(
            f"{config_file} is not the settings of a run of {experiment} (a JSON object with "
            f"{', '.join(required)}); for a new run, give another --out"
        )
    return config


@dataclass(frozen=True)
class RecordedRun(Generic[S]):
    """A run folder's config.json read: the run's settings, checked, and the file as its settings
    type's upgrade_config reads it (`written`): what a summary that records the run's config keeps,
    so that a kept report rebuilds as it was (a setting added later stays absent from it)."""

    settings: S
    written: dict

    @property
    def facts(self) -> dict:
        """What the run recorded beside its settings (such as the model's architecture)."""
        names = self.settings.names()
        return {name: value for name, value in self.written.items() if name not in names}


def read_run_settings(
    path: Path, settings_type: type[S], experiment: str, facts: tuple[str, ...] = ()
) -> RecordedRun[S]:
    """read_run_config for a run whose settings are `settings_type`: the file must hold each of
    them, of the right kind and in range (a hand-edited file is refused here, not deep in a
    report), and the `facts` the run recorded beside them (such as the model's architecture)."""
    config = read_run_config(path, settings_type.recorded() + facts, experiment, settings_type.upgrade_config)
    names = settings_type.names()
    try:
        settings = settings_type.from_dict({name: value for name, value in config.items() if name in names})
    except ValueError as error:  # SettingsError, or a check of a nested type (a TaskError, a SettingsError)
        raise RunFolderError(
            f"{Path(path) / CONFIG_FILE}: {error}. The file is not as {experiment} wrote it: restore "
            "it, or run the experiment again into another --out"
        ) from None
    return RecordedRun(settings, config)


def _read_object(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (ValueError, RecursionError):  # not JSON, not even UTF-8 text, or nested beyond the parser
        return None
    return value if isinstance(value, dict) else None
