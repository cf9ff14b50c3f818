"""Low-rank adapters (LoRA, Hu et al. 2021) for models.Transformer: every weight frozen, a trainable
update W + (alpha / r) A B on the chosen dense layers. B starts at zero, so the adapted model
starts as the base model.

    from crasplab.models.lora import with_lora
    adapted = with_lora(model, rank=8, alpha=16.0, seed=0)   # a new model; `model` is left as it was
    nnx.split(adapted, nnx.Param, ...)                       # the adapters only: everything else is Frozen
    models.params.count_params(adapted)                      # trainable scalars: rank * (d_in + d_out) per layer

The adapter factors are flax's own `nnx.LoRA` (an `nnx.LoRAParam` pair). The adapted layer keeps
nnx.Linear's interface (`kernel`, `bias`, call), so the model's code runs unchanged: where it
reads `kernel` (attention's fused q/k/v product) it gets the merged matrix, and where it calls the
layer (the attention output and the MLP) it computes x W + (x A) B, which spares the gradient of
the full matrix. Freezing by variable type rather than by a filter at training time keeps the
training code (train.steps: trainable = nnx.Param) the same for full fine-tuning and LoRA.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from crasplab.models.transformer import Transformer

# The dense layers of both block styles: attention (q, k, v, o), Llama MLP (gate, up, down),
# GPT-2 MLP (fc, proj).
ALL_DENSE = ("q", "k", "v", "o", "gate", "up", "down", "fc", "proj")


class Frozen(nnx.Variable):
    """A weight that training leaves alone: not an nnx.Param, so no gradient and no optimizer state."""


class LoRALinear(nnx.Module):
    """A frozen nnx.Linear plus a trainable rank-r update, scaled by alpha / r."""

    def __init__(self, base: nnx.Linear, rank: int, alpha: float, rngs: nnx.Rngs):
        self.base_kernel = Frozen(base.kernel[...])
        self.bias = None if base.bias is None else Frozen(base.bias[...])
        self.dtype = base.dtype
        self.scale = alpha / rank
        self.lora = nnx.LoRA(
            base.in_features, rank, base.out_features, dtype=base.dtype, param_dtype=jnp.float32, rngs=rngs
        )

    @property
    def kernel(self):
        """The merged matrix W + (alpha / r) A B, for code that reads the kernel itself."""
        return self.base_kernel[...] + self.scale * (self.lora.lora_a[...] @ self.lora.lora_b[...])

    def __call__(self, x):
        y = jnp.dot(x.astype(self.dtype), self.base_kernel[...].astype(self.dtype))
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y + jnp.asarray(self.scale, self.dtype) * self.lora(x)


def with_lora(
    model: Transformer, rank: int, alpha: float, seed: int, targets: tuple[str, ...] = ALL_DENSE
) -> Transformer:
    """A copy of `model` with adapters on the dense layers named in `targets` and every other
    parameter Frozen (the copy shares the base weights' arrays, which are immutable)."""
    if not (isinstance(rank, int) and rank >= 1):
        raise ValueError(f"LoRA rank must be a positive int, got {rank!r}")
    unknown = sorted(set(targets) - set(ALL_DENSE))
    if unknown:
        raise ValueError(f"unknown LoRA target(s) {unknown}; accepted: {ALL_DENSE}")
    adapted = nnx.clone(model)
    rngs = nnx.Rngs(seed)
    # Listed before any change: the walk must not see the adapters it adds.
    modules = [module for _, module in nnx.iter_modules(adapted)]
    for module in modules:
        for name, value in list(vars(module).items()):
            if isinstance(value, nnx.Linear) and name in targets:
                setattr(module, name, LoRALinear(value, rank, alpha, rngs))
            elif isinstance(value, nnx.Param):
                setattr(module, name, Frozen(value[...]))
    return adapted
