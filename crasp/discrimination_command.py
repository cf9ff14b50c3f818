"""`python -m crasp discriminates TASK --train-lengths LO HI --bins A-B ...` (crasp.discrimination)."""

from __future__ import annotations

import argparse
import sys

from crasp.discrimination import (
    DEFAULT_STRINGS,
    DEFAULT_THRESHOLD,
    DEFAULT_TRAINING_SAMPLES,
    SAMPLERS,
    Request,
    discriminate,
    format_table,
    task_with_sampler,
)

DEFAULT_SEARCH_SECONDS = 60.0


def length_bin(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(part) for part in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a bin is two lengths joined by '-', like 31-40; got {text!r}") from None
    return lo, hi


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="a task code (python -m crasp tasks lists them)")
    parser.add_argument(
        "--train-lengths",
        type=int,
        nargs=2,
        required=True,
        metavar=("LO", "HI"),
        help="the training lengths, both ends included: the approximations must be exact there, "
        "and HI is the bound L they may use",
    )
    parser.add_argument(
        "--bins",
        type=length_bin,
        nargs="+",
        required=True,
        metavar="A-B",
        help="test bins, like 31-40 61-80 (both ends included, longer than the training lengths)",
    )
    parser.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default="paper",
        help="paper: the task's own sampler; official: the official code's (UL and UR over 5 symbols; "
        "for NLFirst, NRFirst, NLLast, NRLast i.i.d. contexts, NLLast's last occurrence never the final "
        "slot); spread (NLFirst, NRFirst, NLLast, NRLast): k uniform in 2..n/2 occurrences, the "
        "retrieved one at a uniform distance D from its end; repeat-break (NF, NB): beyond the training "
        "lengths, a periodic stretch, a token that breaks the period, then up to 4 i.i.d. tokens "
        "(default paper)",
    )
    parser.add_argument(
        "--far-cells",
        action="store_true",
        help="score only strings with D >= L and k > L (non-unique retrieval; bins from 2L+1)",
    )
    parser.add_argument(
        "--strings",
        type=int,
        default=DEFAULT_STRINGS,
        help=f"strings per test bin, spread over its lengths (default {DEFAULT_STRINGS})",
    )
    parser.add_argument(
        "--training-samples",
        type=int,
        default=DEFAULT_TRAINING_SAMPLES,
        help="random strings per training length checked after every short string "
        f"(default {DEFAULT_TRAINING_SAMPLES})",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"the verdict threshold a bin is passed at (default {DEFAULT_THRESHOLD})",
    )
    parser.add_argument(
        "--search-seconds",
        type=float,
        default=DEFAULT_SEARCH_SECONDS,
        help="seconds for `crasp search` in C-RASP[periodic, local] for a program exact on the "
        f"training lengths; 0 skips it (default {DEFAULT_SEARCH_SECONDS:g})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random strings (default 0)")


def run(args) -> int:
    request = Request(
        task_with_sampler(args.task, args.sampler, args.train_lengths[1]),
        tuple(args.train_lengths),
        tuple(args.bins),
        threshold=args.threshold,
        strings=args.strings,
        training_samples=args.training_samples,
        far_only=args.far_cells,
        search_seconds=args.search_seconds,
        seed=args.seed,
    )
    rows = discriminate(request, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_table(rows, request))
    return 0
