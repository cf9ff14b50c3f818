"""A run's wall time survives every way an invocation ends, a kill included
(crasplab.records.invocations)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from crasplab.records.files import append_jsonl, read_jsonl
from crasplab.records.invocations import INVOCATIONS_FILE, recorded_invocation
from crasplab.reports.length_gen import invocations_markdown

EARLIER = dict(finished=True, jobs=2, started="2026-01-01 00:00 UTC", wall_s=60.0, workers="2 pinned CPU workers")


def test_a_killed_invocation_keeps_its_time_up_to_its_last_heartbeat(tmp_path):
    """SIGKILL runs no handler and no `finally`: the record written while training is what stays."""
    append_jsonl(tmp_path / INVOCATIONS_FILE, EARLIER)
    script = textwrap.dedent(
        f"""
        import time
        from crasplab.records.invocations import recorded_invocation
        with recorded_invocation({str(tmp_path)!r}, "1 worker", heartbeat_s=0.05) as invocation:
            invocation.jobs = 3
            time.sleep(120)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            records = read_jsonl(tmp_path / INVOCATIONS_FILE)
            if len(records) == 2 and records[1]["wall_s"] >= 0.5:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
    earlier, killed = read_jsonl(tmp_path / INVOCATIONS_FILE)
    assert earlier == EARLIER
    assert killed["in_progress"] is True and killed["finished"] is False
    assert killed["jobs"] == 3 and killed["wall_s"] >= 0.5 and killed["workers"] == "1 worker"
    assert "no end recorded (killed, or still running)" in invocations_markdown([earlier, killed])


@pytest.mark.parametrize("fails", [False, True], ids=["ends", "raises"])
def test_an_ended_invocation_replaces_its_running_record(tmp_path, fails):
    append_jsonl(tmp_path / INVOCATIONS_FILE, EARLIER)
    with pytest.raises(RuntimeError) if fails else contextlib.nullcontext():
        with recorded_invocation(tmp_path, "1 worker") as invocation:
            (running,) = read_jsonl(tmp_path / INVOCATIONS_FILE)[1:]
            assert running["in_progress"] is True  # written as it starts, before any heartbeat
            invocation.jobs, invocation.finished = 4, not fails
            if fails:
                raise RuntimeError("a job failed")
    earlier, ended = read_jsonl(tmp_path / INVOCATIONS_FILE)
    assert earlier == EARLIER
    assert "in_progress" not in ended and ended["jobs"] == 4 and ended["finished"] is (not fails)
    text = invocations_markdown([earlier, ended])
    assert "no end recorded" not in text
    assert ("stopped before its end" in text) is fails
