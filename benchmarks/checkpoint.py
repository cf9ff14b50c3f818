"""Checkpoint cost for the lab's own models: our single-file .npz (train.checkpoint) against
orbax-checkpoint's StandardCheckpointer, side by side, on the state a training job saves
(parameters and AdamW state of one model).

    python benchmarks/checkpoint.py                     # quick and paper models, 20 rounds each
    python benchmarks/checkpoint.py --presets quick --rounds 50

Prints the median save and restore time in ms, the files written per checkpoint, and the ratio
orbax / ours. Both write atomically (ours: a temporary file moved into place; orbax: a temporary
folder renamed when complete).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from crasplab.train.checkpoint import load_checkpoint, save_checkpoint
from crasplab.train.config import PRESETS
from crasplab.train.steps import make_optimizer
from preset_flags import preset_rounds_parser

VOCAB_SIZE, MAX_POSITIONS = 70, 83  # unique copy over 64 symbols up to length 40 (quick)


def job_state(preset_name: str):
    """(params, opt_state) of one model of the preset, as numpy arrays (what a job checkpoints)."""
    preset = PRESETS[preset_name]
    params = nnx.state(preset.model.build(VOCAB_SIZE, MAX_POSITIONS, seed=0), nnx.Param)
    return jax.device_get((params, make_optimizer(preset.train).init(params)))


def median_ms(action, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def measure(preset_name: str, rounds: int, folder: Path) -> dict:
    state = job_state(preset_name)
    npz = folder / f"{preset_name}.npz"
    checkpointer = ocp.StandardCheckpointer()
    saves = iter(range(10**6))

    def orbax_save():
        path = folder / f"{preset_name}-orbax-{next(saves)}"
        checkpointer.save(path, state)
        checkpointer.wait_until_finished()  # a job must know its checkpoint is on disk before it goes on
        return path

    ours_save = median_ms(lambda: save_checkpoint(npz, state, {"step": 1}), rounds)
    ours_load = median_ms(lambda: load_checkpoint(npz, state), rounds)
    orbax_save_ms = median_ms(orbax_save, rounds)
    last = orbax_save()
    orbax_load = median_ms(lambda: checkpointer.restore(last, state), rounds)
    checkpointer.close()
    leaves = jax.tree.leaves(state)
    return dict(
        preset=preset_name,
        parameters_and_moments=sum(np.size(leaf) for leaf in leaves),
        ours_save_ms=ours_save,
        orbax_save_ms=orbax_save_ms,
        ours_load_ms=ours_load,
        orbax_load_ms=orbax_load,
        ours_files=1,
        orbax_files=sum(1 for p in last.rglob("*") if p.is_file()),
    )


def main() -> None:
    parser = preset_rounds_parser(
        __doc__, "whose model and optimizer state to checkpoint", 20, "timed saves and restores per method (median)"
    )
    args = parser.parse_args()
    print(
        "| preset | values | save ms: ours / orbax (ratio) | restore ms: ours / orbax (ratio) | files: ours / orbax |"
    )
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.presets:
            r = measure(name, args.rounds, Path(folder))
            print(
                f"| {name} | {r['parameters_and_moments']:,} | {r['ours_save_ms']:.1f} / {r['orbax_save_ms']:.1f} "
                f"({r['orbax_save_ms'] / r['ours_save_ms']:.1f}x) | {r['ours_load_ms']:.1f} / {r['orbax_load_ms']:.1f} "
                f"({r['orbax_load_ms'] / r['ours_load_ms']:.1f}x) | {r['ours_files']} / {r['orbax_files']} |"
            )


if __name__ == "__main__":
    main()
