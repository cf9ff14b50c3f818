"""Model-steps per second on one device, as the accelerator path trains (crasplab.train.accelerator),
and one model's step against Hugging Face's at equal shapes.

1. One stack of S seeds (--stack-sizes, default 1 5 10), its batches sampled ahead by the sampler
   processes as in training (crasplab.train.sampling): model-steps per second (S x steps / s),
   computing in float32 and in bfloat16 (--dtypes: also tf32 and bfloat16-mixed; parameters stay
   float32), one step per device call or several (--steps-per-call: a scanned loop, one row each). A float32 stack of
   ten ran about 68 TFLOP/s on the H200 and its step took nearly twice a stack of five's: larger
   stacks wait on arithmetic there, not on launches, which bfloat16 may change.
2. K stacks of --concurrent-size seeds side by side (--concurrent, default 1 2 4 8), each in a
   thread of this process as the accelerator path runs them: model-steps per second, summed.
3. One model's training step, ours (make_train_step, a stack of one) against Hugging Face's
   GPT2LMHeadModel with torch's AdamW (fused on CUDA), float32 and bfloat16 (torch autocast), the
   batch sent from the host each step, each trainer in its own process (benchmarks/train_step.py's
   StepProcess), median over interleaved turns after warm-up; the ratio is HF's time over ours.

Rows 1 and 2 train unique copy (the preset's training stream, length buckets and all); every
shape a row meets is compiled before it is timed. The goals of issue 50, on an H200 with the
paper preset: 1,500 model-steps per second summed over a packed device, and our step 6x HF's.
It runs anywhere: on a CPU (slowly) it rehearses every row.

    python benchmarks/device_throughput.py --json out.json                 # on a GPU: the paper preset
    python benchmarks/device_throughput.py --preset quick --stack-sizes 1 2 --concurrent 1 2 --steps 4
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import jax
import numpy as np

from crasp.output_files import OVERWRITE_FLAG, OVERWRITE_HELP, check_output_file, write_output_file
from crasp.tasks import get_task
from crasplab.cli.arguments import at_least
from crasplab.errors import command_boundary
from crasplab.models.config import TRAINING_DTYPES
from crasplab.train.accelerator import default_sampler_processes
from crasplab.train.allocator import keep_freed_memory
from crasplab.train.config import PRESETS
from crasplab.train.data import LengthBuckets, sequence_length, stack_steps
from crasplab.train.device import path_name
from crasplab.train.sampling import BatchStream, StackBatches, sampler_pool
from crasplab.train.steps import data_mesh, from_scratch_batch_parts, init_stack, make_optimizer, make_train_step
from crasplab.train.steps import make_scanned_train_step
from crasplab.train.steps import shard_batch
from train_step import STREAM_TASK, StepProcess, hugging_face_available, interleaved_medians


class StackTrainer:
    """A stack of `size` models of the preset (seeds first_seed ...) training on unique copy,
    batches from a BatchStream, as a stack trains in crasplab.train.loop, computing in `dtype`.
    Trainers of one size and dtype share one jitted step (`shared_steps`): each would compile the
    same program, which on the H200 cost more than the timed steps (the first call ran out of
    time compiling)."""

    def __init__(
        self,
        preset_name: str,
        size: int,
        dtype: str,
        pool,
        shared_steps: dict,
        first_seed: int = 0,
        steps_per_call: int = 1,
    ):
        preset = PRESETS[preset_name]
        train, overrides = preset.train_for(STREAM_TASK), preset.overrides_for(STREAM_TASK)
        task = get_task(STREAM_TASK, **overrides)
        max_positions = sequence_length(task, max(hi for _, hi in train.test_bins))
        buckets = LengthBuckets.split(task, train.train_lengths, train.length_buckets)
        seeds = range(first_seed, first_seed + size)
        optimizer = make_optimizer(train)
        settings = preset.model.replace(pe="ape", dtype=dtype)
        models = [settings.build(len(task.vocab), max_positions, seed) for seed in seeds]
        graphdef, rest, self.params, self.opt_state = init_stack(models, optimizer)
        if (size, dtype, steps_per_call) not in shared_steps:
            make_step = make_train_step if steps_per_call == 1 else make_scanned_train_step
            shared_steps[size, dtype, steps_per_call] = make_step(graphdef, rest, optimizer, from_scratch_batch_parts())
        self.step_fn = shared_steps[size, dtype, steps_per_call]
        self.steps_per_call = steps_per_call
        self.batches = StackBatches.of(STREAM_TASK, overrides, seeds, train.batch_size, buckets, max_positions, True)
        self.widths = set(buckets.padded_lengths)
        self.stream = BatchStream(self.batches, 0, 10**9, pool, steps_per_call)
        self.mesh = data_mesh()
        self.size = size

    def compile_every_width(self) -> None:
        """One call on a batch of every width the stack can meet (padded to each bucket's longest)."""
        seen, step = set(), 0
        while seen != self.widths and step < 10_000:
            batch = self.batches.at(step)
            if (width := batch["tokens_BxT"].shape[-1]) not in seen:
                seen.add(width)
                self._call([batch] * self.steps_per_call)
            step += 1
        jax.block_until_ready(self.params)

    def _call(self, batches: list) -> jax.Array:
        """One device call: one step, or steps_per_call of them scanned (train.loop does the same)."""
        batch = batches[0] if self.steps_per_call == 1 else stack_steps(batches)
        self.params, self.opt_state, loss, _ = self.step_fn(self.params, self.opt_state, shard_batch(self.mesh, batch))
        return loss

    def train(self, steps: int) -> int:
        """At least `steps` steps, in whole calls (returns the steps trained)."""
        loss, calls = None, -(-steps // self.steps_per_call)
        for _ in range(calls):
            loss = self._call([self.stream.next() for _ in range(self.steps_per_call)])
        jax.block_until_ready(loss)
        return calls * self.steps_per_call

    def close(self) -> None:
        self.stream.close()


def timed_together(trainers: list[StackTrainer], steps: int) -> float:
    """Model-steps per second of the trainers run side by side, one thread each, for `steps` steps."""
    start_line = threading.Barrier(len(trainers) + 1)

    trained = {}

    def run(trainer: StackTrainer) -> None:
        start_line.wait()
        trained[id(trainer)] = trainer.train(steps)

    threads = [threading.Thread(target=run, args=(trainer,)) for trainer in trainers]
    for thread in threads:
        thread.start()
    start_line.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    return sum(trainer.size * trained[id(trainer)] for trainer in trainers) / seconds


def row_name(dtype: str, steps_per_call: int) -> str:
    return dtype if steps_per_call == 1 else f"{dtype}, {steps_per_call} steps per call"


def measure(
    preset_name: str,
    counts: list[int],
    size_of: callable,
    dtype: str,
    steps: int,
    pool,
    shared_steps: dict,
    steps_per_call: int = 1,
) -> dict[int, float]:
    """count -> model-steps per second, for `count` stacks of size_of(count) seeds side by side."""
    rates = {}
    for count in counts:
        trainers = [
            StackTrainer(preset_name, size_of(count), dtype, pool, shared_steps, 100 * i, steps_per_call)
            for i in range(count)
        ]
        for trainer in trainers:
            trainer.compile_every_width()
            trainer.train(2)  # the sampler pool warmed up, the first batches in flight
        rates[count] = timed_together(trainers, steps)
        for trainer in trainers:
            trainer.close()
        name = row_name(dtype, steps_per_call)
        print(f"  {name:8} {count} stack(s) of {size_of(count)}: {rates[count]:.0f} model-steps/s", flush=True)
    return rates


def hf_comparison(preset_name: str, rounds: int) -> dict[str, dict[str, float]]:
    """dtype -> {side: median seconds of one step} for ours and (where installed) Hugging Face's."""
    sides = ["ours", "hf"] if hugging_face_available() else ["ours"]
    medians = {}
    for dtype in ("float32", "bfloat16"):
        processes = {side: StepProcess(side, preset_name, dtype=dtype) for side in sides}
        medians[dtype] = interleaved_medians({side: p.timed_step for side, p in processes.items()}, rounds)
        for process in processes.values():
            process.close()
    return medians


def main() -> None:
    on_device = jax.default_backend() != "cpu"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="paper" if on_device else "quick")
    parser.add_argument("--stack-sizes", type=at_least(1), nargs="+", default=[1, 5, 10], help="table 1's stacks")
    parser.add_argument("--concurrent", type=at_least(1), nargs="+", default=[1, 2, 4, 8], help="table 2's counts")
    parser.add_argument("--concurrent-size", type=at_least(1), default=5, help="seeds in each of table 2's stacks")
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=TRAINING_DTYPES,
        default=["float32", "bfloat16"],
        help="compute dtypes of tables 1 and 2, each row in each (table 3 always compares float32 and bfloat16)",
    )
    parser.add_argument(
        "--steps-per-call",
        type=at_least(1),
        nargs="+",
        default=[1],
        help="training steps per device call (TrainConfig.steps_per_call): tables 1 and 2 have each row at each",
    )
    parser.add_argument("--steps", type=at_least(1), default=200 if on_device else 4, help="timed steps per row")
    parser.add_argument("--rounds", type=at_least(1), default=5, help="interleaved rounds of table 3")
    parser.add_argument(
        "--sampler-processes", type=at_least(1), default=None, help="default: all cores but two, at least one"
    )
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file (a new one)")
    parser.add_argument(OVERWRITE_FLAG, action="store_true", help=OVERWRITE_HELP)
    args = parser.parse_args()
    if args.json:
        with command_boundary():  # before anything is measured
            check_output_file(args.json, "--json", (".json",), args.overwrite)
    keep_freed_memory()
    processes = args.sampler_processes or default_sampler_processes()
    device = jax.devices()[0]
    print(
        f"# {args.preset} preset on {device.device_kind} ({path_name()}), jax {jax.__version__}, "
        f"{processes} sampling processes, {args.steps} timed steps per row",
        flush=True,
    )
    shared_steps = {}
    with sampler_pool(processes) as pool:
        print("## 1. One stack of S seeds", flush=True)
        rows = [(dtype, k) for dtype in args.dtypes for k in args.steps_per_call]
        stacks = {
            row_name(dtype, k): {
                size: measure(args.preset, [1], lambda _: size, dtype, args.steps, pool, shared_steps, k)[1]
                for size in args.stack_sizes
            }
            for dtype, k in rows
        }
        print(f"## 2. Stacks of {args.concurrent_size} seeds side by side", flush=True)
        size = args.concurrent_size
        concurrent = {
            row_name(dtype, k): measure(
                args.preset, args.concurrent, lambda _: size, dtype, args.steps, pool, shared_steps, k
            )
            for dtype, k in rows
        }
    print("## 3. One model's step at equal shapes, ours against Hugging Face's", flush=True)
    steps = hf_comparison(args.preset, args.rounds)
    print(f"{'dtype':9} {'ours ms':>8} {'HF ms':>8} {'HF/ours':>8}")
    for dtype, medians in steps.items():
        hf = medians.get("hf")
        cells = ("-", "-") if hf is None else (f"{hf * 1e3:.2f}", f"{hf / medians['ours']:.2f}x")
        print(f"{dtype:9} {medians['ours'] * 1e3:>8.2f} {cells[0]:>8} {cells[1]:>8}", flush=True)
    if args.json:
        every_table = [*stacks.values(), *concurrent.values()]
        numbers = dict(
            preset=args.preset,
            device=device.device_kind,
            jax=jax.__version__,
            sampler_processes=processes,
            steps=args.steps,
            stack_model_steps_per_s={d: {str(k): v for k, v in rates.items()} for d, rates in stacks.items()},
            concurrent_size=args.concurrent_size,
            concurrent_model_steps_per_s={d: {str(k): v for k, v in rates.items()} for d, rates in concurrent.items()},
            step_seconds=steps,
            hf_over_ours={d: m["hf"] / m["ours"] for d, m in steps.items() if "hf" in m},
            best_model_steps_per_s=float(np.max([max(rates.values()) for rates in every_table])),
        )
        text = json.dumps(numbers, indent=2, sort_keys=True) + "\n"
        write_output_file(Path(args.json), "--json", lambda file: file.write(text.encode()), args.overwrite)


if __name__ == "__main__":
    main()
