"""A decoder-only transformer in Flax NNX: GPT-2, Llama or Gemma 3 blocks; the position encodings of
models.positions (APE, RoPE, NoPE, ALiBi), applied as their table entry says.

One code path serves training, evaluation and KV-cache decoding: positions and the padding mask
are explicit inputs, and causality is decided by cache slot (the order tokens were fed in), so
a position can be any number (random APE offsets, left padding) without breaking it.
"""

from __future__ import annotations

import contextlib
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from crasplab.models.config import ModelConfig
from crasplab.models.interventions import Interventions, LayerInterventions
from crasplab.models.rows import layer_norm, softmax

# The logit bias of a key a query may not see: exp underflows to exactly 0 against any allowed key,
# and a row with no allowed key at all (a left-padding query) gets finite uniform weights, not NaN.
MASKED_LOGIT = -1e30


@struct.dataclass
class KVCache:
    """Keys and values of the tokens fed so far; `Transformer.init_cache` makes an empty one.

    Slot `index` is where the next token goes; valid_BxS marks slots holding real (unmasked) tokens.
    """

    keys_BxSxNxK: tuple[jax.Array, ...]  # one per layer; N = n_kv_heads
    values_BxSxNxK: tuple[jax.Array, ...]
    valid_BxS: jax.Array
    positions_BxS: jax.Array  # the position of each key (read by encodings that bias scores)
    index: jax.Array  # int32 scalar

    @property
    def length(self) -> int:
        return self.valid_BxS.shape[1]


@struct.dataclass
class ModelOutput:
    logits_BxTxV: jax.Array  # float32
    attention_LxBxHxTxS: jax.Array | None = None  # softmax weights, when return_attention
    head_outputs_LxBxTxHxK: jax.Array | None = None  # per-head outputs, when return_head_outputs
    cache: KVCache | None = None  # the updated cache, when one was passed in


def _dense(config: ModelConfig, rngs: nnx.Rngs, d_in: int, d_out: int, use_bias: bool, std: float) -> nnx.Linear:
    return nnx.Linear(
        d_in,
        d_out,
        use_bias=use_bias,
        dtype=config.compute_dtype,
        param_dtype=jnp.float32,
        kernel_init=nnx.initializers.normal(std),
        bias_init=nnx.initializers.zeros,
        rngs=rngs,
    )


class LayerNorm(nnx.LayerNorm):
    """nnx.LayerNorm's parameters and function (up to rounding), written out as torch computes it:
    (x - mean) * rsqrt(mean((x - mean)^2) + eps) * scale + bias, statistics in float32 at least.
    flax's general statistics subtract the mean twice and multiply the scale into the reciprocal
    standard deviation first; written out, the quick training step compiles to fewer elementwise
    ops and takes about 10% less time on one core (measured in docs/calibration.md). Its backward
    pass is written out too, with row sums that a CPU takes faster (models.rows)."""

    def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
        x32_BxTxD = x_BxTxD.astype(jnp.promote_types(x_BxTxD.dtype, jnp.float32))
        normalized_BxTxD = layer_norm(x32_BxTxD, self.scale[...], self.bias[...], self.epsilon)
        return normalized_BxTxD.astype(self.dtype or x32_BxTxD.dtype)


class OffsetRMSNorm(nnx.Module):
    """Gemma's RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + scale), statistics in float32 at least
    (as Hugging Face's Gemma3RMSNorm); the scale starts at zero, so the norm starts as a plain one."""

    def __init__(self, width: int, config: ModelConfig):
        self.scale = nnx.Param(jnp.zeros((width,), jnp.float32))
        self.epsilon, self.dtype = config.norm_eps, config.stream_dtype

    def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
        x32_BxTxD = x_BxTxD.astype(jnp.promote_types(x_BxTxD.dtype, jnp.float32))
        mean_square_BxTx1 = (x32_BxTxD * x32_BxTxD).mean(-1, keepdims=True)
        normalized_BxTxD = x32_BxTxD * jax.lax.rsqrt(mean_square_BxTx1 + self.epsilon)
        return (normalized_BxTxD * (1 + self.scale[...])).astype(self.dtype)


def _norm(config: ModelConfig, rngs: nnx.Rngs) -> nnx.Module:
    if config.block == "gemma3":
        return OffsetRMSNorm(config.d_model, config)
    if config.block == "gpt2":
        return LayerNorm(
            config.d_model,
            epsilon=config.norm_eps,
            dtype=config.stream_dtype,
            param_dtype=jnp.float32,
            rngs=rngs,
        )
    return nnx.RMSNorm(
        config.d_model, epsilon=config.norm_eps, dtype=config.stream_dtype, param_dtype=jnp.float32, rngs=rngs
    )


def _residual_std(config: ModelConfig) -> float:
    # GPT-2's scaling of the projections that write into the residual stream.
    return config.init_std / math.sqrt(2 * config.n_layers)


class Attention(nnx.Module):
    def __init__(self, config: ModelConfig, rngs: nnx.Rngs, layer: int):
        self.config = config
        self.rope_base = config.layer_rope_base(layer)
        self.windowed = config.windowed_layer(layer)
        q_width, kv_width = config.n_heads * config.head_dim, config.kv_heads * config.head_dim
        qkv_bias = config.block == "gpt2" or config.qkv_bias
        std = config.init_std
        self.q = _dense(config, rngs, config.d_model, q_width, qkv_bias, std)
        self.k = _dense(config, rngs, config.d_model, kv_width, qkv_bias, std)
        self.v = _dense(config, rngs, config.d_model, kv_width, qkv_bias, std)
        self.o = _dense(config, rngs, q_width, config.d_model, config.block == "gpt2", _residual_std(config))
        self.normed_queries_and_keys = config.block == "gemma3"
        if self.normed_queries_and_keys:
            self.q_norm = OffsetRMSNorm(config.head_dim, config)
            self.k_norm = OffsetRMSNorm(config.head_dim, config)

    def _project_qkv(self, x_BxTxD):
        """Queries, keys and values from one matrix product with the three kernels side by side:
        on a CPU one wider product (and one in the backward pass) costs less than three narrow ones."""
        c = self.config
        B, T, _ = x_BxTxD.shape
        projections = (self.q, self.k, self.v)
        kernel_DxW = jnp.concatenate([p.kernel[...] for p in projections], axis=1)
        qkv_BxTxW = jnp.dot(x_BxTxD.astype(c.compute_dtype), kernel_DxW.astype(c.compute_dtype))
        if self.q.bias is not None:
            qkv_BxTxW = qkv_BxTxW + jnp.concatenate([p.bias[...] for p in projections]).astype(c.compute_dtype)
        q_width, kv_width = c.n_heads * c.head_dim, c.kv_heads * c.head_dim
        q, k, v = jnp.split(qkv_BxTxW, [q_width, q_width + kv_width], axis=-1)
        return (
            q.reshape(B, T, c.n_heads, c.head_dim),
            k.reshape(B, T, c.kv_heads, c.head_dim),
            v.reshape(B, T, c.kv_heads, c.head_dim),
        )

    def __call__(
        self, x_BxTxD, positions_BxT, score_bias_BxHxTxS, interventions: LayerInterventions, cache_kv, cache_index
    ):
        """Returns (output_BxTxD, weights_BxHxTxS, heads_BxTxHxK, (keys_BxSxNxK, values_BxSxNxK))."""
        c = self.config
        B, T, _ = x_BxTxD.shape
        H, N, K = c.n_heads, c.kv_heads, c.head_dim
        q_BxTxHxK, k_BxTxNxK, v_BxTxNxK = self._project_qkv(x_BxTxD)
        if self.normed_queries_and_keys:
            q_BxTxHxK, k_BxTxNxK = self.q_norm(q_BxTxHxK), self.k_norm(k_BxTxNxK)
        if c.position_scheme.rotate is not None:
            q_BxTxHxK, k_BxTxNxK = c.position_scheme.rotate(q_BxTxHxK, k_BxTxNxK, positions_BxT, c, self.rope_base)
        if cache_kv is None:
            keys_BxSxNxK, values_BxSxNxK = k_BxTxNxK, v_BxTxNxK
        else:
            keys_BxSxNxK = jax.lax.dynamic_update_slice(
                cache_kv[0], k_BxTxNxK.astype(cache_kv[0].dtype), (0, cache_index, 0, 0)
            )
            values_BxSxNxK = jax.lax.dynamic_update_slice(
                cache_kv[1], v_BxTxNxK.astype(cache_kv[1].dtype), (0, cache_index, 0, 0)
            )
        S = keys_BxSxNxK.shape[1]
        G = H // N
        # Scaling the queries (B*T*H*K numbers) is cheaper than scaling the logits (B*H*T*S).
        q_BxTxHxK = q_BxTxHxK * jnp.asarray(1 / math.sqrt(K), q_BxTxHxK.dtype)
        if G == 1:
            logits_BxHxTxS = jnp.einsum("bthk,bshk->bhts", q_BxTxHxK, keys_BxSxNxK, preferred_element_type=jnp.float32)
        else:
            # Query head h reads kv head h // G (grouped-query attention, as Hugging Face's repeat_kv).
            logits_BxHxTxS = jnp.einsum(
                "btngk,bsnk->bngts", q_BxTxHxK.reshape(B, T, N, G, K), keys_BxSxNxK, preferred_element_type=jnp.float32
            ).reshape(B, H, T, S)
        logits_BxHxTxS = logits_BxHxTxS + score_bias_BxHxTxS
        if interventions.attn_bias_BxHxTxS is not None:
            # A finite floor: a row whose every key is knocked out (-inf) gets uniform weights, not NaN.
            logits_BxHxTxS = jnp.maximum(logits_BxHxTxS + interventions.attn_bias_BxHxTxS, MASKED_LOGIT)
        weights_BxHxTxS = softmax(logits_BxHxTxS).astype(values_BxSxNxK.dtype)
        if G == 1:
            heads_BxTxHxK = jnp.einsum("bhts,bshk->bthk", weights_BxHxTxS, values_BxSxNxK)
        else:
            heads_BxTxHxK = jnp.einsum(
                "bngts,bsnk->btngk", weights_BxHxTxS.reshape(B, N, G, T, S), values_BxSxNxK
            ).reshape(B, T, H, K)
        if interventions.head_mask_H is not None:
            keep_Hx1 = jnp.asarray(interventions.head_mask_H, heads_BxTxHxK.dtype)[:, None]
            replacement = 0.0 if interventions.head_mean_HxK is None else interventions.head_mean_HxK
            heads_BxTxHxK = heads_BxTxHxK * keep_Hx1 + (1 - keep_Hx1) * jnp.asarray(replacement, heads_BxTxHxK.dtype)
        output_BxTxD = self.o(heads_BxTxHxK.reshape(B, T, H * K))
        return output_BxTxD, weights_BxHxTxS, heads_BxTxHxK, (keys_BxSxNxK, values_BxSxNxK)


class GeluMLP(nnx.Module):
    def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
        self.fc = _dense(config, rngs, config.d_model, config.d_ff, True, config.init_std)
        self.proj = _dense(config, rngs, config.d_ff, config.d_model, True, _residual_std(config))

    def __call__(self, x_BxTxD):
        return self.proj(jax.nn.gelu(self.fc(x_BxTxD), approximate=True))  # GPT-2's "gelu_new"


class GatedMLP(nnx.Module):
    """down(activation(gate(x)) * up(x)): SwiGLU (Llama) or, with tanh GELU, GeGLU (Gemma 3)."""

    def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
        self.gate = _dense(config, rngs, config.d_model, config.d_ff, False, config.init_std)
        self.up = _dense(config, rngs, config.d_model, config.d_ff, False, config.init_std)
        self.down = _dense(config, rngs, config.d_ff, config.d_model, False, _residual_std(config))
        self.geglu = config.block == "gemma3"

    def __call__(self, x_BxTxD):
        gate_BxTxF = self.gate(x_BxTxD)
        activated_BxTxF = jax.nn.gelu(gate_BxTxF, approximate=True) if self.geglu else jax.nn.silu(gate_BxTxF)
        return self.down(activated_BxTxF * self.up(x_BxTxD))


class Block(nnx.Module):
    """Pre-norm residual block: x + attn(attn_norm(x)), then + mlp(mlp_norm(.)). Gemma 3 also
    normalizes each branch's output before adding it (post_attn_norm, post_mlp_norm)."""

    def __init__(self, config: ModelConfig, rngs: nnx.Rngs, layer: int):
        self.attn_norm = _norm(config, rngs)
        self.attn = Attention(config, rngs, layer)
        self.mlp_norm = _norm(config, rngs)
        self.mlp = GeluMLP(config, rngs) if config.block == "gpt2" else GatedMLP(config, rngs)
        self.normed_outputs = config.block == "gemma3"
        if self.normed_outputs:
            self.post_attn_norm = _norm(config, rngs)
            self.post_mlp_norm = _norm(config, rngs)

    def __call__(self, x_BxTxD, positions_BxT, score_bias_BxHxTxS, interventions, cache_kv, cache_index):
        attended, weights, heads, kv = self.attn(
            self.attn_norm(x_BxTxD), positions_BxT, score_bias_BxHxTxS, interventions, cache_kv, cache_index
        )
        if self.normed_outputs:
            attended = self.post_attn_norm(attended)
        x_BxTxD = x_BxTxD + attended
        transformed = self.mlp(self.mlp_norm(x_BxTxD))
        if self.normed_outputs:
            transformed = self.post_mlp_norm(transformed)
        return x_BxTxD + transformed, weights, heads, kv


def _check_indices(ids, limit: int, what: str, hint: str) -> None:
    """Raise if a concrete index array leaves [0, limit). Traced arrays (under jit) cannot be
    checked here; their out-of-range lookups give NaN instead (see `_lookup`)."""
    if isinstance(ids, jax.core.Tracer):
        return
    ids = np.asarray(ids)
    outside = (ids < 0) | (ids >= limit)
    if outside.any():
        where = tuple(int(i) for i in np.argwhere(outside)[0])
        raise ValueError(
            f"{what} {int(ids[where])} at index {where} is outside the accepted range [0, {limit}); {hint}"
        )


def _lookup(table_NxD: jax.Array, ids) -> jax.Array:
    # jnp indexing would clip an out-of-range id to the last row silently; NaN makes it loud.
    return jnp.take(table_NxD, jnp.asarray(ids), axis=0, mode="fill", fill_value=jnp.nan)


def _under_matmul_precision(forward):
    """`forward` traced under the config's matrix-product precision (ModelConfig.matmul_precision):
    jax writes the precision into each product as it is traced, and the gradient's products take
    the forward products' precision, so training, evaluation and decoding all compute under it."""

    @functools.wraps(forward)
    def traced(self, *args, **kwargs):
        precision = self.config.matmul_precision
        with contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision):
            return forward(self, *args, **kwargs)

    return traced


class Transformer(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        embed_init = nnx.initializers.normal(config.init_std)
        self.embed = nnx.Embed(
            config.vocab_size,
            config.d_model,
            dtype=config.compute_dtype,
            param_dtype=jnp.float32,
            embedding_init=embed_init,
            rngs=rngs,
        )
        if config.position_scheme.learned_table:
            self.pos_embed = nnx.Embed(
                config.max_positions, config.d_model, param_dtype=jnp.float32, embedding_init=embed_init, rngs=rngs
            )
        self.layers = nnx.List([Block(config, rngs, layer) for layer in range(config.n_layers)])
        self.final_norm = _norm(config, rngs)
        if not config.tie_embeddings:
            self.lm_head = _dense(config, rngs, config.d_model, config.vocab_size, False, config.init_std)

    def init_cache(self, batch_size: int, length: int) -> KVCache:
        c = self.config
        empty = jnp.zeros((batch_size, length, c.kv_heads, c.head_dim), c.compute_dtype)
        return KVCache(
            keys_BxSxNxK=(empty,) * c.n_layers,
            values_BxSxNxK=(empty,) * c.n_layers,
            valid_BxS=jnp.zeros((batch_size, length), bool),
            positions_BxS=jnp.zeros((batch_size, length), jnp.int32),
            index=jnp.zeros((), jnp.int32),
        )

    def embed_inputs(self, tokens_BxT, positions_BxT) -> jax.Array:
        """Token embeddings (+ the learned row of each position): the input of `forward_embeddings`."""
        c = self.config
        _check_indices(tokens_BxT, c.vocab_size, "token id", "it must be a valid id of the vocabulary")
        x_BxTxD = _lookup(self.embed.embedding[...], tokens_BxT)
        if c.block == "gemma3":
            x_BxTxD = x_BxTxD * jnp.float32(math.sqrt(c.d_model))
        if c.position_scheme.learned_table:
            _check_indices(
                positions_BxT,
                c.max_positions,
                "position",
                "the learned position table (ModelConfig.max_positions) has no row for it; "
                "use shorter sequences or smaller offsets, or a model with a larger table",
            )
            x_BxTxD = x_BxTxD + _lookup(self.pos_embed.embedding[...], positions_BxT)
        return x_BxTxD.astype(c.stream_dtype)

    def __call__(
        self,
        tokens_BxT,
        positions_BxT=None,
        mask_BxT=None,
        *,
        cache: KVCache | None = None,
        interventions: Interventions | None = None,
        return_attention: bool = False,
        return_head_outputs: bool = False,
        last_logits_only: bool = False,
    ) -> ModelOutput:
        """Logits for every position (only the last: logits_BxTxV with T = 1, when
        last_logits_only, which spares a large vocabulary's output matrix all but one row per
        sequence). positions default to the slot numbers (0..T-1, or cache.index.. when
        decoding); mask_BxT (True: real token) defaults to all True."""
        if positions_BxT is None:
            start = 0 if cache is None else cache.index
            positions_BxT = jnp.broadcast_to(start + jnp.arange(tokens_BxT.shape[1]), tokens_BxT.shape)
        return self.forward_embeddings(
            self.embed_inputs(tokens_BxT, positions_BxT),
            positions_BxT,
            mask_BxT,
            cache=cache,
            interventions=interventions,
            return_attention=return_attention,
            return_head_outputs=return_head_outputs,
            last_logits_only=last_logits_only,
        )

    @_under_matmul_precision
    def forward_embeddings(
        self,
        x_BxTxD,
        positions_BxT,
        mask_BxT=None,
        *,
        cache: KVCache | None = None,
        interventions: Interventions | None = None,
        return_attention: bool = False,
        return_head_outputs: bool = False,
        last_logits_only: bool = False,
    ) -> ModelOutput:
        """The model after the embedding lookup (used for gradients with respect to embeddings)."""
        B, T, _ = x_BxTxD.shape
        mask_BxT = jnp.ones((B, T), bool) if mask_BxT is None else jnp.asarray(mask_BxT, bool)
        interventions = Interventions() if interventions is None else interventions
        positions_BxT = jnp.asarray(positions_BxT, jnp.int32)
        if cache is None:
            first_slot, key_valid_BxS, key_positions_BxS = 0, mask_BxT, positions_BxT
        else:
            if not isinstance(cache.index, jax.core.Tracer) and int(cache.index) + T > cache.length:
                raise ValueError(
                    f"KV cache overflow: {int(cache.index)} slots used + {T} new tokens > cache length {cache.length}"
                )
            first_slot = cache.index
            key_valid_BxS = jax.lax.dynamic_update_slice(cache.valid_BxS, mask_BxT, (0, cache.index))
            key_positions_BxS = jax.lax.dynamic_update_slice(cache.positions_BxS, positions_BxT, (0, cache.index))
        query_slots_T = first_slot + jnp.arange(T)
        key_slots_S = jnp.arange(key_valid_BxS.shape[1])
        allowed_BxTxS = key_valid_BxS[:, None, :] & (key_slots_S[None, None, :] <= query_slots_T[None, :, None])
        # Added to every layer's logits: computed once here, not as a select in each layer.
        score_bias_BxHxTxS = jnp.where(allowed_BxTxS, 0.0, MASKED_LOGIT)[:, None]
        if self.config.position_scheme.score_bias is not None:
            score_bias_BxHxTxS = score_bias_BxHxTxS + self.config.position_scheme.score_bias(
                positions_BxT, key_positions_BxS, self.config
            )
        windowed_bias_BxHxTxS = self._windowed_bias(score_bias_BxHxTxS, positions_BxT, key_positions_BxS)

        all_weights, all_heads, all_keys, all_values = [], [], [], []
        for layer_index, layer in enumerate(self.layers):
            cache_kv = None if cache is None else (cache.keys_BxSxNxK[layer_index], cache.values_BxSxNxK[layer_index])
            x_BxTxD, weights, heads, (keys, values) = layer(
                x_BxTxD,
                positions_BxT,
                windowed_bias_BxHxTxS if layer.attn.windowed else score_bias_BxHxTxS,
                interventions.for_layer(layer_index),
                cache_kv,
                first_slot,
            )
            all_weights.append(weights)
            all_heads.append(heads)
            all_keys.append(keys)
            all_values.append(values)

        x_BxTxD = self.final_norm(x_BxTxD[:, -1:] if last_logits_only else x_BxTxD)
        logits_BxTxV = self._output_logits(x_BxTxD)
        new_cache = (
            None
            if cache is None
            else KVCache(tuple(all_keys), tuple(all_values), key_valid_BxS, key_positions_BxS, cache.index + T)
        )
        return ModelOutput(
            logits_BxTxV=logits_BxTxV.astype(jnp.float32),
            attention_LxBxHxTxS=jnp.stack(all_weights) if return_attention else None,
            head_outputs_LxBxTxHxK=jnp.stack(all_heads) if return_head_outputs else None,
            cache=new_cache,
        )

    def _output_logits(self, x_BxTxD) -> jax.Array:
        c = self.config
        if c.stream_dtype == c.compute_dtype:
            return self.embed.attend(x_BxTxD) if c.tie_embeddings else self.lm_head(x_BxTxD)
        # bfloat16-mixed: the products of bfloat16 operands summed into float32 logits, for a float32 loss.
        table_DxV = self.embed.embedding[...].T if c.tie_embeddings else self.lm_head.kernel[...]
        operands = (x_BxTxD.astype(c.compute_dtype), table_DxV.astype(c.compute_dtype))
        return jnp.dot(*operands, preferred_element_type=jnp.float32)

    def _windowed_bias(self, score_bias_BxHxTxS, query_positions_BxT, key_positions_BxS):
        """The score bias of a windowed layer: also masks keys sliding_window or more positions
        back. Positions, not cache slots, so left padding does not narrow the window (llama.cpp
        counts positions too)."""
        window = self.config.sliding_window
        if window is None:
            return None
        distance_BxTxS = query_positions_BxT[:, :, None] - key_positions_BxS[:, None, :]
        return jnp.where((distance_BxTxS < window)[:, None], score_bias_BxHxTxS, MASKED_LOGIT)
