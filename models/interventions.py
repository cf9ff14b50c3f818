"""Interventions passed to the model as data (no hooks): head masks, mean ablation, edge knock-outs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class Interventions:
    """What to change in a forward pass; every field optional, all of them arrays (jit-friendly).

    head_mask_LxH: per layer and head, 1 keeps the head's output, 0 removes it (fractions blend).
        A head's output is its attention-weighted sum of values, before the output projection.
    head_mean_LxHxK: what a removed head outputs instead (mean ablation); None: zeros.
        `mean_head_outputs` computes it over a reference batch.
    attn_bias_LxBxHxTxS: added to the attention logits of layer l, broadcast over B, H, T (queries),
        S (keys). -inf (or a large negative number) knocks an edge out: it gets exactly zero weight.
        Its T and S must match the call (S is the cache length when decoding with a cache).
    """

    head_mask_LxH: jax.Array | None = None
    head_mean_LxHxK: jax.Array | None = None
    attn_bias_LxBxHxTxS: jax.Array | None = None

    def for_layer(self, layer: int) -> LayerInterventions:
        def pick(array):
            return None if array is None else array[layer]

        return LayerInterventions(pick(self.head_mask_LxH), pick(self.head_mean_LxHxK), pick(self.attn_bias_LxBxHxTxS))


@struct.dataclass
class LayerInterventions:
    head_mask_H: jax.Array | None = None
    head_mean_HxK: jax.Array | None = None
    attn_bias_BxHxTxS: jax.Array | None = None


def knockout_bias(edges_LxBxHxTxS: jax.Array) -> jax.Array:
    """An attn_bias that removes the query -> key edges where `edges_LxBxHxTxS` is True (broadcastable)."""
    return jnp.where(jnp.asarray(edges_LxBxHxTxS, bool), -jnp.inf, 0.0)


def mean_head_outputs(model, tokens_BxT, positions_BxT=None, mask_BxT=None) -> jax.Array:
    """Each head's output averaged over the real (mask True) tokens of a reference batch: [L, H, K].

    Pass it as `Interventions(head_mask_LxH=..., head_mean_LxHxK=...)` for mean ablation.
    """
    output = model(tokens_BxT, positions_BxT, mask_BxT, return_head_outputs=True)
    heads_LxBxTxHxK = output.head_outputs_LxBxTxHxK.astype(jnp.float32)
    if mask_BxT is None:
        return heads_LxBxTxHxK.mean(axis=(1, 2))
    weight_BxT = jnp.asarray(mask_BxT, jnp.float32)
    total_LxHxK = jnp.einsum("lbthk,bt->lhk", heads_LxBxTxHxK, weight_BxT)
    return total_LxHxK / weight_BxT.sum()
