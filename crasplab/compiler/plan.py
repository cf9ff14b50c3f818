"""What a compiled transformer computes, before it becomes weights: residual features, heads, MLP steps.

Every value the program computes lives in its own dimension of the residual stream (a *feature*),
written once and never overwritten, so the final residual holds every definition and a probe is
a dot product. A Boolean is an affine form over features whose value is 0 or 1 (`not P` is
`1 - P`, a comparison `=` is `step_1 + step_2 - 1`); a count is an affine form over features that
hold it divided by the position i (`#[j <= i] P` is the average of P over j <= i), or, for a
local count, the count itself (0 or 1).

Levels say when a feature exists: 0 after the embedding, 2l + 1 after layer l's attention and
2l + 2 after its MLP. A head of layer l reads features of level <= 2l; an MLP unit of layer l
reads features of level <= 2l + 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Affine = dict[int, float]  # feature index -> coefficient

ONE, START = 0, 1  # the constant 1 and the flag of the first position


@dataclass
class Feature:
    name: str  # what the dimension holds, as the listing prints it
    level: int
    source: str  # "token", "position", "head" or "mlp"


@dataclass
class HeadGroup:
    """Heads of one layer that share one attention pattern; each value channel is one feature.

    kind "uniform": every score 0, the average over j <= i. "local": the score peaks at
    j = i - offset, with the first position as the sink where no such j exists. "keyed": the score
    is `match` where the key one-hot equals the query one-hot, `sink` at the first position."""

    layer: int
    kind: str
    label: str
    offset: int | None = None
    query: list[Affine] = field(default_factory=list)  # one per query/key dimension, already scaled
    key: list[Affine] = field(default_factory=list)
    rotary: int = 0  # leading query/key dimensions that RoPE rotates (RoPE local heads)
    channels: list[tuple[Affine, int, str]] = field(default_factory=list)  # (value, output feature, what)


@dataclass
class Step:
    """Two SwiGLU units of one layer: (silu(g + T) - silu(g - T)) / 2T with g = gain * z is 0 or 1
    wherever |z| >= margin (silu equals the identity beyond T/2 and vanishes below -T in float32
    and float64), written into `output` with weight `weight`. A ramp is one unit, silu(g) / gain:
    max(z, 0) wherever z = 0 or |z| >= margin (there |g| >= T)."""

    layer: int
    z: Affine
    gain: float
    output: int
    weight: float
    label: str
    ramp: bool = False

    @property
    def units(self) -> int:
        return 1 if self.ramp else 2
