"""Throughput of the fast evaluator, teacher-forced, against the reference evaluator side by side.

Majority over 26 letters and unique copy forward (UF) over 150 symbols, 10,000 strings of input
length 150 each (the issue's sizes; --strings to change). Prints token-positions per second, the
peak memory of the evaluation (tracemalloc: numpy's buffers included), and the ratio to the slow
reference evaluator measured on a few strings of the same task in the same run.

    python benchmarks/interpreter.py [--strings 10000] [--length 150]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from crasp.check import to_program_ids
from crasp.nexttoken import check_teacher_forced
from crasp.reference import reference_value
from crasp.tasks import get_task
from crasp.witnesses import copy_forward, majority

REFERENCE_STRINGS = 2


def fast_throughput(task, program, n: int, length: int) -> tuple[float, float, float]:
    examples = task.sample(np.random.default_rng(0), n, length)
    tokens = to_program_ids(examples.tokens, task.vocab, program)
    tracemalloc.start()
    started = time.perf_counter()
    result = check_teacher_forced(program, tokens, examples.prompt_lengths, examples.lengths)
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.correct.all(), "the witness must agree with the task on every benchmark string"
    return tokens.size / seconds, peak / 2**30, seconds


def reference_throughput(task, program, length: int) -> float:
    examples = task.sample(np.random.default_rng(1), REFERENCE_STRINGS, length)
    output = program.target
    started, positions = time.perf_counter(), 0
    for row in range(REFERENCE_STRINGS):
        string = [task.vocab[k] for k in examples.tokens[row, : examples.lengths[row]]]
        for i in range(examples.prompt_lengths[row], examples.lengths[row]):
            for symbol in program.alphabet:
                reference_value(program, string, output.use(symbol), i, {})
        positions += len(string)
    return positions / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strings", type=int, default=10_000, help="strings per task (default 10000)")
    parser.add_argument("--length", type=int, default=150, help="input length of every string (default 150)")
    parser.add_argument(
        "--reference-length", type=int, default=30, help="input length for the slow reference baseline (default 30)"
    )
    args = parser.parse_args()
    cases = [
        ("Majority, 26 letters", get_task("Majority"), majority, 1e6),
        ("UF, 150 symbols", get_task("UF"), copy_forward, 1e5),
    ]
    print(
        f"{'program':<22} | {'token-positions/s':>17} | {'target':>8} | {'peak GiB':>8} | {'seconds':>7} | "
        f"{'reference tok-pos/s':>19} | speed-up"
    )
    for name, task, make, target in cases:
        program = make(task.symbols)
        fast, peak, seconds = fast_throughput(task, program, args.strings, args.length)
        slow = reference_throughput(task, program, args.reference_length)
        print(
            f"{name:<22} | {fast:>17,.0f} | {target:>8.0e} | {peak:>8.2f} | {seconds:>7.1f} | "
            f"{slow:>19,.0f} | {fast / slow:>7,.0f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
