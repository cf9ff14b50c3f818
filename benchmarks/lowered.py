"""Throughput of programs lowered to jitted JAX functions (crasp.lowered) against crasp.evaluate, side by side.

Majority over 26 letters and unique copy forward (UF) over 150 symbols, strings of input length 150
sampled as benchmarks/interpreter.py samples them; both sides compute the output family O[s] at every
position of every string (the work of `crasp.nexttoken.output_table`) and must agree on every value.
Printed per program: the compile time of the lowered function (its first call less a later call on
the same strings), then token-positions per second of each side, the best of --repeats interleaved
rounds, and their ratio. The devices JAX runs on are printed first: on a GPU machine the same
command measures the lowered function there (crasp.evaluate stays on the CPU).

    python benchmarks/lowered.py [--strings 2000] [--length 150] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

CASES = {"Majority": ("Majority, 26 letters", "majority"), "UF": ("UF, 150 symbols", "copy_forward")}


def _strings(task_name: str, n: int, length: int):
    from crasp import witnesses
    from crasp.check import to_program_ids
    from crasp.tasks import get_task

    task = get_task(task_name)
    program = getattr(witnesses, CASES[task_name][1])(task.symbols)
    examples = task.sample(np.random.default_rng(0), n, length)
    return program, to_program_ids(examples.tokens, task.vocab, program)


def _timed(run) -> tuple[float, dict]:
    started = time.perf_counter()
    values = run()
    return time.perf_counter() - started, values


def compare(task_name: str, n: int, length: int, repeats: int) -> str:
    from crasp.evaluate import count_dtype, evaluate
    from crasp.lowered import lower

    program, tokens = _strings(task_name, n, length)
    names = [program.output]
    lowered = lower(program, names)
    first, values = _timed(lambda: lowered(tokens))
    best = {"evaluate": np.inf, "lowered": np.inf}
    for _ in range(repeats):
        seconds, expected = _timed(lambda: evaluate(program, tokens, names))
        best["evaluate"] = min(best["evaluate"], seconds)
        seconds, values = _timed(lambda: lowered(tokens))
        best["lowered"] = min(best["lowered"], seconds)
        assert np.array_equal(values[program.output].array, expected[program.output].array), "the two sides disagree"
    chunk = lowered.chunk_size(len(tokens), tokens.shape[1], count_dtype(program, tokens.shape[1]))
    return (
        f"{CASES[task_name][0]:<22} | {first - best['lowered']:>9.2f} | {chunk:>6} | "
        f"{tokens.size / best['evaluate']:>17,.0f} | {tokens.size / best['lowered']:>17,.0f} | "
        f"{best['evaluate'] / best['lowered']:>6.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strings", type=int, default=2000, help="strings per program (default 2000)")
    parser.add_argument("--length", type=int, default=150, help="input length of every string (default 150)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the best of each side is kept")
    parser.add_argument("--programs", nargs="+", choices=sorted(CASES), default=list(CASES), help="which to run")
    args = parser.parse_args()
    import jax

    print(f"jax {jax.__version__} on {jax.devices()}")
    print(f"{args.strings} strings of input length {args.length}, best of {args.repeats} interleaved rounds")
    print(
        f"{'program':<22} | {'compile s':>9} | {'chunk':>6} | {'evaluate tok-pos/s':>17} | "
        f"{'lowered tok-pos/s':>17} | {'ratio':>7}"
    )
    for name in args.programs:
        print(compare(name, args.strings, args.length, args.repeats), flush=True)


if __name__ == "__main__":
    main()
