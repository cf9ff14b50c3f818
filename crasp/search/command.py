"""`python -m crasp search`: options, progress and printing around crasp.search.driver."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crasp.output_files import OVERWRITE_FLAG, OVERWRITE_HELP, check_output_file, write_output_file
from crasp.search.grammar import FRAGMENTS, Grammar
from crasp.search.options import RESULTS_PATH, SampleOptions, SearchOptions

DEFAULTS, SAMPLE = SearchOptions(), SampleOptions()
# flag, type ("integers": a comma-separated list), default, help
OPTIONS = (
    ("--offsets", "integers", (1,), "distances c of local counts #[j <= i, j = i - c], comma-separated"),
    ("--moduli", "integers", (2, 3), "m of MOD(m, r), comma-separated"),
    ("--constants", "integers", (0, 1, 2), "integer constants, comma-separated"),
    ("--max-size", int, DEFAULTS.max_size, "largest expression size enumerated"),
    ("--time-limit", float, DEFAULTS.time_limit, "CPU seconds for the whole search, verification included"),
    ("--max-behaviours", int, DEFAULTS.max_behaviours, "stop after keeping this many distinct behaviours"),
    ("--memory", float, DEFAULTS.memory_gib, "GiB of kept values before stopping"),
    ("--sample-alphabet", int, SAMPLE.alphabet, "task symbols of the sample strings"),
    ("--exhaustive-length", int, SAMPLE.exhaustive_length, "the sample holds every string up to this input length"),
    ("--random-strings", int, SAMPLE.random_strings, "random longer strings in the sample"),
    ("--seed", int, SAMPLE.seed, "seed of the random strings"),
)


def integers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, like 1,2; got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="a task code (python -m crasp tasks lists them)")
    parser.add_argument(
        "--fragment",
        choices=FRAGMENTS,
        default="none",
        help="none = C-RASP[], local, periodic, all = C-RASP[periodic, local] (default none)",
    )
    for flag, kind, default, text in OPTIONS:
        shown = ",".join(map(str, default)) if kind == "integers" else "%(default)s"
        parser.add_argument(
            flag, type=integers if kind == "integers" else kind, default=default, help=f"{text} (default {shown})"
        )
    parser.add_argument("--save", type=Path, help="write the program found to this .crasp file (a new one)")
    parser.add_argument(OVERWRITE_FLAG, action="store_true", help=OVERWRITE_HELP)
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"record the outcome in {RESULTS_PATH.name}, where the predictions read it",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def command_line(args) -> str:
    """The command that repeats this search (every option that shapes it)."""
    parts = [f"python -m crasp search {args.task} --fragment {args.fragment} --max-size {args.max_size}"]
    if args.fragment in ("local", "all"):
        parts.append("--offsets " + ",".join(map(str, args.offsets)))
    if args.fragment in ("periodic", "all"):
        parts.append("--moduli " + ",".join(map(str, args.moduli)))
    parts.append("--constants " + ",".join(map(str, args.constants)))
    parts.append(
        f"--sample-alphabet {args.sample_alphabet} --exhaustive-length {args.exhaustive_length} "
        f"--random-strings {args.random_strings} --seed {args.seed}"
    )
    return " ".join(parts)


class Progress:
    """One progress bar per size on stderr (tqdm hides it when stderr is not a terminal)."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar = enabled, None

    def start(self, size: int, planned: int) -> None:
        from tqdm import tqdm

        self.close()
        self.bar = tqdm(
            total=planned,
            desc=f"size {size}",
            unit="expr",
            unit_scale=True,
            leave=False,
            file=sys.stderr,
            disable=None if self.enabled else True,
        )

    def update(self, candidates: int) -> None:
        if self.bar is not None:
            self.bar.update(candidates)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def run(args) -> int:
    from crasp.search.driver import search
    from crasp.search.report import level_line, summary
    from crasp.search.results import record_of, save
    from crasp.tasks import get_task

    task = get_task(args.task)
    if args.save:  # before the search: a mistyped folder must not cost the whole search
        check_output_file(args.save, "--save", overwrite=args.overwrite)
    grammar = Grammar(args.fragment, offsets=args.offsets, moduli=args.moduli, constants=args.constants)
    sample = SampleOptions(
        alphabet=args.sample_alphabet,
        exhaustive_length=args.exhaustive_length,
        random_strings=args.random_strings,
        seed=args.seed,
    )
    options = SearchOptions(
        max_size=args.max_size,
        time_limit=args.time_limit,
        max_behaviours=args.max_behaviours,
        memory_gib=args.memory,
        sample=sample,
    )
    print(f"search {task.code} in {grammar.title}, sizes 1 to {options.max_size}, at most {options.time_limit:g} s")
    print(f"grammar: {grammar.describe()}", flush=True)
    progress = Progress(not args.no_progress)

    def on_level(level) -> None:
        progress.close()
        print(level_line(level), flush=True)

    try:
        outcome = search(
            task, grammar, options, on_level=on_level, progress=progress.update, on_level_start=progress.start
        )
    finally:
        progress.close()
    unfinished = [level for level in outcome.levels if not level.complete]
    for level in unfinished:
        print(level_line(level))
    print(f"sample: {outcome.sample.describe()}")
    print(summary(outcome))
    if args.save:
        if outcome.discovery is None:
            print(f"nothing saved to {args.save}: no program was found")
        else:
            text = outcome.discovery.generic_text
            write_output_file(args.save, "--save", lambda file: file.write(text.encode()), args.overwrite)
            print(f"saved to {args.save}, alphabet-generic (python -m crasp check {task.code} --program {args.save})")
    if args.record:
        recorded = save(record_of(outcome, command_line(args)))
        print(
            f"recorded in {RESULTS_PATH}"
            if recorded
            else f"not recorded: {RESULTS_PATH.name} holds a stronger result for {task.code} in {grammar.title}"
        )
    return 0 if outcome.discovery is not None else 1
