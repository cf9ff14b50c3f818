"""Running a compiled program: its output table, its residual probes, greedy generation, task scores.

Long strings go through the KV cache in chunks (prefill), as decoding would feed them, so one
string of 10^4 tokens never builds a 10^4 x 10^4 score matrix per head at once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from crasp.evaluate import evaluate
from crasplab.compiler import CompiledProgram
from crasplab.compiler.lower import CompileError, Count
from crasplab.models import Transformer, set_params

PREFILL_CHUNK = 512


def require_dtype_available(dtype: str) -> None:
    if dtype == "float64" and not jax.config.jax_enable_x64:
        raise CompileError(
            "float64 needs jax's 64-bit mode: set JAX_ENABLE_X64=1 in the environment "
            "(jax would otherwise compute in float32)"
        )


@nnx.jit
def _whole(model: Transformer, tokens_BxT: jax.Array) -> jax.Array:
    return model(tokens_BxT).logits_BxTxV


@nnx.jit
def _prefill(model: Transformer, tokens_BxC: jax.Array, cache):
    out = model(tokens_BxC, cache=cache)
    return out.logits_BxTxV, out.cache


def _outputs(model: Transformer, tokens_BxT: np.ndarray, chunk: int | None) -> np.ndarray:
    """The model's output (logits, float32) at every position; padding ids (< 0) read as id 0.
    Compiled with jit (one program per chunk shape): run op by op, the masks and softmaxes of a
    10^4-token string take about six times as long on the CPU."""
    tokens = jnp.asarray(np.maximum(tokens_BxT, 0))
    B, T = tokens.shape
    if chunk is None or T <= chunk:
        return np.asarray(_whole(model, tokens))
    cache, parts = model.init_cache(B, T), []
    # Under jax's 64-bit mode the literal slot offsets are int64: the cache index must match them.
    cache = cache.replace(index=cache.index.astype(jnp.asarray(0).dtype))
    for start in range(0, T, chunk):
        logits, cache = _prefill(model, tokens[:, start : start + chunk], cache)
        parts.append(np.asarray(logits))
    return np.concatenate(parts, axis=1)


def output_table(model: Transformer, tokens_BxT: np.ndarray, chunk: int | None = PREFILL_CHUNK) -> np.ndarray:
    """bool (B, T, V): the compiled O[s] at every position, read as logits > 0."""
    return _outputs(model, tokens_BxT, chunk) > 0


def probe_model(compiled: CompiledProgram, dtype: str | None = None) -> Transformer:
    """The same weights with the final residual stream appended to the logits: its outputs are the
    V logits, then the D residual features (the readout gains D identity columns). The vocabulary
    grows to V + D with unused zero rows, so this too is only config and weights."""
    D, V = compiled.config.d_model, compiled.config.vocab_size
    config = compiled.config.replace(vocab_size=V + D, **({} if dtype is None else {"dtype": dtype}))
    model = Transformer(config, rngs=nnx.Rngs(0))
    params = dict(compiled.params)
    params["embed.embedding"] = np.concatenate([params["embed.embedding"], np.zeros((D, D))])
    params["lm_head.kernel"] = np.concatenate([params["lm_head.kernel"], np.eye(D)], axis=1)
    set_params(model, params, require_all=True)
    return model


def read_definitions(
    compiled: CompiledProgram, residual_BxTxD: np.ndarray, first_position: int = 1, labels=None
) -> dict[str, np.ndarray]:
    """Every definition instance ("prev[a]", or those in `labels`) read from a final residual
    stream whose first row is at `first_position`: Booleans as 0/1 values (unrounded), counts as
    counts (averaged counts multiplied back by the position i)."""
    residual = residual_BxTxD.astype(np.float64)
    positions = first_position + np.arange(residual.shape[1])[None, :]
    values = {}
    for label, (kind, value) in compiled.definitions.items():
        if labels is not None and label not in labels:
            continue
        form = value.form if isinstance(value, Count) else value
        read = sum((coefficient * residual[..., f] for f, coefficient in form.items()), np.zeros(residual.shape[:2]))
        if isinstance(value, Count):
            read = value.constant + 0 * read if value.scale == "constant" else read
            read = read * positions if value.scale == "averaged" else read
        values[label] = read
    return values


def table_and_definitions(
    compiled: CompiledProgram, tokens_BxT: np.ndarray, dtype: str | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One pass of probe_model: the output table (logits > 0) and every definition read from the
    residual stream of the same computation."""
    outputs = _outputs(probe_model(compiled, dtype), tokens_BxT, PREFILL_CHUNK)
    V = compiled.config.vocab_size
    return outputs[..., :V] > 0, read_definitions(compiled, outputs[..., V:])


def probe_definitions(compiled: CompiledProgram, tokens_BxT: np.ndarray) -> dict[str, np.ndarray]:
    """Every definition instance read from the residual stream (see read_definitions)."""
    return table_and_definitions(compiled, tokens_BxT)[1]


def interpreter_definitions(compiled: CompiledProgram, ids_BxT: np.ndarray) -> dict[str, np.ndarray]:
    """The same instances from crasp.evaluate, for comparison with probe_definitions."""
    program = compiled.program
    evaluated = evaluate(program, ids_BxT)
    symbol_id = program.symbol_ids()
    out = {}
    for label in compiled.definitions:
        name, _, args = label.partition("[")
        array = evaluated[name].array
        axes = evaluated[name].axes
        if args:
            bound = dict(zip(program.definition(name).params, args.rstrip("]").split(", ")))
            array = np.broadcast_to(array, array.shape[:2] + (len(program.alphabet),) * len(axes))
            for axis in axes:
                array = np.take(array, symbol_id[bound[axis]], axis=2)
        out[label] = np.broadcast_to(array, ids_BxT.shape).astype(np.float64)
    return out


def answers_right(
    table_BxTxV: np.ndarray, ids_BxT: np.ndarray, prompt_lengths: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """bool (B,): the table names exactly the next symbol at every answer position (teacher forced)."""
    B, T, _ = table_BxTxV.shape
    positions = np.arange(T)[None, :]
    needed = (positions >= prompt_lengths[:, None] - 1) & (positions < lengths[:, None] - 1)
    target = np.zeros((B, T), np.int64)
    target[:, :-1] = np.maximum(ids_BxT[:, 1:], 0)
    hit = np.take_along_axis(table_BxTxV, target[..., None], axis=-1)[..., 0]
    right = (table_BxTxV.sum(axis=-1) == 1) & hit
    return ~(needed & ~right).any(axis=1)
