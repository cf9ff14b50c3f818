"""Every shipped program on one long input: CPU time and peak memory of the evaluation, per program.

The programs: the examples in crasp/programs, the hand-written witnesses of crasp.witnesses and the
witnesses found by search (crasp/search_results.json), the last two over their task's special symbols
and --symbols task symbols (default 8: over the tasks' own 150 symbols one (1, 10^6, 153) array of
counts alone is 306 MB, and a program keeps several). Each reads one string: <bos>, then symbols drawn
uniformly from the program's alphabet (seed 0), at two lengths (default 10^5 and 10^6 tokens). The
evaluation is what a prediction runs: `evaluate` of the program's output (or accepted) definition.

Peak memory is tracemalloc's (numpy's buffers included), CPU time is process time (steadier than wall
time on a loaded machine), the better of two runs. A program is flagged "not linear" where time or
memory grows by more than LINEAR_SLACK times the ratio of the lengths. With --against REV, commit
REV's evaluator (revisions.py) evaluates the same programs on the same long input, interleaved with
this checkout's, and the table gives REV's time and memory over this checkout's.

    python benchmarks/long_inputs.py [--lengths 100000 1000000] [--symbols 8] [--against REV] [--only TEXT ...]

--only keeps the programs whose name contains one of the texts (e.g. `--only UF "found by search"`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from revisions import REPOSITORY, Worker, checkout_of, serve

from crasp.evaluate import evaluate
from crasp.library import example_names, load_program
from crasp.program import Program
from crasp.search.results import load as load_search_results
from crasp.tasks import get_task
from crasp.witnesses import WITNESSES

LINEAR_SLACK = 1.5


def shipped_programs(symbols: int) -> dict[str, Program]:
    programs = {f"{name}.crasp": load_program(name) for name in example_names()}
    for code, makers in WITNESSES.items():
        task = _task(code, symbols)
        for make in makers:
            programs[f"{code} {make.__name__}"] = make(task.symbols)
    for key, record in load_search_results().items():
        if record.program:
            programs[f"{key}: found by search"] = record.make_witness()(_task(record.task, symbols).symbols)
    return programs


def _task(code: str, symbols: int):
    task = get_task(code)
    if "alphabet_size" in task.params:
        return get_task(code, alphabet_size=min(symbols, task.alphabet_size))
    return task


def long_input(program: Program, length: int) -> np.ndarray:
    ids = program.symbol_ids()
    tokens = np.random.default_rng(0).integers(0, len(program.alphabet), (1, length))
    tokens[0, 0] = ids["<bos>"] if "<bos>" in ids else tokens[0, 0]
    return tokens


def measure(program: Program, length: int) -> tuple[float, float]:
    """CPU seconds (the better of two runs: a first run also pays for the pages it touches first) and
    peak MiB of evaluating the program's target on one input of `length` tokens."""
    tokens = long_input(program, length)
    target = program.output or program.accept
    seconds = []
    tracemalloc.start()
    for _ in range(2):
        started = time.process_time()
        evaluate(program, tokens, [target])
        seconds.append(time.process_time() - started)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return min(seconds), peak / 2**20


def serve_measurements(symbols: str) -> None:
    """The worker: answers "LENGTH NAME" with measure()'s pair, or null for a program it does not ship."""
    programs = shipped_programs(int(symbols))

    def answer(request: str):
        length, name = request.split(" ", 1)
        return measure(programs[name], int(length)) if name in programs else None

    serve(answer)


def _cells(measured) -> str:
    return "      - |         -" if measured is None else f"{measured[0]:>7.2f} | {measured[1]:>9.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--lengths", type=int, nargs=2, default=(100_000, 1_000_000), help="the two input lengths (default 1e5 1e6)"
    )
    parser.add_argument("--symbols", type=int, default=8, help="task symbols of the witnesses (default 8)")
    parser.add_argument("--against", metavar="REV", help="also measure commit REV's evaluator at the long length")
    parser.add_argument("--only", nargs="+", metavar="TEXT", help="only the programs whose name contains a TEXT")
    parser.add_argument("--serve", metavar="SYMBOLS", help=argparse.SUPPRESS)  # a worker
    args = parser.parse_args()
    if args.serve:
        return serve_measurements(args.serve)
    short, long = args.lengths
    if not 0 < short < long:
        parser.error(f"--lengths must be two lengths, the shorter first, got {short} {long}")
    programs = shipped_programs(args.symbols)
    if args.only:
        programs = {name: p for name, p in programs.items() if any(text in name for text in args.only)}
        if not programs:
            known = ", ".join(shipped_programs(args.symbols))
            parser.error(f"--only {' '.join(args.only)} names no shipped program; they are: {known}")
    with tempfile.TemporaryDirectory(prefix="crasp-against-") as scratch:
        roots = {"this checkout": REPOSITORY}
        if args.against:
            roots[args.against] = checkout_of(args.against, Path(scratch))
        workers = {side: Worker(__file__, root, [str(args.symbols)]) for side, root in roots.items()}
        try:
            _table(workers, programs, short, long, args.against)
        finally:
            for worker in workers.values():
                worker.close()


def _table(workers: dict, programs: dict[str, Program], short: int, long: int, against: str | None) -> None:
    print(f"one input of {short:,} and of {long:,} tokens; CPU seconds and peak MiB of evaluating the target")
    header = (
        f"{'program':<52} | {'V':>3} | {'s short':>7} | {'MiB short':>9} | {'s long':>7} | {'MiB long':>9} | linear"
    )
    if against:
        header += f" | {'s ' + against:>7} | {'MiB':>9} | time ratio | memory ratio"
    print(header)
    this = workers["this checkout"]
    for name, program in programs.items():
        at_short, at_long = this.ask(f"{short} {name}"), this.ask(f"{long} {name}")
        growth = max(at_long[0] / max(at_short[0], 1e-9), at_long[1] / max(at_short[1], 1e-9))
        linear = "yes" if growth <= LINEAR_SLACK * long / short else f"NO ({growth:.0f}x)"
        row = f"{name:<52} | {len(program.alphabet):>3} | {_cells(at_short)} | {_cells(at_long)} | {linear:<6}"
        if against:
            before = workers[against].ask(f"{long} {name}")
            ratios = "" if before is None else f" | {before[0] / at_long[0]:>9.1f}x | {before[1] / at_long[1]:>11.1f}x"
            row += f" | {_cells(before)}{ratios}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
