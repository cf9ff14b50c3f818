"""Argument types and the help formatter of the experiment scripts."""

from __future__ import annotations

import argparse
from collections.abc import Callable


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The script's docstring as written, and every flag's default."""


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def length_bins(text: str) -> tuple[tuple[int, int], ...]:
    """An argparse type: inclusive length bins written LO-HI,LO-HI,... (e.g. 1-10,11-20)."""
    try:
        bins = tuple(tuple(int(x) for x in part.split("-")) for part in text.split(","))
        if any(len(b) != 2 for b in bins):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LO-HI,LO-HI,... such as 1-10,11-20,21-30") from None
    return bins


def add_length_flags(group, example_bins: str) -> None:
    """--train-lengths LO HI and --test-bins LO-HI,...: the length ranges of a training run."""
    group.add_argument("--train-lengths", type=int, nargs=2, default=None, metavar=("LO", "HI"),
                       help="training input lengths, inclusive. Without --test-bins, the test bins are the preset's "
                            "moved with them: the first is this range, each later one keeps its upper end's ratio to "
                            "the longest training length (quick: --train-lengths 1 30 tests 1-30, 31-45, 46-60)")
    group.add_argument("--test-bins", type=length_bins, default=None, metavar="LO-HI,...",
                       help=f"test bins, the first one the training range, each later one beyond the one before, e.g. "
                            f"{example_bins}")


def add_setting_flags(group, flags: dict[str, tuple[type, str]], choices: dict[str, tuple] | None = None) -> None:
    """One --flag-name per setting (train.config.command_line_settings), default None: the preset's."""
    for name, (kind, text) in flags.items():
        group.add_argument(f"--{name.replace('_', '-')}", type=kind, choices=(choices or {}).get(name), default=None,
                           help=text)
