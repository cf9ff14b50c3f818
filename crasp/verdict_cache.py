"""Witness verdicts kept between runs: each prediction rests on verifying the task's witnesses, about
a second for the whole task library (it was 18-77 s before the evaluator's fast paths of issue 64:
docs/performance.md), which `python -m crasp tasks` and every report that prints a prediction would
otherwise pay on each call.

A verdict is kept under a key naming everything it depends on: the task, the witness as program
text, the settings of the check, and the source of the crasp package (the tasks and their
samplers, the evaluator, the checker, the witnesses: an edit to any of them may change a verdict,
so after one every witness is verified again). The file is verified-witnesses.json in the folder
$CRASP_CACHE_DIR names, by default crasp-lab in $XDG_CACHE_HOME (itself by default ~/.cache),
written in one step. A cache that is missing, damaged or not writable costs the verification and
nothing else: the verdicts are then computed as if it were empty.

Why a cache, and not verification in `crasp check` alone: every prediction the lab prints (the
tasks table, each run's report) then still rests on a witness verified under the code that runs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from crasp.output_files import write_text_in_one_step

PACKAGE = Path(__file__).parent
FOLDER_VARIABLE = "CRASP_CACHE_DIR"
SOURCES_KEPT = 4  # the verdicts of this many versions of the crasp source stay in the file


def cache_file() -> Path:
    folder = (
        os.environ.get(FOLDER_VARIABLE)
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crasp-lab"
    )
    return Path(folder) / "verified-witnesses.json"


@lru_cache(maxsize=None)
def source_fingerprint() -> str:
    """A digest of every Python file of the crasp package, by path and content."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _read(path: Path) -> dict[str, dict[str, bool]]:
    """Verdicts by source fingerprint, then by key; {} for a file that is not such an object."""
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    valid = isinstance(kept, dict) and all(
        isinstance(verdicts, dict) and all(isinstance(v, bool) for v in verdicts.values()) for verdicts in kept.values()
    )
    return kept if valid else {}


def cached_verdict(description: tuple[str, ...], verify: Callable[[], bool]) -> bool:
    """The verdict kept for `description` under this crasp source, or `verify()` (then kept)."""
    source, key = source_fingerprint(), hashlib.sha256(json.dumps(description).encode()).hexdigest()
    path = cache_file()
    verdict = _read(path).get(source, {}).get(key)
    if verdict is None:
        verdict = verify()
        # Read again just before writing: verdicts another process kept meanwhile stay. Only the
        # SOURCES_KEPT sources written last stay (several checkouts may share one cache).
        kept = _read(path)
        verdicts = {**kept.pop(source, {}), key: verdict}
        kept = dict(list(kept.items())[-(SOURCES_KEPT - 1) :]) | {source: verdicts}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_in_one_step(path, json.dumps(kept))
        except OSError:
            pass  # an unwritable cache: the verdict is computed again next time
    return verdict
