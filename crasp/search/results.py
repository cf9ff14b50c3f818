"""Recorded search outcomes (crasp/search_results.json), which crasp.prediction reads.

One record per task and fragment. A found program is kept as text (it names no task symbol, so
it is re-targeted to any alphabet by rewriting its `alphabet:` line); an exhausted search keeps
its claim. A record is replaced only by a stronger one (see Record.stronger_than)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from crasp.program import Program
from crasp.search.driver import SearchOutcome
from crasp.tasks.base import PROGRAM_SPECIALS
from crasp.search.options import RESULTS_PATH
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
    common = dict(task=outcome.task.code, fragment=outcome.grammar.fragment, command=command,
                  seconds=round(outcome.seconds, 1), complete_through=outcome.complete_through,
                  behaviours=[level.behaviours for level in levels])
    if outcome.discovery is not None:
        return Record(**common, program=outcome.discovery.text, size=outcome.discovery.size)
    return Record(**common, claim=claim(outcome))


def load(path: Path | None = None) -> dict[str, Record]:
    path = path or RESULTS_PATH
    if not path.exists():
        return {}
    return {key: Record(**data) for key, data in json.loads(path.read_text()).items()}


def save(record: Record, path: Path | None = None) -> bool:
    """Add the record unless a stronger one for the same task and fragment exists; True if added."""
    path = path or RESULTS_PATH
    records = load(path)
    known = records.get(record.key)
    if known is not None and not record.stronger_than(known):
        return False
    records[record.key] = record
    path.write_text(json.dumps({k: r.__dict__ for k, r in sorted(records.items())}, indent=1) + "\n")
    return True
