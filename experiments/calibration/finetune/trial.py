"""One calibration trial of experiments/finetune.py: run it with the given flags under
/usr/bin/time, then record what the run folder and the timer say in evidence/finetune/trials.jsonl.

    python experiments/calibration/finetune/trial.py NAME -- --model smollm2 --tasks UB --max-steps 20 ...

Recorded: the flags, peak resident memory (the process's VmHWM, as /usr/bin/time reports it),
wall time, seconds per training step after the first logging window (which holds the
compilation), tokens per step, the load average at the end (the machine is shared), and the
accuracy per task, stage and bin from summary.json.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TRIALS = ROOT / "evidence" / "finetune" / "trials.jsonl"


def step_seconds(run_dir: Path, task: str) -> dict:
    """Seconds and tokens per step between the first and the last training record."""
    records = [json.loads(line) for line in (run_dir / task / "seed0" / "metrics.jsonl").read_text().splitlines()]
    first, last = records[0], records[-1]
    steps = last["step"] - first["step"]
    return dict(
        compile_window_s=first["elapsed_s"],
        seconds_per_step=round((last["elapsed_s"] - first["elapsed_s"]) / steps, 2),
        tokens_per_step=round((last["tokens"] - first["tokens"]) / steps, 1),
        final_loss=last["loss"],
    )


def main() -> None:
    name, separator, *flags = sys.argv[1:]
    assert separator == "--", "usage: trial.py NAME -- FLAGS..."
    run_dir = Path("/tmp/ft/trials") / name
    command = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "experiments/finetune.py",
        *flags,
        "--out",
        str(run_dir),
        "--no-progress",
    ]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall_s = time.monotonic() - started
    if done.returncode:
        sys.exit(done.stderr[-3000:])
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    summary = json.loads((run_dir / "summary.json").read_text())
    record = dict(
        name=name,
        flags=flags,
        wall_s=round(wall_s, 1),
        peak_rss_gb=round(peak_kb / 1e6, 2),
        load_average=os.getloadavg()[0],
        steps={row["task"]: step_seconds(run_dir, row["task"]) for row in summary["rows"]},
        accuracy={
            row["task"]: {
                stage: [None if b is None else round(b["accuracy"], 3) for b in row[stage]]
                for stage in ("before", "after")
            }
            for row in summary["rows"]
        },
        bins=summary["bins"],
    )
    with open(TRIALS, "a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
