"""The lowered program (crasplab.compiler.plan) as a ModelConfig and the weights of the lab's Transformer.

Llama blocks: RMSNorm, SwiGLU MLP, no biases (the constant feature 1 plays the bias). Every
RMSNorm gets eps = 2**100 and scale 2**50, so it computes x * 2**-50 * 2**50 = x exactly in
float32 and float64 (the residual's mean square is negligible beside eps): pre-norm blocks then
add plain sums, and averaging heads stay exact averages. The logits are +LOGIT where the output
table is true and -LOGIT where it is false: the table is `logits > 0`, with no-output and
ambiguous positions visible as rows without or with several positive logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from crasplab.compiler.lower import BOS, ROPE_BASE, ROPE_DIM, STEP_OFFSET, CompileError, Lowering
from crasplab.compiler.plan import ONE, START, Affine, HeadGroup, Step
from crasplab.models.config import ModelConfig

NORM_EPS, NORM_SCALE = 2.0**100, 2.0**50
LOGIT = 8.0
MIN_HEAD_DIM = 16
MAX_PARAMETERS = 200_000_000


@dataclass(frozen=True)
class PlacedHead:
    layer: int
    index: int  # head number within the layer
    group: HeadGroup
    channels: tuple[int, ...]  # which of the group's channels this head carries


def _rotates(lowering: Lowering) -> bool:
    return lowering.scheme.rotate is not None


def _qk_start(group: HeadGroup, rotates: bool) -> int:
    """A rotation (RoPE) turns the first ROPE_DIM dimensions of every head: only a local head that
    relies on it uses them."""
    return 0 if group.rotary or not rotates else ROPE_DIM


def head_dim(lowering: Lowering) -> int:
    rotates = _rotates(lowering)
    needed = [_qk_start(g, rotates) + len(g.query) for g in lowering.groups.values() if g.query]
    size = max([MIN_HEAD_DIM, ROPE_DIM + 1 if rotates else 0] + needed)
    return size + size % 2


def place_heads(lowering: Lowering, size: int) -> list[PlacedHead]:
    placed, used = [], {}
    for group in sorted(lowering.groups.values(), key=lambda g: g.layer):
        for first in range(0, len(group.channels), size):
            index = used.get(group.layer, 0)
            used[group.layer] = index + 1
            placed.append(
                PlacedHead(group.layer, index, group, tuple(range(first, min(first + size, len(group.channels)))))
            )
    return placed


def _write(matrix: np.ndarray, column: int, form: Affine, scale: float = 1.0) -> None:
    for feature, coefficient in form.items():
        matrix[feature, column] += scale * coefficient


def _write_step(step: Step, unit: int, gate: np.ndarray, up: np.ndarray, down: np.ndarray) -> None:
    """A step's SwiGLU units from column `unit` on: silu(gain * z + shift) * 1, scaled into its output."""
    T = STEP_OFFSET
    units = ((0.0, 1 / step.gain),) if step.ramp else ((T, 1 / (2 * T)), (-T, -1 / (2 * T)))  # (shift, out)
    for k, (shift, scale) in enumerate(units):
        _write(gate, unit + k, step.z, step.gain)
        gate[ONE, unit + k] += shift
        up[ONE, unit + k] = 1
        down[unit + k, step.output] = scale * step.weight


def position_table(lowering: Lowering, rows: int) -> np.ndarray:
    """APE rows p = 0..rows-1 (position i = p + 1): first-position flag, MOD flags, i > c flags and
    the cosine codes of local heads (key codes 0 at position 1, the sink)."""
    table = np.zeros((rows, len(lowering.features)))
    p = np.arange(rows)
    table[:, START] = p == 0
    for key, feature in lowering.position_flags.items():
        kind, number = key[0], key[1]
        if kind == "mod":
            table[:, feature] = (p + 1) % number == key[2]
        elif kind == "from":
            table[:, feature] = p >= number
        else:
            wave = np.cos if kind.endswith("cos") else np.sin
            table[:, feature] = wave(2 * np.pi * p / number) * ((p > 0) if kind.startswith("key") else 1)
    return table


def build_weights(
    lowering: Lowering, columns: list[Affine], dtype: str
) -> tuple[ModelConfig, dict[str, np.ndarray], list[PlacedHead]]:
    D, V = len(lowering.features), len(lowering.alphabet)
    rotates, tabled = _rotates(lowering), lowering.scheme.learned_table
    K = head_dim(lowering)
    heads = place_heads(lowering, K)
    layers = 1 + max([h.layer for h in heads] + [s.layer for s in lowering.steps] + [0])
    H = max([h.index + 1 for h in heads] + [1])
    units_per_layer = [sum(s.units for s in lowering.steps if s.layer == layer) for layer in range(layers)]
    F = max(units_per_layer + [1])
    size = layers * (4 * D * H * K + 3 * D * F) + 2 * D * V
    if size > MAX_PARAMETERS:
        raise CompileError(
            f"the compiled model would have about {size:,} parameters (d_model {D}, {layers} layers, "
            f"d_ff {F}): families over {V} symbols unrolled without the keyed-head rewrite; "
            "write the count as `any t: Q(t) and #[j <= i] (K[t] and R) >= 1` with K one-hot in t"
        )
    config = ModelConfig(
        vocab_size=V,
        d_model=D,
        n_layers=layers,
        n_heads=H,
        d_head=K,
        d_ff=F,
        block="llama",
        position=lowering.pe,
        max_positions=lowering.max_length,
        rope_base=ROPE_BASE,
        rope_dim=ROPE_DIM if rotates else None,
        qkv_bias=False,
        tie_embeddings=False,
        norm_eps=NORM_EPS,
        dtype=dtype,
    )
    params: dict[str, np.ndarray] = {}
    embedding = np.zeros((V, D))
    embedding[:, ONE] = 1
    for k, a in enumerate(lowering.alphabet):
        embedding[k, lowering.token[a]] = 1
        if not tabled and a == BOS:
            embedding[k, START] = 1
    params["embed.embedding"] = embedding
    if tabled:
        params["pos_embed.embedding"] = position_table(lowering, lowering.max_length)
    score_scale = math.sqrt(K)  # the model divides scores by sqrt(d_head)
    for layer in range(layers):
        q, k, v, o = (np.zeros((D, H * K)), np.zeros((D, H * K)), np.zeros((D, H * K)), np.zeros((H * K, D)))
        for head in (h for h in heads if h.layer == layer):
            base, start = head.index * K, _qk_start(head.group, rotates)
            for d, (query, key) in enumerate(zip(head.group.query, head.group.key)):
                _write(q, base + start + d, query, score_scale)
                _write(k, base + start + d, key)
            for slot, channel in enumerate(head.channels):
                value, output, _ = head.group.channels[channel]
                _write(v, base + slot, value)
                o[base + slot, output] = 1
        gate, up, down = np.zeros((D, F)), np.zeros((D, F)), np.zeros((F, D))
        unit = 0
        for step in (s for s in lowering.steps if s.layer == layer):
            _write_step(step, unit, gate, up, down)
            unit += step.units
        prefix = f"layers.{layer}"
        params.update(
            {
                f"{prefix}.attn.q.kernel": q,
                f"{prefix}.attn.k.kernel": k,
                f"{prefix}.attn.v.kernel": v,
                f"{prefix}.attn.o.kernel": o,
                f"{prefix}.mlp.gate.kernel": gate,
                f"{prefix}.mlp.up.kernel": up,
                f"{prefix}.mlp.down.kernel": down,
                f"{prefix}.attn_norm.scale": np.full(D, NORM_SCALE),
                f"{prefix}.mlp_norm.scale": np.full(D, NORM_SCALE),
            }
        )
    params["final_norm.scale"] = np.full(D, NORM_SCALE)
    head_out = np.zeros((D, V))
    for s, column in enumerate(columns):
        _write(head_out, s, column, 2 * LOGIT)
        head_out[ONE, s] -= LOGIT
    params["lm_head.kernel"] = head_out
    return config, params, heads
