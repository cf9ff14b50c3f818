"""The tracked tree's size, by kind, against its budget. Every tracked file travels to a lent GPU
(whose carry limit is 64 MiB for everything carried), and the developers' guide keeps the tree
under 24 MiB, so that the paper-scale runs still to be kept fit beside the code
(docs/evidence.md). tests/test_evidence_size.py holds the budget.

    python benchmarks/tracked_size.py

Prints the total against the budget, then bytes and files by kind, largest first: a kept run's
files (evidence/) by file name, every other file by its top-level folder.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_BYTES = 24 * 2**20
SHOWN_KINDS = 15


def tracked_sizes(root: Path = ROOT) -> dict[str, int] | None:
    """Bytes of each file git tracks in the checkout `root` (a file deleted but not yet staged left
    out), or None where `root` is not the top of a git checkout (a copy without .git) or git is missing."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
            return None
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    sizes = {}
    for name in filter(None, listed.decode().split("\0")):
        try:
            sizes[name] = os.lstat(root / name).st_size
        except FileNotFoundError:
            continue
    return sizes


def kind(name: str) -> str:
    """What a tracked file is counted as: evidence/**/<file name>, or its top-level folder."""
    parts = name.split("/")
    if parts[0] == "evidence" and len(parts) > 2:
        return f"evidence/**/{parts[-1]}"
    return f"{parts[0]}/" if len(parts) > 1 else parts[0]


def size_table(sizes: dict[str, int], budget: int = BUDGET_BYTES, shown: int = SHOWN_KINDS) -> str:
    """The total against the budget, then the `shown` largest kinds and the rest together."""
    total, by_kind, files = sum(sizes.values()), Counter(), Counter()
    for name, size in sizes.items():
        by_kind[kind(name)] += size
        files[kind(name)] += 1
    lines = [
        f"tracked: {total / 2**20:.1f} MiB in {len(sizes)} files; budget {budget / 2**20:.0f} MiB "
        f"({100 * total / budget:.0f}% used)",
        f"{'MiB':>7} {'files':>6}  kind",
    ]
    ranked = by_kind.most_common()
    lines += [f"{size / 2**20:7.2f} {files[name]:6d}  {name}" for name, size in ranked[:shown]]
    if rest := ranked[shown:]:
        rest_files = sum(files[name] for name, _ in rest)
        lines.append(f"{sum(size for _, size in rest) / 2**20:7.2f} {rest_files:6d}  {len(rest)} other kinds")
    return "\n".join(lines)


def main() -> None:
    sizes = tracked_sizes()
    if sizes is None:
        raise SystemExit(f"error: {ROOT} is not a git checkout (or git is missing): nothing says what is tracked")
    print(size_table(sizes))


if __name__ == "__main__":
    main()
