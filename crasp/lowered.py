"""Programs lowered once to jitted JAX functions of whole batches, on the CPU or on a GPU.

    lowered = lower(program)          # once per program
    values = lowered(tokens_BxT)      # the dict crasp.evaluate.evaluate(program, tokens_BxT) returns

`lower` makes one `jax.jit` function of a batch of strings; it is traced and compiled once per
(chunk of strings, length) shape, and the walk over the program DAG that emits its array operations
(crasp.lowered_rules) runs only then. The batch is cut into chunks of a power-of-two number of
strings, so a few shapes serve every batch size (the last chunk is padded with strings of -1, whose
values are dropped), sized so that the values of one chunk stay under a memory budget: the walk is
first run on one string without compiling (`jax.eval_shape`), which gives the bytes of every value
per string.

Counts are in the narrowest of int16 and int32 that `crasp.evaluate.count_dtype` proves holds every
count of the program on strings of the batch's length (int16 where it can: XLA's prefix sums on a
CPU run 3x faster in it than in int32, `benchmarks/lowered.py --parts`). Where neither does
(constants near 2**40, definitions that double their operands), the function is traced and run in
int64 inside a scoped `jax.enable_x64`, and each `+` and `-` reports where it wrapped around: such a
sum is refused with CraspRangeError, as crasp.evaluate refuses it, never returned wrapped. Counts
leave as int64 and Booleans as bool, in NumPy arrays, with the axes crasp.evaluate gives them.

jax is imported here only when a program is lowered: crasp's commands never pay its import. What
is lowered how, what each node costs and the benchmark against crasp.evaluate: docs/lowered.md.
"""

from __future__ import annotations

import contextlib

import numpy as np

from crasp import expr as E
from crasp.evaluate import DEFAULT_MEMORY_BUDGET, count_dtype
from crasp.program import Program
from crasp.values import Value

LARGEST_CHUNK = 4096  # strings per compiled call


def lower(program: Program, names: list[str] | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET):
    """The program's named definitions (all, or `names`) as a function of a batch of strings."""
    return LoweredProgram(program, names, memory_budget)


def _in_width(dtype):
    """A scope in which JAX computes in 64 bits where counts need int64 (jax.enable_x64, or
    jax.experimental's on older jax); no scope otherwise."""
    import jax

    if dtype is not np.int64:
        return contextlib.nullcontext()
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64

    return enable_x64()


class LoweredProgram:
    """A program's definitions as one jitted function of a batch; call it with a (B, T) array of symbol ids."""

    def __init__(self, program: Program, names: list[str] | None, memory_budget: int = DEFAULT_MEMORY_BUDGET):
        import jax

        self.program = program
        self.definitions = [program.definition(n) for n in (names or program.names)]
        self.memory_budget = memory_budget
        self.symbol_ids = program.symbol_ids()
        self.chunks: dict[tuple[int, type], int] = {}  # (length, count type) -> strings per call
        self.wrapping: dict[tuple[int, int], list[E.Arith]] = {}  # the `+` and `-` checked in each shape
        self.compiled = jax.jit(self._values, static_argnums=1)

    def lowering_of(self, tokens_BxT, dtype):
        """The operations of every chosen definition on the traced batch, and the lowering that emitted them."""
        from crasp.lowered_rules import Lowering

        wide = dtype is np.int64
        lowering = Lowering(tokens_BxT, len(self.program.alphabet), self.symbol_ids, dtype, check_wraps=wide)
        uses = [(d.use(*(E.Var(p) for p in d.params)), tuple(sorted(d.params))) for d in self.definitions]
        return lowering, tuple(lowering.output(use, axes) for use, axes in uses)

    def _values(self, tokens_BxT, dtype):
        """The traced function: every chosen definition's array, and where each checked sum wrapped."""
        lowering, arrays = self.lowering_of(tokens_BxT, dtype)
        self.wrapping[tokens_BxT.shape] = [node for node, _ in lowering.wraps]
        return arrays, tuple(wrapped for _, wrapped in lowering.wraps)

    def chunk_size(self, B: int, T: int, dtype) -> int:
        """Strings per call at length T: the largest power of two whose values fit the memory budget
        (4x the bytes of the values, as crasp.evaluate sizes its chunks), and no more than B needs."""
        if (T, dtype) not in self.chunks:
            import jax

            from crasp.lowered_rules import value_bytes

            held = []

            def one_string(tokens):
                lowering, arrays = self.lowering_of(tokens, dtype)
                held.append(value_bytes(lowering))
                return arrays

            with _in_width(dtype):
                jax.eval_shape(one_string, jax.ShapeDtypeStruct((1, T), np.int32))
            fitting = max(1, min(self.memory_budget // (4 * held[0] + 1), LARGEST_CHUNK))
            self.chunks[T, dtype] = 1 << (int(fitting).bit_length() - 1)
        return min(self.chunks[T, dtype], 1 << max(B - 1, 0).bit_length())

    def __call__(self, tokens_BxT: np.ndarray) -> dict[str, Value]:
        tokens_BxT = _checked_tokens(tokens_BxT, len(self.program.alphabet))
        B, T = tokens_BxT.shape
        if B == 0:  # as crasp.evaluate answers an empty batch
            return {d.name: Value(np.zeros((0,)), ()) for d in self.definitions}
        dtype = count_dtype(self.program, T)
        chunk = self.chunk_size(B, T, dtype)
        V = len(self.program.alphabet)
        results = {
            d.name: np.empty((B, T) + (V,) * len(d.params), np.int64 if d.body.type == E.COUNT else bool)
            for d in self.definitions
        }
        # Each chunk is copied out while the next one computes: JAX returns from a call before it is done.
        running = None
        with _in_width(dtype):
            for start in range(0, B, chunk):
                part = np.full((chunk, T), -1, np.int32)
                part[: B - start] = tokens_BxT[start : start + chunk]
                launched = (start, min(chunk, B - start), self.compiled(part, dtype))
                if running is not None:
                    self._copy_out(*running, results)
                running = launched
            self._copy_out(*running, results)
        return {d.name: Value(results[d.name], tuple(sorted(d.params))) for d in self.definitions}

    def _copy_out(self, start: int, rows: int, outputs, results: dict[str, np.ndarray]) -> None:
        """A chunk's values into the batch's arrays, once no checked sum of it has wrapped around."""
        arrays, wraps = outputs
        self._refuse_wrapped(wraps, arrays[0].shape[:2], rows, start)
        for d, array in zip(self.definitions, arrays):
            results[d.name][start : start + rows] = np.asarray(array)[:rows]

    def _refuse_wrapped(self, wraps, shape: tuple[int, int], rows: int, start: int) -> None:
        for node, wrapped in zip(self.wrapping[shape], wraps):
            where = np.argwhere(np.asarray(wrapped)[:rows])
            if len(where):
                b, i = where[0]
                raise E.CraspRangeError(
                    f"`{E.show(node)}` leaves the exact range of counts, -2**63 .. 2**63 - 1, at position {i + 1} "
                    f"of string {start + b} (the lowered program computes counts as int64); "
                    "keep sums of counts smaller"
                )


def _checked_tokens(tokens_BxT, V: int) -> np.ndarray:
    tokens_BxT = np.asarray(tokens_BxT)
    if tokens_BxT.ndim != 2:
        raise ValueError(f"tokens must be a (batch, positions) array of symbol ids, got shape {tokens_BxT.shape}")
    if tokens_BxT.size and not (-1 <= tokens_BxT.min() and tokens_BxT.max() < V):
        raise ValueError(f"token ids must lie in 0..{V - 1} (the alphabet) or be -1 (padding)")
    return tokens_BxT
