"""The wall time of each invocation that trains a run (`<run>/invocations.jsonl`, one record each),
kept current while it trains.

An invocation writes its record when it starts and rewrites it every `HEARTBEAT_S` seconds, marked
`in_progress`, then once more when it ends (normally, by Ctrl-C, SIGTERM or an error), without the
mark. A process killed outright (SIGKILL, the machine or the session going away) cannot write that
last record, so its time was lost before; now its record stays, marked, with its time up to its
last heartbeat. A report reads such a record as "no end recorded": killed, or still running.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from crasplab.records.files import read_jsonl, write_jsonl

# One line per invocation of experiments/length_gen.py that trained, so that the time a report
# states is read from the run's files.
INVOCATIONS_FILE = "invocations.jsonl"
# How often a running invocation rewrites its record: the most time a killed one can lose.
HEARTBEAT_S = 60.0


@dataclass
class InvocationRecord:
    """One invocation's record, updated by the code that trains: `jobs` (how many it ran) and
    `finished` (whether it ended with every job done)."""

    workers: str
    jobs: int = 0
    finished: bool = False
    started: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    start_s: float = field(default_factory=time.monotonic)

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self.start_s

    def record(self, in_progress: bool) -> dict:
        record = dict(
            started=self.started,
            wall_s=round(self.wall_s, 1),
            jobs=self.jobs,
            workers=self.workers,
            finished=self.finished,
        )
        return dict(record, in_progress=True) if in_progress else record


@contextlib.contextmanager
def recorded_invocation(run_dir: Path, workers: str, heartbeat_s: float = HEARTBEAT_S) -> Iterator[InvocationRecord]:
    """Keep this invocation's record in `run_dir/invocations.jsonl` while the body runs, and write
    its final record however the body ends. The caller holds the run folder's lock, so no other
    process writes the file meanwhile."""
    path = Path(run_dir) / INVOCATIONS_FILE
    earlier = read_jsonl(path)
    invocation = InvocationRecord(workers)
    write = lambda in_progress: write_jsonl(path, [*earlier, invocation.record(in_progress)])  # noqa: E731
    write(True)
    ended = threading.Event()

    def heartbeat() -> None:
        while not ended.wait(heartbeat_s):
            write(True)

    beating = threading.Thread(target=heartbeat, name="invocation heartbeat", daemon=True)
    beating.start()
    try:
        yield invocation
    finally:
        ended.set()
        beating.join()
        write(False)
