"""Position encodings on the model side: one entry per encoding, and the function that applies it.

An encoding acts in at most three places, and its entry says which:
- `learned_table`: a learned row per absolute position added to the token embedding (APE); the
  table bounds the positions a model can read (ModelConfig.max_positions).
- `rotate`: queries and keys rotated by their positions before the scores (RoPE).
- `score_bias`: a bias on the attention scores computed from query and key positions (ALiBi),
  shared by every layer and read from the positions the KV cache keeps.
The transformer asks the entry, never the name. This is the model layer's part of an encoding's
row, whose identity (name, theorem) is crasp.position_encodings; the other layers' parts and the
test that every encoding has every one are in docs/layout.md ("Position encodings").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from crasplab.models.config import ModelConfig


def apply_rope(x_BxTxHxK: jax.Array, positions_BxT: jax.Array, base: float, rotary_dim: int) -> jax.Array:
    """Rotary embedding in the Hugging Face "rotate_half" layout on the first `rotary_dim` dims.

    Dimension i of the rotated part pairs with i + rotary_dim/2 (not with its neighbour, as in
    the interleaved GPT-J/llama.cpp layout); dims past rotary_dim pass through (partial rotary).
    """
    half = rotary_dim // 2
    inv_freq_R = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles_BxTx1xR = (positions_BxT.astype(jnp.float32)[..., None] * inv_freq_R)[:, :, None, :]
    cos, sin = jnp.cos(angles_BxTx1xR), jnp.sin(angles_BxTx1xR)
    x1 = x_BxTxHxK[..., :half].astype(jnp.float32)
    x2 = x_BxTxHxK[..., half:rotary_dim].astype(jnp.float32)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return jnp.concatenate([rotated.astype(x_BxTxHxK.dtype), x_BxTxHxK[..., rotary_dim:]], axis=-1)


def _rotate_queries_and_keys(q_BxTxHxK, k_BxTxNxK, positions_BxT, config: ModelConfig, base: float):
    return (
        apply_rope(q_BxTxHxK, positions_BxT, base, config.rotary_dim),
        apply_rope(k_BxTxNxK, positions_BxT, base, config.rotary_dim),
    )


def alibi_slopes(n_heads: int) -> jax.Array:
    """Press et al. 2022: for 2^k heads the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^-8; for
    other counts the slopes of the nearest smaller power of two, then every other slope of twice
    that many heads."""

    def geometric(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    power = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = geometric(power) + geometric(2 * power)[0::2][: n_heads - power]
    return jnp.asarray(slopes, jnp.float32)


def _alibi_bias(query_positions_BxT, key_positions_BxS, config: ModelConfig):
    # The distance is counted in positions, not cache slots, so left padding leaves it unchanged.
    distance_BxTxS = query_positions_BxT[:, :, None] - key_positions_BxS[:, None, :]
    return -alibi_slopes(config.n_heads)[None, :, None, None] * distance_BxTxS[:, None].astype(jnp.float32)


@dataclass(frozen=True)
class PositionScheme:
    code: str  # ModelConfig.position; the same codes as crasp.position_encodings
    learned_table: bool = False
    # (q_BxTxHxK, k_BxTxNxK, positions_BxT, config, base) -> (q, k), applied in every layer with
    # that layer's base (config.layer_rope_base)
    rotate: Callable | None = None
    # (query_positions_BxT, key_positions_BxS, config) -> float32 bias_BxHxTxS, computed once per call
    score_bias: Callable | None = None


SCHEMES: dict[str, PositionScheme] = {
    s.code: s
    for s in (
        PositionScheme("ape", learned_table=True),
        PositionScheme("rope", rotate=_rotate_queries_and_keys),
        PositionScheme("nope"),
        PositionScheme("alibi", score_bias=_alibi_bias),
    )
}
POSITIONS: tuple[str, ...] = tuple(SCHEMES)
