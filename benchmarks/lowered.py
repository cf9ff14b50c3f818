"""Throughput of programs lowered to jitted JAX functions (crasp.lowered) against crasp.evaluate, side by side.

Majority over 26 letters and unique copy forward (UF) over 150 symbols, strings of input length 150
sampled as benchmarks/interpreter.py samples them; both sides compute the output family O[s] at every
position of every string (the work of `crasp.nexttoken.output_table`) and must agree on every value.
Printed per program: the compile time of the lowered function (its first call less a later call on
the same strings), then token-positions per second of each side, the best of --repeats interleaved
rounds, and their ratio. The devices JAX runs on are printed first: on a GPU machine the same
command measures the lowered function there (crasp.evaluate stays on the CPU).

    python benchmarks/lowered.py [--strings 2000] [--length 150] [--repeats 3]
    python benchmarks/lowered.py --programs UF-positionless --strings 200   # a program lowered densely
    python benchmarks/lowered.py --parts   # where one chunk of UF's lowered function spends its time
"""

from __future__ import annotations

import argparse
import time

import numpy as np

# Case -> (label, task, witness function in crasp.witnesses). UF-positionless is UF's witness in C-RASP[]:
# its `since_first[t] = 2` is one-hot only on the strings' values, so it is lowered densely, (B, T, V, V);
# slow (about 20x below crasp.evaluate), it runs only when named.
CASES = {
    "Majority": ("Majority, 26 letters", "Majority", "majority"),
    "UF": ("UF, 150 symbols", "UF", "copy_forward"),
    "UF-positionless": ("UF in C-RASP[]", "UF", "copy_forward_without_positions"),
}
DEFAULT_CASES = ["Majority", "UF"]


def _strings(case: str, n: int, length: int):
    from crasp import witnesses
    from crasp.check import to_program_ids
    from crasp.tasks import get_task

    _, task_name, witness = CASES[case]
    task = get_task(task_name)
    program = getattr(witnesses, witness)(task.symbols)
    examples = task.sample(np.random.default_rng(0), n, length)
    return program, to_program_ids(examples.tokens, task.vocab, program)


def _timed(run) -> tuple[float, dict]:
    started = time.perf_counter()
    values = run()
    return time.perf_counter() - started, values


def compare(case: str, n: int, length: int, repeats: int) -> str:
    from crasp.evaluate import count_dtype, evaluate

    program, tokens = _strings(case, n, length)
    names = [program.output]
    lowered = lower_output(program)
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
        f"{CASES[case][0]:<22} | {first - best['lowered']:>9.2f} | {chunk:>6} | "
        f"{tokens.size / best['evaluate']:>17,.0f} | {tokens.size / best['lowered']:>17,.0f} | "
        f"{best['evaluate'] / best['lowered']:>6.2f}x"
    )


def _best_seconds(run, repeats: int = 5) -> float:
    import jax

    jax.block_until_ready(run())  # compiles
    best = np.inf
    for _ in range(repeats):
        started = time.perf_counter()
        jax.block_until_ready(run())
        best = min(best, time.perf_counter() - started)
    return best


def parts(length: int) -> None:
    """Where a chunk of UF's lowered function spends its time: the whole chunk, then its pieces alone on
    arrays of the chunk's shape, beside NumPy's prefix sum (crasp.prefix_sums) of the same counts."""
    import jax
    import jax.numpy as jnp

    from crasp.evaluate import count_dtype
    from crasp.lowered_arrays import keyed_prefix_sum, prefix_sum
    from crasp.prefix_sums import prefix_sum as numpy_prefix_sum

    program, tokens = _strings("UF", 256, length)
    B, T, V, dtype = *tokens.shape, len(program.alphabet), count_dtype(program, tokens.shape[1])
    lowered = lower_output(program)
    chunk = np.asarray(tokens, np.int32)
    rng = np.random.default_rng(0)
    keys, queries = (jnp.asarray(rng.integers(-1, V, (B, T)), jnp.int32) for _ in range(2))
    weights = jnp.asarray(rng.integers(0, 2, (B, T, V)).astype(bool))
    keyed = jax.jit(keyed_prefix_sum, static_argnums=(3, 4))
    rows = [
        ("the compiled chunk", _best_seconds(lambda: lowered.compiled(chunk, dtype))),
        (f"keyed_prefix_sum, {np.dtype(dtype).name}", _best_seconds(lambda: keyed(keys, weights, queries, V, dtype))),
    ]
    for width in (jnp.int16, jnp.int32):
        scan = jax.jit(lambda w, width=width: prefix_sum(w, width))
        cumsum = jax.jit(lambda w, width=width: jnp.cumsum(w, axis=1, dtype=width))
        name = np.dtype(width).name
        rows.append((f"prefix_sum (associative scan), {name}", _best_seconds(lambda: scan(weights))))
        rows.append((f"jnp.cumsum, {name}", _best_seconds(lambda: cumsum(weights))))
        numpy_weights = np.asarray(weights)
        rows.append((f"NumPy crasp.prefix_sums, {name}", _best_seconds(lambda: numpy_prefix_sum(numpy_weights, width))))
    print(f"UF: one chunk of {B} strings of {T} positions over {V} symbols, best of 5")
    for what, seconds in rows:
        print(f"{what:<40} | {seconds:>7.3f} s")


def lower_output(program):
    from crasp.lowered import lower

    return lower(program, [program.output])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strings", type=int, default=2000, help="strings per program (default 2000)")
    parser.add_argument("--length", type=int, default=150, help="input length of every string (default 150)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the best of each side is kept")
    parser.add_argument(
        "--programs", nargs="+", choices=list(CASES), default=DEFAULT_CASES, help="which to run (default: Majority UF)"
    )
    parser.add_argument("--parts", action="store_true", help="time the pieces of one UF chunk instead")
    args = parser.parse_args()
    import jax

    print(f"jax {jax.__version__} on {jax.devices()}")
    if args.parts:
        return parts(args.length)
    print(f"{args.strings} strings of input length {args.length}, best of {args.repeats} interleaved rounds")
    print(
        f"{'program':<22} | {'compile s':>9} | {'chunk':>6} | {'evaluate tok-pos/s':>17} | "
        f"{'lowered tok-pos/s':>17} | {'ratio':>7}"
    )
    for name in args.programs:
        print(compare(name, args.strings, args.length, args.repeats), flush=True)


if __name__ == "__main__":
    main()
