"""Throughput of the fast evaluator, teacher-forced, against the reference evaluator side by side.

Majority over 26 letters and unique copy forward (UF) over 150 symbols, 10,000 strings of input
length 150 each (the issue's sizes; --strings to change). Prints token-positions per second, the
peak memory of the evaluation (tracemalloc: numpy's buffers included), and the ratio to the slow
reference evaluator measured on a few strings of the same task in the same run.

    python benchmarks/interpreter.py [--strings 10000] [--length 150]

With --against REV it instead compares this checkout's evaluator with commit REV's (its crasp
package from `git archive`, in a worker process beside one running this checkout's: revisions.py)
on the same strings: the two run interleaved, --repeats rounds, and the best of each is kept. Both wall time
and CPU time are printed; CPU time is the steadier of the two on a loaded machine.

    python benchmarks/interpreter.py --against 429f086 --strings 2000

With --profile it prints where each check's CPU time goes (cProfile, the functions that take most).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from revisions import REPOSITORY, Worker, checkout_of, serve

REFERENCE_STRINGS = 2
PROFILE_ROWS = 10
# Task name -> (label, witness function in crasp.witnesses, target token-positions/s): every
# commit since 429f086 names them alike, which --against relies on.
CASES = {
    "Majority": ("Majority, 26 letters", "majority", 1e6),
    "UF": ("UF, 150 symbols", "copy_forward", 1e5),
}


def _program(task_name: str):
    from crasp import witnesses
    from crasp.tasks import get_task

    task = get_task(task_name)
    return task, getattr(witnesses, CASES[task_name][1])(task.symbols)


def _timed_check(program, tokens, prompt_lengths, lengths) -> tuple[float, float]:
    """Wall and CPU seconds of one teacher-forced check; the witness must agree on every string."""
    from crasp.nexttoken import check_teacher_forced

    wall, cpu = time.perf_counter(), time.process_time()
    result = check_teacher_forced(program, tokens, prompt_lengths, lengths)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert result.correct.all(), "the witness must agree with the task on every benchmark string"
    return wall, cpu


def fast_throughput(task, program, n: int, length: int) -> tuple[float, float, float]:
    from crasp.check import to_program_ids

    examples = task.sample(np.random.default_rng(0), n, length)
    tokens = to_program_ids(examples.tokens, task.vocab, program)
    tracemalloc.start()
    seconds, _ = _timed_check(program, tokens, examples.prompt_lengths, examples.lengths)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return tokens.size / seconds, peak / 2**30, seconds


def reference_throughput(task, program, length: int) -> float:
    from crasp.reference import reference_value

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


# ---------------------------------------------------------------- --against REV
def serve_checks(strings_file: str) -> None:
    """The worker of --against: checks the named task's strings on each request, answering with its
    wall and CPU seconds; it imports whichever crasp PYTHONPATH gives it."""
    from crasp.check import to_program_ids

    saved = np.load(strings_file)
    cases = {}
    for name in CASES:
        task, program = _program(name)
        tokens = to_program_ids(saved[f"{name}_tokens"], task.vocab, program)
        cases[name] = (program, tokens, saved[f"{name}_prompt_lengths"], saved[f"{name}_lengths"])
    serve(lambda name: _timed_check(*cases[name]))


def against(revision: str, n: int, length: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="crasp-against-") as scratch:
        strings_file = Path(scratch) / "strings.npz"
        arrays = {}
        for name in CASES:
            examples = _program(name)[0].sample(np.random.default_rng(0), n, length)
            arrays |= {
                f"{name}_tokens": examples.tokens,
                f"{name}_prompt_lengths": examples.prompt_lengths,
                f"{name}_lengths": examples.lengths,
            }
        np.savez(strings_file, **arrays)
        sides = {"this checkout": REPOSITORY, revision: checkout_of(revision, Path(scratch) / "old")}
        workers = {side: Worker(__file__, root, [str(strings_file)]) for side, root in sides.items()}
        best = {(side, name): (np.inf, np.inf) for side in sides for name in CASES}
        try:
            for _ in range(repeats):
                for name in CASES:
                    for side, worker in workers.items():
                        wall, cpu = worker.ask(name)
                        best[side, name] = (min(best[side, name][0], wall), min(best[side, name][1], cpu))
        finally:
            for worker in workers.values():
                worker.close()
    positions = {name: arrays[f"{name}_tokens"].size for name in CASES}
    print(f"{n} strings of input length {length}, best of {repeats} interleaved rounds")
    print(f"{'program':<22} | {'side':<14} | {'tok-pos/s wall':>14} | {'tok-pos/s CPU':>13} | ratio wall | ratio CPU")
    for name in CASES:
        base_wall, base_cpu = best[revision, name]
        for side in sides:
            wall, cpu = best[side, name]
            print(
                f"{CASES[name][0]:<22} | {side:<14} | {positions[name] / wall:>14,.0f} | "
                f"{positions[name] / cpu:>13,.0f} | "
                f"{base_wall / wall:>9.2f}x | {base_cpu / cpu:>8.2f}x"
            )


def profile(n: int, length: int) -> None:
    """The functions where each program's teacher-forced check spends its CPU time, after one warm-up."""
    from crasp.check import to_program_ids

    for name, (label, _, _) in CASES.items():
        task, program = _program(name)
        examples = task.sample(np.random.default_rng(0), n, length)
        tokens = to_program_ids(examples.tokens, task.vocab, program)
        _timed_check(program, tokens, examples.prompt_lengths, examples.lengths)
        profiler = cProfile.Profile()
        profiler.enable()
        _, cpu = _timed_check(program, tokens, examples.prompt_lengths, examples.lengths)
        profiler.disable()
        print(f"{label}: {n} strings of input length {length}, {cpu:.3f} s of CPU")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(PROFILE_ROWS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strings", type=int, default=10_000, help="strings per task (default 10000)")
    parser.add_argument("--length", type=int, default=150, help="input length of every string (default 150)")
    parser.add_argument(
        "--reference-length", type=int, default=30, help="input length for the slow reference baseline (default 30)"
    )
    parser.add_argument("--against", metavar="REV", help="compare with commit REV's evaluator side by side")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of --against (default 3)")
    parser.add_argument(
        "--profile", action="store_true", help="print where the fast check's CPU time goes (cProfile), per program"
    )
    parser.add_argument("--serve", metavar="STRINGS", help=argparse.SUPPRESS)  # the worker of --against
    args = parser.parse_args()
    if args.serve:
        return serve_checks(args.serve)
    if args.against:
        return against(args.against, args.strings, args.length, args.repeats)
    if args.profile:
        return profile(args.strings, args.length)
    print(
        f"{'program':<22} | {'token-positions/s':>17} | {'target':>8} | {'peak GiB':>8} | {'seconds':>7} | "
        f"{'reference tok-pos/s':>19} | speed-up"
    )
    for name, (label, _, target) in CASES.items():
        task, program = _program(name)
        fast, peak, seconds = fast_throughput(task, program, args.strings, args.length)
        slow = reference_throughput(task, program, args.reference_length)
        print(
            f"{label:<22} | {fast:>17,.0f} | {target:>8.0e} | {peak:>8.2f} | {seconds:>7.1f} | "
            f"{slow:>19,.0f} | {fast / slow:>7,.0f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
