"""Seconds per training step of the quick model against sequence length (batch 64).

The cost of a step grows faster than linearly in the sequence length on this CPU, which is why
the quick preset bounds training lengths (copying strings are 2n + 3 tokens, retrieval n + 5).
Run it pinned and single-threaded, as the workers run:

    taskset -c 0 env XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
        python experiments/calibration/step_time.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from train_step import VOCAB_SIZE, random_batch, time_steps  # noqa: E402

from train.config import PRESETS  # noqa: E402
from train.model import build_model  # noqa: E402
from train.steps import make_optimizer, make_train_step  # noqa: E402


def main() -> None:
    preset = PRESETS["quick"]
    for length in (14, 25, 35, 43, 47):
        model = build_model("ape", preset.model, VOCAB_SIZE, 128, seed=0)
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        optimizer = make_optimizer(preset.train)
        state = [jax.tree.map(lambda x: x[None], params)]
        state.append(jax.vmap(optimizer.init)(state[0]))
        step_fn = make_train_step(graphdef, rest, optimizer)
        data = {k: v[None] for k, v in random_batch(np.random.default_rng(0), 64, length).items()}

        def step():
            state[0], state[1], loss, _ = step_fn(state[0], state[1], data)
            loss.block_until_ready()

        print(f"T={length:3d}: {time_steps(step, warmup=2, repeats=20) * 1e3:6.1f} ms/step", flush=True)


if __name__ == "__main__":
    main()
