"""The model configuration: one frozen dataclass, named presets, parameter count and FLOPs."""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

import jax.numpy as jnp

from crasplab.models.positions import POSITIONS, SCHEMES, PositionScheme

Block = Literal["gpt2", "llama", "gemma3"]
BLOCKS: tuple[str, ...] = get_args(Block)
# float64 computes in double precision only with jax_enable_x64 set (compiled C-RASP programs use it for
# their rounding study); without it jax computes in float32. Two recipes for tensor cores beside them:
# "tf32" is float32 whose matrix products may round their operands to TensorFloat-32 (10 mantissa bits,
# float32 sums; where there are no tensor cores, on a CPU, it computes exactly as float32), and
# "bfloat16-mixed" takes the products' operands in bfloat16 but keeps the residual stream, the norms,
# the attention softmax and the logits (so the loss) in float32. Under "bfloat16" the residual stream
# is bfloat16 too. Parameters and optimizer state are float32 under every choice.
DTYPES = {
    "float32": jnp.float32,
    "bfloat16": jnp.bfloat16,
    "float64": jnp.float64,
    "tf32": jnp.float32,
    "bfloat16-mixed": jnp.bfloat16,
}
# The choices a from-scratch training may compute in (float64 only serves compiled programs).
TRAINING_DTYPES = ("float32", "bfloat16", "bfloat16-mixed", "tf32")
MATMUL_PRECISION = {"tf32": "tensorfloat32"}  # jax.default_matmul_precision under the model's forward pass
FLOAT32_STREAM = ("bfloat16-mixed",)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and style of a decoder-only transformer.

    block "gpt2": LayerNorm, GELU (tanh) MLP `mlp.{fc,proj}`, biases on every dense layer and norm.
    block "llama": RMSNorm, SwiGLU MLP `mlp.{gate,up,down}`, no biases except q/k/v when
    `qkv_bias` (Qwen2). Both are pre-norm.
    block "gemma3": RMSNorm scaling by (1 + scale), norms before and after attention and after the
    MLP too, RMSNorm on each head's queries and keys, GeGLU MLP (tanh GELU) `mlp.{gate,up,down}`,
    embeddings scaled by sqrt(d_model), no biases.
    Grouped-query attention when n_kv_heads < n_heads.
    `sliding_window` (any block): layers attend only to keys fewer than that many positions back,
    except every `global_every`-th layer (1-based: Gemma 3's 6th, 12th, ...), which sees all of
    them; the windowed layers rotate by `rope_local_base` (None: rope_base), the others by rope_base.
    `position` is a code of models.positions.SCHEMES: "ape" (learned table of `max_positions`
    rows), "rope" (rotary on the first `rope_dim` dims of each head, Hugging Face rotate_half
    layout), "nope" (none), and any other encoding listed there. `max_positions` is the table size
    of an encoding with a learned table; for the others it is only the context the model was made
    for (recorded, not enforced). `dtype` is the compute dtype; parameters stay float32.
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    n_kv_heads: int | None = None  # None: same as n_heads
    d_head: int | None = None  # None: d_model // n_heads
    block: Block = "gpt2"
    position: str = "ape"
    max_positions: int = 512
    rope_base: float = 10000.0
    rope_dim: int | None = None  # None: the whole head (full rotary)
    qkv_bias: bool = False
    sliding_window: int | None = None  # None: every layer attends to every earlier key
    global_every: int | None = None  # with sliding_window; None: every layer is windowed
    rope_local_base: float | None = None  # RoPE base of the windowed layers; None: rope_base
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    dtype: str = "float32"
    init_std: float = 0.02

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_positions"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) > 0):
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {getattr(self, name)!r}")
        if self.block not in BLOCKS:
            raise ValueError(f"ModelConfig.block={self.block!r}; accepted: {BLOCKS}")
        if self.position not in POSITIONS:
            raise ValueError(f"ModelConfig.position={self.position!r}; accepted: {POSITIONS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"ModelConfig.dtype={self.dtype!r}; accepted: {tuple(DTYPES)}")
        if self.d_head is None and self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; set d_head explicitly"
            )
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.kv_heads}")
        if self.block == "gpt2" and self.qkv_bias:
            raise ValueError("qkv_bias applies to llama blocks (Qwen2); gpt2 blocks always have every bias")
        for name in ("sliding_window", "global_every"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and value > 0):
                raise ValueError(f"ModelConfig.{name} must be None or a positive int, got {value!r}")
        if self.sliding_window is None and (self.global_every is not None or self.rope_local_base is not None):
            raise ValueError("global_every and rope_local_base describe windowed layers: set sliding_window too")
        if not (self.rotary_dim % 2 == 0 and 0 < self.rotary_dim <= self.head_dim):
            raise ValueError(f"rope_dim={self.rope_dim} must be even and in (0, head_dim={self.head_dim}]")

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads if self.d_head is None else self.d_head

    @property
    def rotary_dim(self) -> int:
        return self.head_dim if self.rope_dim is None else self.rope_dim

    def windowed_layer(self, layer: int) -> bool:
        """Whether block `layer` (0-based) attends through the sliding window."""
        if self.sliding_window is None:
            return False
        return self.global_every is None or (layer + 1) % self.global_every != 0

    def layer_rope_base(self, layer: int) -> float:
        if self.windowed_layer(layer) and self.rope_local_base is not None:
            return self.rope_local_base
        return self.rope_base

    @property
    def position_scheme(self) -> PositionScheme:
        return SCHEMES[self.position]

    @property
    def compute_dtype(self):
        """The dtype of the matrix products' operands (and of the cached keys and values)."""
        return DTYPES[self.dtype]

    @property
    def stream_dtype(self):
        """The dtype of the residual stream and of what the norms and the output layer return."""
        return jnp.float32 if self.dtype in FLOAT32_STREAM else self.compute_dtype

    @property
    def matmul_precision(self) -> str | None:
        """jax.default_matmul_precision for the forward pass (and so its gradient); None: jax's default."""
        return MATMUL_PRECISION.get(self.dtype)

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)


# The shapes of known pretrained models (the from-scratch model sizes are train.config's presets).
PRESETS: dict[str, ModelConfig] = {
    "smollm2_135m": ModelConfig(
        vocab_size=49152,
        d_model=576,
        n_layers=30,
        n_heads=9,
        n_kv_heads=3,
        d_ff=1536,
        block="llama",
        position="rope",
        rope_base=100000.0,
        max_positions=8192,
        norm_eps=1e-5,
    ),
    "qwen2.5_0.5b": ModelConfig(
        vocab_size=151936,
        d_model=896,
        n_layers=24,
        n_heads=14,
        n_kv_heads=2,
        d_ff=4864,
        block="llama",
        position="rope",
        rope_base=1000000.0,
        qkv_bias=True,
        max_positions=32768,
        norm_eps=1e-6,
    ),
    "gemma3_270m": ModelConfig(
        vocab_size=262144,
        d_model=640,
        n_layers=18,
        n_heads=4,
        n_kv_heads=1,
        d_head=256,
        d_ff=2048,
        block="gemma3",
        position="rope",
        rope_base=1000000.0,
        sliding_window=512,
        global_every=6,
        rope_local_base=10000.0,
        max_positions=32768,
        norm_eps=1e-6,
    ),
    "gpt2_124m": ModelConfig(vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_positions=1024),
}


def preset(name: str, **overrides) -> ModelConfig:
    """The named pretrained shape, with fields replaced by `overrides` (e.g. max_positions)."""
    if name not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; accepted: {sorted(PRESETS)}")
    return PRESETS[name].replace(**overrides)


def parameter_count(config: ModelConfig) -> int:
    """Number of scalar parameters of `Transformer(config)`, from the config alone."""
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    q_width, kv_width = config.n_heads * config.head_dim, config.kv_heads * config.head_dim
    attention = d * (q_width + 2 * kv_width) + q_width * d
    norms_per_block = 2
    if config.block == "gpt2":
        attention += q_width + 2 * kv_width + d
        mlp = d * f + f + f * d + d
        norm = 2 * d
    else:
        attention += (q_width + 2 * kv_width) * config.qkv_bias
        mlp = 3 * d * f
        norm = d
    if config.block == "gemma3":
        attention += 2 * config.head_dim  # the query and key norms
        norms_per_block = 4
    embeddings = v * d + (config.max_positions * d if config.position_scheme.learned_table else 0)
    lm_head = 0 if config.tie_embeddings else d * v
    return embeddings + config.n_layers * (attention + mlp + norms_per_block * norm) + norm + lm_head


def forward_flops_per_token(config: ModelConfig, context_length: int) -> int:
    """Forward-pass FLOPs for one token that attends to `context_length` keys.

    A multiply-add counts as 2 FLOPs. Counts every matrix product (q/k/v/o, MLP, output head) and
    the two attention products (q.k and weights.v); ignores norms, softmax, biases and lookups.
    A windowed layer attends to at most sliding_window keys.
    For a full causal sequence of T tokens the mean context is (T + 1) / 2; training costs about
    3x the forward pass.
    """
    d, f = config.d_model, config.d_ff
    q_width, kv_width = config.n_heads * config.head_dim, config.kv_heads * config.head_dim
    attention_weights = d * (q_width + 2 * kv_width) + q_width * d
    mlp_weights = (2 if config.block == "gpt2" else 3) * d * f
    matmul_weights = config.n_layers * (attention_weights + mlp_weights) + d * config.vocab_size
    attended = sum(
        min(context_length, config.sliding_window) if config.windowed_layer(layer) else context_length
        for layer in range(config.n_layers)
    )
    attention_products = 2 * q_width * attended
    return 2 * (matmul_weights + attention_products)
