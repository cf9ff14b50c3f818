"""Throughput of the program search's enumerator: candidate expressions evaluated per second and
distinct behaviours kept per second, at two sample sizes.

UL in C-RASP[] up to size 9 (--max-size), where no program is found, so both timings cover the
whole enumeration: a small sample (every string up to input length 2, 8
random ones) and the default one of `python -m crasp search` (up to length 3, 24 random). Each
candidate is evaluated on every position of the sample (and on every symbol for s and t);
"kept" counts the distinct values, which is what observational equivalence saves. The search
itself also tests the Booleans as outputs, leaves and guards: the last column times the
enumeration with those tests.

    python benchmarks/search.py [--task UL] [--fragment none] [--max-size 9]
"""

from __future__ import annotations

import argparse
import time

from crasp.search.driver import Search
from crasp.search.enumerate import Budget, Enumerator
from crasp.search.grammar import Grammar
from crasp.search.options import SampleOptions, SearchOptions
from crasp.search.sample import build_sample
from crasp.tasks import get_task

SAMPLES = (("small", SampleOptions(exhaustive_length=2, random_strings=8)), ("default", SampleOptions()))


def enumerate_only(task, grammar: Grammar, options: SampleOptions, max_size: int):
    sample = build_sample(task, options)
    enumerator = Enumerator(grammar, sample, max_size, Budget())
    started = time.perf_counter()
    for size in range(1, max_size + 1):
        enumerator.run_level(size)
    seconds = time.perf_counter() - started
    levels = enumerator.levels.values()
    evaluated, kept = sum(level.evaluated for level in levels), sum(level.behaviours for level in levels)
    return sample, evaluated, kept, seconds, enumerator.memory_bytes


def with_tests(task, grammar: Grammar, options: SampleOptions, max_size: int) -> float:
    """Seconds for the same enumeration inside the search (outputs, leaves and guards tested);
    the search stops early if it finds and verifies a program."""
    started = time.perf_counter()
    Search(task, grammar, SearchOptions(max_size=max_size, sample=options)).run()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="UL")
    parser.add_argument("--fragment", default="none")
    parser.add_argument("--max-size", type=int, default=9)
    args = parser.parse_args()
    task, grammar = get_task(args.task), Grammar(args.fragment)
    print(f"{args.task} in {grammar.title}, sizes 1 to {args.max_size}")
    print(
        f"{'sample':<8} | {'positions':>9} | {'evaluated':>11} | {'kept':>10} | {'seconds':>7} | "
        f"{'evaluated/s':>11} | {'kept/s':>9} | {'kept MiB':>8} | {'with tests s':>12}"
    )
    for name, options in SAMPLES:
        sample, evaluated, kept, seconds, memory = enumerate_only(task, grammar, options, args.max_size)
        tested = with_tests(task, grammar, options, args.max_size)
        print(
            f"{name:<8} | {sample.positions:>9,} | {evaluated:>11,} | {kept:>10,} | {seconds:>7.1f} | "
            f"{evaluated / seconds:>11,.0f} | {kept / seconds:>9,.0f} | {memory / 2**20:>8.0f} | {tested:>12.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
