"""Wall time of crasp's commands against the floor of starting Python and importing numpy.

Each command runs --repeats times as a fresh process (python -m crasp ...), with the interpreter
that runs this script, in the current folder (run it from the checkout to time); the table gives
the median and the ratio to `python -c "import numpy"`, the least any crasp command costs. `crasp
tasks` is timed twice: its first call in an empty cache folder (CRASP_CACHE_DIR pointed at a fresh
temporary folder, so the user's cache is neither read nor touched), which verifies every witness,
and the calls after it, which read the verified witnesses from that cache. No assertion: the
numbers are for a reader who compares them with the same table on another checkout or machine.

    python benchmarks/cli.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The README's examples; `run` traces its unique_copy example.
COMMANDS = {
    "import numpy (floor)": ["-c", "import numpy"],
    "crasp --help": ["-m", "crasp", "--help"],
    "crasp tasks": ["-m", "crasp", "tasks"],
    "crasp run unique_copy": ["-m", "crasp", "run", "unique_copy", "--input", "<bos> c a f b <sep> c a f b <eos>"],
    "crasp check UR": ["-m", "crasp", "check", "UR"],
}


def wall_seconds(arguments: list[str], environment: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, *arguments], env=environment, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command; the median is shown (default 5)")
    args = parser.parse_args()
    print(f"python: {sys.executable}\nfolder: {os.getcwd()}\nload average: {os.getloadavg()[0]:.2f} (1 min)")
    with tempfile.TemporaryDirectory() as cache:
        environment = {**os.environ, "CRASP_CACHE_DIR": cache}
        first_tasks = wall_seconds(COMMANDS["crasp tasks"], environment)
        medians = {
            name: statistics.median(wall_seconds(arguments, environment) for _ in range(args.repeats))
            for name, arguments in COMMANDS.items()
        }
    floor = medians["import numpy (floor)"]
    rows = [("crasp tasks, first call (empty cache)", first_tasks)] + list(medians.items())
    width = max(len(name) for name, _ in rows)
    print(f"\n{'command':<{width}} | seconds (median of {args.repeats}) | x floor")
    for name, seconds in rows:
        print(f"{name:<{width}} | {seconds:>25.2f} | {seconds / floor:>7.1f}")


if __name__ == "__main__":
    main()
