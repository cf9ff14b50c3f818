"""Seconds (wall and CPU of this process) and peak memory of a fine-tuning step of SmolLM2-135M on
random tokens, with train.steps' compiled step: the first table of docs/finetune-calibration.md.

    python experiments/calibration/finetune/step_time.py full float32 8 24     # METHOD DTYPE BATCH TOKENS
    python experiments/calibration/finetune/step_time.py lora8 float32 8 96    # LoRA rank 8

One configuration per process, so that the peak resident memory (VmHWM) is that configuration's.
"""

import resource
import sys
import time

import numpy as np

from crasplab.models.loading import load_pretrained
from crasplab.models.lora import with_lora
from crasplab.train.data import make_batch
from crasplab.incontext.finetune_config import FinetuneConfig
from crasplab.train.steps import init_stack, make_optimizer, make_train_step


def main() -> None:
    method, dtype, batch_size, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    model = load_pretrained("smollm2", dtype=dtype).model
    if method.startswith("lora"):
        rank = int(method.removeprefix("lora"))
        model = with_lora(model, rank, 2.0 * rank, seed=0)
    optimizer = make_optimizer(FinetuneConfig(learning_rate=1e-5, max_steps=100).optimizer_config())
    graphdef, rest, params_S, opt_state_S = init_stack([model], optimizer)
    del model
    step = make_train_step(graphdef, rest, optimizer)
    tokens_BxT = np.random.default_rng(0).integers(100, 40000, size=(batch_size, tokens)).astype(np.int32)
    batch = make_batch(
        tokens_BxT, np.full(batch_size, tokens // 2), np.full(batch_size, tokens), np.zeros(batch_size, int), tokens
    )
    arrays = {name: array[None] for name, array in batch.as_dict().items()}
    for index in range(5):  # the first step compiles
        wall, cpu = time.perf_counter(), time.process_time()
        params_S, opt_state_S, loss_S, _ = step(params_S, opt_state_S, arrays)
        loss = float(loss_S[0])
        print(
            f"{method} {dtype} {batch_size}x{tokens} step {index}: wall {time.perf_counter() - wall:.2f} s, "
            f"CPU {time.process_time() - cpu:.2f} s, loss {loss:.3f}",
            flush=True,
        )
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"peak RSS {peak_gb:.2f} GB; load average {open('/proc/loadavg').read().split()[0]}")


if __name__ == "__main__":
    main()
