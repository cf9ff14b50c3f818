"""Greedy decoding for a batch of prompts of different lengths, jit-compiled, with a KV cache.

Prompts come right-padded, as crasp.tasks makes them (tokens[:prompt_length] is the prompt;
anything after it is ignored). They are left-aligned inside, so every row writes the same cache
slot at every step; each row's positions count from 0 at its own first token and its padding is
masked out, so a padded prompt yields exactly the tokens of that prompt alone.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from crasplab.models.interventions import Interventions
from crasplab.models.transformer import Transformer


@struct.dataclass
class Generation:
    tokens_BxN: jax.Array  # generated tokens; after a row's EOS (kept), pad_id
    lengths_B: jax.Array  # generated tokens per row, its EOS included


def left_align(prompts_BxT, prompt_lengths_B, pad_id: int):
    """Left-aligned tokens, positions (0 at each row's first token) and mask, all [B, max length]."""
    width = int(prompt_lengths_B.max())
    source_BxT = np.arange(width)[None, :] - (width - prompt_lengths_B)[:, None]
    mask_BxT = source_BxT >= 0
    positions_BxT = np.maximum(source_BxT, 0)
    tokens_BxT = np.where(mask_BxT, np.take_along_axis(prompts_BxT, positions_BxT, axis=1), pad_id)
    return tokens_BxT.astype(np.int32), positions_BxT.astype(np.int32), mask_BxT


def generate(
    model: Transformer,
    prompts_BxT,
    prompt_lengths_B,
    *,
    max_new_tokens: int,
    eos_id: int | None,
    pad_id: int = 0,
    interventions: Interventions | None = None,
    use_cache: bool = True,
) -> Generation:
    """Greedy continuation of each prompt until EOS or `max_new_tokens` tokens.

    use_cache=False recomputes the full forward pass at every step (the reference the cache must
    match, and the benchmark's baseline). Interventions may carry a head mask and head means;
    an attention bias is tied to one sequence shape and is not accepted here.
    """
    prompts_BxT = np.asarray(prompts_BxT)
    prompt_lengths_B = np.asarray(prompt_lengths_B)
    if prompts_BxT.ndim != 2 or not np.issubdtype(prompts_BxT.dtype, np.integer):
        raise ValueError(
            f"prompts_BxT must be a 2-d integer array, got shape {prompts_BxT.shape} dtype {prompts_BxT.dtype}"
        )
    if prompt_lengths_B.shape != prompts_BxT.shape[:1]:
        raise ValueError(
            f"prompt_lengths_B has shape {prompt_lengths_B.shape}; expected ({prompts_BxT.shape[0]},), one per prompt"
        )
    if prompt_lengths_B.min() < 1 or prompt_lengths_B.max() > prompts_BxT.shape[1]:
        raise ValueError(
            f"prompt lengths must lie in [1, {prompts_BxT.shape[1]}] (the prompt width); "
            f"got {prompt_lengths_B.tolist()}"
        )
    if not (isinstance(max_new_tokens, int) and max_new_tokens >= 1):
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if interventions is not None and interventions.attn_bias_LxBxHxTxS is not None:
        raise ValueError(
            "generate accepts head_mask/head_mean interventions only, not attn_bias (its T and S change each step)"
        )
    config = model.config
    # The last generated token is never fed back, so the largest position fed is length + new - 2.
    last_position = int(prompt_lengths_B.max()) + max_new_tokens - 2
    if config.position_scheme.learned_table and last_position >= config.max_positions:
        raise ValueError(
            f"decoding would feed position {last_position} (longest prompt {int(prompt_lengths_B.max())} + "
            f"{max_new_tokens} new tokens), beyond the learned position table of {config.max_positions} rows; "
            "lower max_new_tokens or use a model with a larger max_positions"
        )
    tokens_BxT, positions_BxT, mask_BxT = left_align(prompts_BxT, prompt_lengths_B, pad_id)
    graphdef, state = nnx.split(model)
    return _greedy(
        graphdef,
        state,
        tokens_BxT,
        positions_BxT,
        mask_BxT,
        prompt_lengths_B.astype(np.int32),
        -1 if eos_id is None else eos_id,
        pad_id,
        interventions,
        max_new_tokens=max_new_tokens,
        use_cache=use_cache,
    )


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "use_cache"))
def _greedy(
    graphdef,
    state,
    tokens_BxT,
    positions_BxT,
    mask_BxT,
    prompt_lengths_B,
    eos_id,
    pad_id,
    interventions,
    *,
    max_new_tokens,
    use_cache,
):
    model = nnx.merge(graphdef, state)
    B, T = tokens_BxT.shape
    length = T + max_new_tokens - 1  # slots for the prompt and every generated token but the last

    if use_cache:
        first = model(
            tokens_BxT,
            positions_BxT,
            mask_BxT,
            cache=model.init_cache(B, length),
            interventions=interventions,
            last_logits_only=True,
        )
        logits_BxV, context = first.logits_BxTxV[:, -1], first.cache

        def advance(cache, token_B, step):
            position_Bx1 = (prompt_lengths_B + step - 1)[:, None]
            output = model(token_B[:, None], position_Bx1, cache=cache, interventions=interventions)
            return output.logits_BxTxV[:, -1], output.cache
    else:
        # The whole sequence lives in a fixed buffer; slots after the current one do not matter
        # (causality), so one compiled forward pass serves every step.
        new_slots = jnp.arange(1, length - T + 1)
        buffer = (
            jnp.pad(tokens_BxT, ((0, 0), (0, length - T)), constant_values=pad_id),
            jnp.concatenate([positions_BxT, positions_BxT[:, -1:] + new_slots], axis=1),
            jnp.pad(mask_BxT, ((0, 0), (0, length - T)), constant_values=True),
        )
        logits_BxV, context = model(*buffer, interventions=interventions).logits_BxTxV[:, T - 1], buffer

        def advance(buffer, token_B, step):
            slot = T + step - 1
            tokens_BxS = buffer[0].at[:, slot].set(token_B)
            logits_BxSxV = model(tokens_BxS, buffer[1], buffer[2], interventions=interventions).logits_BxTxV
            return logits_BxSxV[:, slot], (tokens_BxS, buffer[1], buffer[2])

    def record(step, token_B, tokens_BxN, done_B, lengths_B):
        tokens_BxN = tokens_BxN.at[:, step].set(jnp.where(done_B, pad_id, token_B))
        return tokens_BxN, done_B | (token_B == eos_id), lengths_B + ~done_B

    token_B = jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
    written = record(
        0, token_B, jnp.full((B, max_new_tokens), pad_id, jnp.int32), jnp.zeros(B, bool), jnp.zeros(B, jnp.int32)
    )

    def keep_going(carry):
        step, _, _, (_, done_B, _) = carry
        return (step < max_new_tokens) & ~done_B.all()

    def decode_step(carry):
        step, context, token_B, written = carry
        logits_BxV, context = advance(context, token_B, step)
        token_B = jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
        return step + 1, context, token_B, record(step, token_B, *written)

    _, _, _, (tokens_BxN, _, lengths_B) = jax.lax.while_loop(
        keep_going, decode_step, (jnp.asarray(1, jnp.int32), context, token_B, written)
    )
    return Generation(tokens_BxN=tokens_BxN, lengths_B=lengths_B)
