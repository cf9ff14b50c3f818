"""Layer 0's averaging head of the Majority witness at margin 1, replayed at lengths the whole model
cannot run on a CPU (its cost grows as the square of the length).

The compiled Majority over {a, b} decides n[a] >= n[b] in layer 0: its only head averages Q(a),
Q(b) and the first-position flag over j <= i, and layer 0's MLP thresholds n[a] - n[b] + 1/2.
Layers 1 and 2 have no head and combine 0/1 values. So the rounding that can make the model fail
at <sep> is the rounding of that head's sums there. The replay runs the model's own modules on
what the chunked prefill (crasplab.compiler.run) feeds the model: the keys and values of layer 0
at every position (computed from the embeddings, exact: one-hot rows), the chunk that holds
<sep>, the same score mask, modules and shapes; then the chunk through every layer's MLP and the
readout (the attention of layers 1 and up adds exactly 0: no heads). It reads n[a] and n[b] from
the final residual as run.read_definitions does, and the output table at <sep>. At lengths the
whole model also ran, the replayed error must equal the whole model's (the study records both).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from crasp import witnesses as W
from crasp.nexttoken import encode
from crasplab.compiler import CompileError, compile_program
from crasplab.compiler.run import PREFILL_CHUNK, read_definitions
from crasplab.models.interventions import Interventions
from crasplab.models.transformer import MASKED_LOGIT

# Score rows x keys of <sep>'s chunk above this (about 1 GB of float32 per array) and the length
# moves down to the nearest one whose strings end in a 4-token chunk (<sep> is its second token).
MAX_SCORES = 2**28
KEY_BLOCK = 2**20  # positions whose keys and values are computed at once (memory, not numerics)


def sep_chunk(tokens: int) -> tuple[int, int]:
    """The positions [start, end) of the prefill chunk that holds <sep>, the third token from the
    end (run._outputs feeds strings of at most PREFILL_CHUNK tokens whole: one chunk)."""
    start = PREFILL_CHUNK * ((tokens - 3) // PREFILL_CHUNK)
    return start, min(start + PREFILL_CHUNK, tokens)


def replay_length(n: int) -> int:
    """n, made odd (margin 1 needs an odd input length), or below it the odd length whose strings
    (length + 3 tokens) end in a 4-token chunk when <sep>'s chunk would be too large to score."""
    n = n + 1 - n % 2
    start, end = sep_chunk(n + 3)
    if (end - start) * (n + 3) <= MAX_SCORES:
        return n
    tokens = PREFILL_CHUNK * ((n + 3 - 4) // PREFILL_CHUNK) + 4
    return tokens - 3


@nnx.jit
def _keys_values(layer, x_BxTxD):
    _, keys, values = layer.attn._project_qkv(layer.attn_norm(x_BxTxD))
    return keys, values


@nnx.jit
def _sep_chunk_outputs(model, x_BxCxD, positions_BxC, keys, values, start):
    """The chunk through the model, as Transformer.forward_embeddings runs it with a cache of every
    position (those after the chunk are masked: weight exactly 0), except that the attention of
    layers 1 and up, which adds exactly 0 (no heads: zero value kernels), is left out. Returns the
    final residual and the logits."""
    S, C = keys.shape[1], x_BxCxD.shape[1]
    allowed_1xCxS = jnp.arange(S)[None, None, :] <= (start + jnp.arange(C))[None, :, None]
    bias = jnp.where(allowed_1xCxS, 0.0, MASKED_LOGIT)[:, None]
    first = model.layers[0]
    attended, *_ = first.attn(
        first.attn_norm(x_BxCxD), positions_BxC, bias, Interventions().for_layer(0), (keys, values), start
    )
    x = x_BxCxD + attended
    for layer in model.layers:
        x = x + layer.mlp(layer.mlp_norm(x))
    return x, model.lm_head(model.final_norm(x))


def replay_string(compiled, ids_1xT: np.ndarray) -> tuple[float, bool]:
    """|n[a] - n[b] - 1| at <sep> (the third token from the end of <bos> input <sep> a <eos>) and
    whether the output table there names exactly "a", from the replay."""
    if any(np.any(compiled.params[f"layers.{k}.attn.v.kernel"]) for k in range(1, compiled.config.n_layers)):
        raise ValueError("the replay needs a program whose only heads are in layer 0")
    model = compiled.model()
    T = ids_1xT.shape[1]
    start, end = sep_chunk(T)
    blocks = [
        _keys_values(model.layers[0], model.embed_inputs(jnp.asarray(ids_1xT[:, b : b + KEY_BLOCK]), None))
        for b in range(0, T, KEY_BLOCK)
    ]
    keys, values = (jnp.concatenate(parts, axis=1) for parts in zip(*blocks))
    positions = jnp.arange(start, end)[None, :]
    cache_index = jnp.asarray(start, jnp.asarray(0).dtype)  # the cache index's dtype in the whole run
    x = model.embed_inputs(jnp.asarray(ids_1xT[:, start:end]), positions)
    residual, logits = (np.asarray(a) for a in _sep_chunk_outputs(model, x, positions, keys, values, cache_index))
    counts = read_definitions(compiled, residual, first_position=start + 1, labels=("n[a]", "n[b]"))
    sep = T - 3 - start
    table = logits[0, sep] > 0
    right = bool(table.sum() == 1 and table[ids_1xT[0, T - 2]])
    return float(abs(counts["n[a]"][0, sep] - counts["n[b]"][0, sep] - 1)), right


def longest_compiled_length(program, pe: str, below: int = 2**26) -> int:
    """The longest max_length the compiler builds `program` for (bisection: the thresholds'
    |gain * z| grows with max_length and must stay below lower.EXACT_STEP_INPUT)."""
    low, high = 2, below
    while high - low > 1:
        middle = (low + high) // 2
        try:
            compile_program(program, pe, max_length=middle)
            low = middle
        except CompileError:
            high = middle
    return low


def replay_records(lengths: list[int], samples: int, seed: int, dtypes: list[str]):
    """The longest length the witness compiles for (a "limit" record), then one record per
    (dtype, length) within it: the largest replayed error over `samples` strings."""
    from crasplab.compiler.study import ROUNDING_TASK, margin_one_strings, precision, rounding_record

    program = W.majority(("a", "b"))
    limit = longest_compiled_length(program, "nope")
    yield dict(kind="limit", task=ROUNDING_TASK, pe="nope", max_length=limit)
    lengths = [n for n in map(replay_length, lengths) if n + 5 <= limit]  # compiled for n + 5 tokens
    for dtype in dtypes:
        with precision(dtype):
            for length in lengths:
                compiled = compile_program(program, "nope", max_length=length + 5, dtype=dtype)
                # One string at a time from the same generator: the strings of margin_one_strings(rng,
                # samples, length), without holding them all (128 of 1.7e6 symbols took 22 GB).
                rng = np.random.default_rng((seed, length))
                strings = (margin_one_strings(rng, 1, length)[0] for _ in range(samples))
                errors, right = zip(*(replay_string(compiled, encode(program, [s])) for s in strings))
                yield rounding_record(
                    "replay",
                    dtype,
                    length,
                    samples,
                    sum(right),
                    max(errors),
                    chunk=sep_chunk(length + 3)[1] - sep_chunk(length + 3)[0],
                )
