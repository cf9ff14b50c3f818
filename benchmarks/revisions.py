"""An earlier commit's crasp package beside this checkout's, for benchmarks that compare the two.

Each side runs in its own worker process (the same benchmark script, started with `--serve ...` and the
side's import root first on PYTHONPATH), so both packages are imported under their own name, crasp;
the benchmark sends one request per line and each worker answers one JSON line, so the two sides are
measured interleaved under the same load on the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def checkout_of(revision: str, folder: Path) -> Path:
    """The crasp package of `revision` extracted under folder; folder is then its import root."""
    archive = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", revision, "crasp"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"--against {revision}: git archive failed: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def serve(answer) -> None:
    """The worker's loop: `answer(request line)` for each line on stdin, printed as one JSON line."""
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(answer(line.strip())), flush=True)


class Worker:
    """`script --serve *serve_args` importing crasp from import_root; ask() sends a request line."""

    def __init__(self, script: str, import_root: Path, serve_args: list[str]):
        environment = dict(os.environ, PYTHONPATH=str(import_root))
        command = [sys.executable, str(Path(script).resolve()), "--serve", *serve_args]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environment
        )
        if self.process.stdout.readline().strip() != "ready":
            raise SystemExit(f"the benchmark worker importing crasp from {import_root} did not start")

    def ask(self, request: str):
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise SystemExit(f"the benchmark worker ended on {request!r} (its error is above)")
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()
