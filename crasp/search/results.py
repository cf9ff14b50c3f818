"""Recorded search outcomes (crasp/search_results.json), which crasp.prediction reads.

One record per task and fragment. A found program is kept as text (it names no task symbol, so
it is re-targeted to any alphabet by rewriting its `alphabet:` line); an exhausted search keeps
its claim. A record is replaced only by a stronger one (see Record.stronger_than).

The file is read by every prediction, so it is never left half written: `save` reads, merges and
writes it under an exclusive lock on a sibling lock file (two `--record` runs at once both keep
their records), into a temporary file that replaces it in one step. A damaged file is a
SearchResultsError that names it and says how to restore it, never a traceback."""

from __future__ import annotations

import dataclasses
import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from crasp.output_files import write_text_in_one_step
from crasp.program import Program
from crasp.search.driver import SearchOutcome
from crasp.tasks.base import PROGRAM_SPECIALS
from crasp.search.options import RESULTS_PATH, SearchError
from crasp.search.report import claim
from crasp.syntax import parse


@dataclass(frozen=True)
class Record:
    task: str
    fragment: str
    command: str
    seconds: float
    complete_through: int  # sizes enumerated completely (in the last round)
    behaviours: list[int]  # distinct behaviours per size, from size 1
    program: str | None = None  # the found program's text
    size: int | None = None  # its size
    claim: str | None = None  # what an exhausted search shows

    @property
    def key(self) -> str:
        return f"{self.task} {self.fragment}"

    def make_witness(self) -> Callable[[tuple[str, ...]], Program]:
        """make(symbols) -> the found program over <bos> <sep> <eos> + symbols."""
        lines = self.program.splitlines()
        at = next(k for k, line in enumerate(lines) if line.startswith("alphabet:"))

        def make(symbols) -> Program:
            lines[at] = "alphabet: " + " ".join(PROGRAM_SPECIALS + tuple(symbols))
            return parse("\n".join(lines) + "\n", f"search result {self.key}")

        make.__name__ = f"found_by_search_size_{self.size}"
        return make

    def stronger_than(self, other: "Record") -> bool:
        """A program beats a claim; a smaller program, or a claim up to a larger size, beats its kind."""
        if (self.program is None) != (other.program is None):
            return self.program is not None
        if self.program is not None:
            return self.size < other.size
        return self.complete_through > other.complete_through


def record_of(outcome: SearchOutcome, command: str) -> Record:
    levels = [level for level in outcome.levels if level.complete]
    common = dict(
        task=outcome.task.code,
        fragment=outcome.grammar.fragment,
        command=command,
        seconds=round(outcome.seconds, 1),
        complete_through=outcome.complete_through,
        behaviours=[level.behaviours for level in levels],
    )
    if outcome.discovery is not None:
        return Record(**common, program=outcome.discovery.generic_text, size=outcome.discovery.size)
    return Record(**common, claim=claim(outcome))


class SearchResultsError(SearchError):
    """The recorded search results cannot be read: the message names the file and the remedy."""


RECORD_FIELDS = frozenset(field.name for field in dataclasses.fields(Record))


def _damaged(path: Path, problem: str) -> SearchResultsError:
    return SearchResultsError(
        f"{path}: {problem}; the recorded search results cannot be read. Restore the file "
        f"(git checkout -- {path.name} in its folder) or delete it and record the searches "
        "again with `python -m crasp search TASK --record`"
    )


def load(path: Path | None = None) -> dict[str, Record]:
    path = path or RESULTS_PATH
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:
        raise _damaged(path, f"unreadable ({error})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise _damaged(path, f"not valid JSON at line {error.lineno}, column {error.colno} ({error.msg})") from None
    if not isinstance(data, dict):
        raise _damaged(path, f"holds a JSON {type(data).__name__}, not an object of records")
    records = {}
    for key, fields in data.items():
        if not isinstance(fields, dict) or set(fields) != RECORD_FIELDS:
            raise _damaged(
                path, f"record {key!r} is not an object with exactly the fields {', '.join(sorted(RECORD_FIELDS))}"
            )
        records[key] = Record(**fields)
    return records


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s sibling lock file (the file itself is replaced, so it
    cannot carry the lock)."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def save(record: Record, path: Path | None = None) -> bool:
    """Add the record unless a stronger one for the same task and fragment exists; True if added."""
    path = path or RESULTS_PATH
    with _locked(path):
        records = load(path)
        known = records.get(record.key)
        if known is not None and not record.stronger_than(known):
            return False
        records[record.key] = record
        write_text_in_one_step(path, json.dumps({k: r.__dict__ for k, r in sorted(records.items())}, indent=1) + "\n")
    return True
