"""Seeds side by side: one vmapped stack of S models against S one-model steps, on one CPU core.

On an accelerator the lab trains the seeds of a task as one vmapped stack (`train.steps` works on
a stack of S models); on a CPU it trains one model per single-threaded process pinned to a core.
This measures whether stacking would pay on a CPU core too: the training step of the quick model
(its longest unique-copy batch, as benchmarks/train_step.py times it) for stacks of S models, each
model on the same batch, in one process pinned to one core and single-threaded (as a CPU worker
runs). The stacks take turns as the trainers of benchmarks/train_step.py do (one untimed step,
then three timed ones) so that a change in machine load hits all of them; the median over all
turns is reported. The baseline is the stack of one, the lab's CPU path: "per model" divides a
stack's step by S, and the ratio is the stack of one's time per model over the stack's (above 1:
the stack trains more model-steps per second).

    python benchmarks/stacked_seeds.py                       # about 30 s on a 2-core CPU
    python benchmarks/stacked_seeds.py --stack-sizes 1 8 32 --preset paper   # on an accelerator
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from crasplab.train.allocator import keep_freed_memory
from crasplab.train.config import PRESETS
from crasplab.train.steps import from_scratch_batch_parts, init_stack, make_optimizer, make_train_step
from pinned_worker import add_core_option, measure_as_a_worker
from train_step import STEPS_PER_TURN, equal_shape_batch, interleaved_medians


class Stack:
    """The lab's jitted training step on a stack of S models of a preset (seeds 0..S-1), each
    model given the same batch."""

    def __init__(self, preset_name: str, size: int, batch: dict[str, np.ndarray], vocab_size: int):
        preset = PRESETS[preset_name]
        optimizer = make_optimizer(preset.train)
        max_positions = batch["tokens_BxT"].shape[1]
        models = [preset.model.replace(pe="ape").build(vocab_size, max_positions, seed=s) for s in range(size)]
        graphdef, rest, self.params, self.opt_state = init_stack(models, optimizer)
        self.step_fn = make_train_step(graphdef, rest, optimizer, from_scratch_batch_parts())
        self.batch = {name: np.repeat(array[None], size, axis=0) for name, array in batch.items()}

    def step(self) -> float:
        start = time.perf_counter()
        self.params, self.opt_state, loss, _ = self.step_fn(self.params, self.opt_state, self.batch)
        loss.block_until_ready()
        return time.perf_counter() - start


def measure(preset_name: str, sizes: list[int], rounds: int) -> None:
    keep_freed_memory()
    batch, vocab_size = equal_shape_batch(preset_name)
    B, T = batch["tokens_BxT"].shape
    stacks = {size: Stack(preset_name, size, batch, vocab_size) for size in sizes}
    medians = interleaved_medians({size: stack.step for size, stack in stacks.items()}, rounds)
    baseline = medians[sizes[0]] / sizes[0]
    print(
        f"## {preset_name} preset, batch {B} x {T} per model, jax {jax.__version__} on {jax.default_backend()}; "
        f"median over {rounds} interleaved rounds of {STEPS_PER_TURN} timed steps"
    )
    ratio = f"vs stack of {sizes[0]}"
    print(f"{'models in stack':>15} {'ms per step':>12} {'ms per model':>13} {'model-steps/s':>14} {ratio:>16}")
    for size in sizes:
        per_model = medians[size] / size
        print(
            f"{size:>15} {medians[size] * 1e3:>12.1f} {per_model * 1e3:>13.1f} {1 / per_model:>14.1f} "
            f"{baseline / per_model:>15.2f}x",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="quick", choices=sorted(PRESETS), help="the model and batch timed")
    parser.add_argument(
        "--stack-sizes", type=int, nargs="+", default=[1, 2, 5], help="models per stack; the first is the baseline"
    )
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median reported)")
    add_core_option(parser)
    args = parser.parse_args()
    if min(args.stack_sizes) < 1:
        parser.error(f"--stack-sizes must be at least 1 model each, got {args.stack_sizes}")
    measure_as_a_worker(__file__, args.core, lambda: measure(args.preset, args.stack_sizes, args.rounds))


if __name__ == "__main__":
    main()
