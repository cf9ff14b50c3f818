"""The command line of the benchmarks that time the lab's preset models side by side with a
baseline: which presets' models, and how many rounds (the median is reported).

The benchmarks in this folder import it as a sibling module (they run as scripts, so this
folder is on sys.path).
"""

from __future__ import annotations

import argparse

from crasplab.cli.arguments import at_least
from crasplab.train.config import PRESETS


def preset_rounds_parser(description: str, presets_help: str, rounds: int, rounds_help: str) -> argparse.ArgumentParser:
    """A parser with --presets (default: the quick and paper models) and --rounds (at least 1)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["quick", "paper"], choices=sorted(PRESETS), help=presets_help)
    parser.add_argument("--rounds", type=at_least(1), default=rounds, help=rounds_help)
    return parser
