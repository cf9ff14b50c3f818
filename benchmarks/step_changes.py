"""The changes made to the CPU training step for speed, each undone on request, so that a benchmark
shows what each is worth: `benchmarks/train_step.py` times a "without-NAME" side beside ours.

Each entry puts back, in this process, the code the step had before the change (docs/calibration.md,
"The CPU step against Hugging Face, again", has the measurements). Call one before the step is
first traced. The benchmarks in this folder import it as a sibling module.
"""

from __future__ import annotations

from typing import Callable

import jax


def jax_rows() -> None:
    """models.rows undone: LayerNorm and the attention's softmax as jax differentiates them, their
    row sums as reductions (the model before models.rows)."""
    from crasplab.models import transformer

    def layer_norm(x_NxD, scale_D, bias_D, epsilon):
        centered_NxD = x_NxD - x_NxD.mean(-1, keepdims=True)
        variance_Nx1 = (centered_NxD * centered_NxD).mean(-1, keepdims=True)
        return centered_NxD * jax.lax.rsqrt(variance_Nx1 + epsilon) * scale_D + bias_D

    transformer.layer_norm = layer_norm
    transformer.softmax = lambda logits: jax.nn.softmax(logits, axis=-1)


# name -> what undoes it; the benchmark's sides are "without-" + name.
CHANGES: dict[str, Callable[[], None]] = {"rows": jax_rows}
WITHOUT = "without-"


def undo(side: str) -> None:
    """Undo the change a "without-NAME" side names; other sides run the step as it is."""
    if side.startswith(WITHOUT):
        CHANGES[side.removeprefix(WITHOUT)]()
