"""Training throughput, ours (JAX) against Hugging Face GPT-2 with torch AdamW, side by side.

1. Equal shapes: one training step (forward, backward, AdamW) of the quick and the paper
   configurations (GPT-2 blocks with APE, batch 64, the longest training string of unique copy:
   2 * max_length + 3 tokens) on the same batch, each trainer in its own process (in one process
   torch's and XLA's thread pools compete and slow each other down many times over), in two
   modes: one process using every core, and one thread pinned to one core (how the lab trains on
   a CPU: one such process per core). Ours runs twice: as the lab runs it (freed memory kept for
   the next step and large blocks on huge pages, `train.allocator`) and with glibc's default
   allocator settings, the baseline that shows what those settings are worth. The trainers take
   turns (ours, baseline, HF, ours, ...) so that a change in machine load hits all of them;
   each turn is one untimed step, then three timed ones; the median over all turns is reported.
   Each change made to our step for speed runs as a side of its own too, ours with that change
   undone (step_changes.py; --without), so that the table shows what each is worth.
2. Real tokens per second on a quick training stream of unique copy: the non-padding tokens of
   the batches each side trains on, per second of training. Ours as the lab trains (batches from
   one length bucket each, `train.data.LengthBuckets`), HF as its users batch (random lengths,
   each batch padded to its longest string), each in its own process on every core; ours also as
   the lab runs it on a CPU (one single-threaded process pinned to each core, run at the same
   time, throughputs summed), with and without the allocator setting.

    python benchmarks/train_step.py                # about 14 minutes on a 2-core CPU, most of it the paper rows
    python benchmarks/train_step.py --presets quick --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import jax
import numpy as np

from crasp.tasks import get_task
from crasplab.train.config import PRESETS
from crasplab.train.allocator import keep_freed_memory, with_huge_page_blocks
from crasplab.train.data import LengthBuckets, batch_rng, sample_batch, sample_training_batch, sequence_length
from crasplab.train.data import stack_steps
from crasplab.train.steps import from_scratch_batch_parts, init_stack, make_optimizer, make_train_step
from crasplab.train.steps import make_scanned_train_step
from crasplab.train.workers import available_cores, single_thread_env
from pinned_worker import add_core_option, pin_to_core
from preset_flags import preset_rounds_parser
from step_changes import CHANGES, WITHOUT, undo

STREAM_TASK = "UF"
STREAM_BATCHES = 24  # batches per timed pass over the real-token stream
SIDES = ("ours", "defaults", "hf")  # ours as the lab trains; ours with glibc's default allocator; Hugging Face
# Ours with several steps per device call (TrainConfig.steps_per_call), timed per step: a side of
# the equal-shape table where --steps-per-call is above 1.
SCANNED = "scanned"
STEPS_PER_TURN = 3  # timed steps per turn, after one untimed step


def equal_shape_batch(preset_name: str) -> tuple[dict[str, np.ndarray], int]:
    """(batch, vocabulary size) of the preset's longest unique-copy training batch, without padding."""
    preset = PRESETS[preset_name]
    task = get_task(STREAM_TASK, **preset.overrides_for(STREAM_TASK))
    hi = preset.train_for(STREAM_TASK).train_lengths[1]
    batch = sample_batch(
        task,
        batch_rng(0, 0, 0),
        preset.train.batch_size,
        (hi, hi),
        sequence_length(task, hi),
        sequence_length(task, hi),
        random_offset=False,
    )
    return batch.as_dict(), len(task.vocab)


class Ours:
    """Our jitted step (train.steps.make_train_step, a stack of one model, the batch in the parts
    that from-scratch training cuts it into) on the preset's model; with steps_per_call above 1,
    that many steps on the batch in one call (make_scanned_train_step), `step` timing one call."""

    def __init__(
        self,
        preset_name: str,
        vocab_size: int,
        max_positions: int,
        keep_memory: bool = True,
        dtype: str = "float32",
        steps_per_call: int = 1,
    ):
        if keep_memory:
            keep_freed_memory()
        preset = PRESETS[preset_name]
        optimizer = make_optimizer(preset.train)
        model = preset.model.replace(pe="ape", dtype=dtype).build(vocab_size, max_positions, seed=0)
        graphdef, rest, self.params, self.opt_state = init_stack([model], optimizer)
        make_step = make_train_step if steps_per_call == 1 else make_scanned_train_step
        self.step_fn = make_step(graphdef, rest, optimizer, from_scratch_batch_parts())
        self.steps_per_call = steps_per_call

    def step(self, batch: dict[str, np.ndarray]) -> None:
        stacked = {name: array[None] for name, array in batch.items()}
        if self.steps_per_call > 1:
            stacked = stack_steps([stacked] * self.steps_per_call)
        self.params, self.opt_state, loss, _ = self.step_fn(self.params, self.opt_state, stacked)
        loss.block_until_ready()


class HuggingFace:
    """GPT2LMHeadModel of the same shape with torch.optim.AdamW and the same answer-only loss, on
    CUDA where torch sees a GPU (with AdamW's fused kernel, as a user there would train), else on
    the CPU; bfloat16 through torch's autocast, as its users train in it."""

    def __init__(
        self,
        preset_name: str,
        vocab_size: int,
        max_positions: int,
        threads: int | None = None,
        dtype: str = "float32",
    ):
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        preset = PRESETS[preset_name]
        ours = preset.model.replace(pe="ape").model_config(vocab_size, max_positions)
        torch.manual_seed(0)
        config = GPT2Config(
            vocab_size=vocab_size,
            n_positions=max_positions,
            n_embd=ours.d_model,
            n_layer=ours.n_layers,
            n_head=ours.n_heads,
            n_inner=ours.d_ff,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            activation_function="gelu_new",
            bos_token_id=1,
            eos_token_id=3,
        )
        self.torch = torch
        if threads is not None:
            torch.set_num_threads(threads)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.autocast = torch.autocast(self.device, dtype=torch.bfloat16, enabled=dtype == "bfloat16")
        self.model = GPT2LMHeadModel(config).to(self.device).train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=preset.train.learning_rate,
            weight_decay=preset.train.weight_decay,
            fused=self.device == "cuda",
        )

    def step(self, batch: dict[str, np.ndarray]) -> None:
        torch = self.torch
        data = {name: torch.from_numpy(array).to(self.device) for name, array in batch.items()}
        with self.autocast:
            logits = self.model(
                input_ids=data["tokens_BxT"].long(),
                attention_mask=data["valid_BxT"].long(),
                position_ids=data["positions_BxT"].long(),
            ).logits.float()
        nll = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), data["targets_BxT"].long().flatten(), reduction="none"
        )
        mask = data["loss_mask_BxT"].flatten()
        loss = (nll * mask).sum() / mask.sum()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.device == "cuda":
            torch.cuda.synchronize()  # a step is timed to its end, as ours is (block_until_ready)


def hugging_face_available() -> bool:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


class StepProcess:
    """A trainer (one of SIDES) in a child process that times one step each time it is asked;
    with a core, pinned to it and single-threaded."""

    def __init__(
        self, side: str, preset_name: str, core: int | None = None, dtype: str = "float32", steps_per_call: int = 1
    ):
        command = [sys.executable, __file__, "--serve", side, "--presets", preset_name, "--dtype", dtype]
        command += ["--steps-per-call", str(steps_per_call)]
        env = dict(os.environ)
        if core is not None:
            command += ["--core", str(core)]
            env = single_thread_env()
        # Ours in every form as the lab's workers run; "defaults" and HF keep glibc's defaults.
        if side in ("ours", SCANNED) or side.startswith(WITHOUT):
            env = with_huge_page_blocks(env)
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def send(self, request: str) -> None:
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict:
        return json.loads(self.process.stdout.readline())

    def ask(self, request: str) -> dict:
        self.send(request)
        return self.receive()

    def timed_step(self) -> float:
        return self.ask("step")["seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def serve(side: str, preset_name: str, single_thread: bool, dtype: str = "float32", steps_per_call: int = 1) -> None:
    """Child of StepProcess: answer "step" (time one step at equal shapes: a call over
    steps_per_call steps, divided by them) and "stream SECONDS" (real-token rate on the quick
    stream), one JSON line each. Each trainer is built on its first request, so a child that only
    streams never builds the equal-shape one."""
    calls_of = steps_per_call if side == SCANNED else 1
    undo(side)

    def trainer(vocab_size: int, max_positions: int):
        if side == "hf":
            threads = 1 if single_thread else None
            return HuggingFace(preset_name, vocab_size, max_positions, threads=threads, dtype=dtype)
        keep = side != "defaults"
        return Ours(preset_name, vocab_size, max_positions, keep_memory=keep, dtype=dtype, steps_per_call=calls_of)

    equal_shape = None
    for request in sys.stdin:
        command, *arguments = request.split()
        if command == "step":
            if equal_shape is None:
                batch, vocab_size = equal_shape_batch(preset_name)
                equal_shape = trainer(vocab_size, batch["tokens_BxT"].shape[1])
            start = time.perf_counter()
            equal_shape.step(batch)
            answer = dict(seconds=(time.perf_counter() - start) / calls_of)
        else:
            streamer = trainer(*stream_vocab_and_positions(preset_name))
            answer = dict(
                tokens_per_second=real_tokens_per_second(
                    streamer, stream(preset_name, bucketed=side != "hf"), float(arguments[0])
                )
            )
        print(json.dumps(answer), flush=True)


def interleaved_medians(timed_steps: dict, rounds: int) -> dict:
    """Median seconds of one step of each trainer over `rounds` rounds in which each takes a turn;
    `timed_steps` maps a trainer's name to a function that runs one step and returns its seconds.

    A turn starts with one untimed step: right after another trainer ran, the caches hold its
    memory, not this one's, and torch's OpenMP threads may still be spinning (a first timed step
    measured ours 1.5x slower after an HF turn than after one of its own)."""
    for timed_step in timed_steps.values():  # compile / warm up
        timed_step()
        timed_step()
    times = {name: [] for name in timed_steps}
    for _ in range(rounds):
        for name, timed_step in timed_steps.items():
            timed_step()
            times[name] += [timed_step() for _ in range(STEPS_PER_TURN)]
    return {name: float(np.median(values)) for name, values in times.items()}


def stream(preset_name: str, bucketed: bool) -> list[dict[str, np.ndarray]]:
    """The first STREAM_BATCHES training batches of unique copy: from length buckets (ours) or
    with random lengths padded to each batch's longest string (as HF users batch)."""
    preset = PRESETS[preset_name]
    train = preset.train_for(STREAM_TASK)
    task = get_task(STREAM_TASK, **preset.overrides_for(STREAM_TASK))
    max_positions = sequence_length(task, max(hi for _, hi in train.test_bins))
    buckets = LengthBuckets.split(task, train.train_lengths, train.length_buckets if bucketed else 1)
    batches = []
    for index in range(STREAM_BATCHES):
        batch = sample_training_batch(
            task, batch_rng(0, 0, index), train.batch_size, buckets, max_positions, random_offset=True
        ).as_dict()
        width = int(batch["valid_BxT"].sum(axis=1).max())
        batches.append({name: array[:, :width] for name, array in batch.items()})
    return batches


def real_tokens_per_second(trainer, batches: list[dict[str, np.ndarray]], seconds: float) -> float:
    """Non-padding tokens per second over passes of the stream (every shape compiled first)."""
    for batch in {b["tokens_BxT"].shape: b for b in batches}.values():
        trainer.step(batch)
    tokens, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for batch in batches:
            trainer.step(batch)
            tokens += int(batch["valid_BxT"].sum())
    return tokens / (time.perf_counter() - start)


def stream_vocab_and_positions(preset_name: str) -> tuple[int, int]:
    preset = PRESETS[preset_name]
    task = get_task(STREAM_TASK, **preset.overrides_for(STREAM_TASK))
    return len(task.vocab), sequence_length(task, max(hi for _, hi in preset.train_for(STREAM_TASK).test_bins))


def pinned_workers_throughput(side: str, preset_name: str, seconds: float) -> float:
    """Sum of the real-token rates of one pinned single-threaded process per core, run together."""
    processes = [StepProcess(side, preset_name, core) for core in available_cores()]
    for process in processes:
        process.send(f"stream {seconds}")
    rates = [process.receive()["tokens_per_second"] for process in processes]
    for process in processes:
        process.close()
    return sum(rates)


def equal_shapes_table(presets: list[str], rounds: int, steps_per_call: int = 1, without: tuple[str, ...] = ()) -> None:
    print(
        f"## One training step at equal shapes (each trainer in its own process; median over {rounds} "
        f"interleaved rounds of {STEPS_PER_TURN} timed steps each)"
    )
    print(
        f"{'config':8} {'batch x T':>10} {'threads':>16} {'ours ms':>8} {'defaults ms':>12} {'HF ms':>8} "
        f"{'ours/HF':>8} {'ours/defaults':>14} {'ours tok/s':>11}"
    )
    sides = list(SIDES) if hugging_face_available() else ["ours", "defaults"]
    sides += [SCANNED] if steps_per_call > 1 else []
    sides += [WITHOUT + name for name in without]
    modes = [("all cores", None), ("1, pinned", available_cores()[-1])]
    for name in presets:
        B, T = equal_shape_batch(name)[0]["tokens_BxT"].shape
        for mode, core in modes:
            processes = {side: StepProcess(side, name, core, steps_per_call=steps_per_call) for side in sides}
            medians = interleaved_medians({side: process.timed_step for side, process in processes.items()}, rounds)
            for process in processes.values():
                process.close()
            ours_s, defaults_s, hf_s = medians["ours"], medians["defaults"], medians.get("hf")
            hf_cells = ("-", "-") if hf_s is None else (f"{hf_s * 1e3:.1f}", f"{hf_s / ours_s:.2f}x")
            print(
                f"{name:8} {f'{B} x {T}':>10} {mode:>16} {ours_s * 1e3:>8.1f} {defaults_s * 1e3:>12.1f} "
                f"{hf_cells[0]:>8} {hf_cells[1]:>8} {defaults_s / ours_s:>13.2f}x {B * T / ours_s:>11.0f}",
                flush=True,
            )
            for change in without:
                undone_s = medians[WITHOUT + change]
                versus_hf = "" if hf_s is None else f", HF/it {hf_s / undone_s:.2f}x"
                print(
                    f"{'':8} {'':>10} {mode:>16} without {change} ({CHANGES[change].__doc__.split(':')[0]}): "
                    f"{undone_s * 1e3:.1f} ms (ours {undone_s / ours_s:.2f}x faster{versus_hf})",
                    flush=True,
                )
            if SCANNED in medians:
                scanned_s = medians[SCANNED]
                versus_hf = "" if hf_s is None else f", HF/ours {hf_s / scanned_s:.2f}x"
                print(
                    f"{'':8} {'':>10} {mode:>16} {steps_per_call} steps per call: {scanned_s * 1e3:.1f} ms a step "
                    f"({ours_s / scanned_s:.2f}x one per call{versus_hf})",
                    flush=True,
                )


def stream_rate(side: str, preset_name: str, seconds: float) -> float:
    process = StepProcess(side, preset_name)
    rate = process.ask(f"stream {seconds}")["tokens_per_second"]
    process.close()
    return rate


def real_tokens_table(preset_name: str, seconds: float) -> None:
    padding = {
        side: 1 - sum(int(b["valid_BxT"].sum()) for b in batches) / sum(b["valid_BxT"].size for b in batches)
        for side, batches in (("ours", stream(preset_name, True)), ("hf", stream(preset_name, False)))
    }
    print(
        f"\n## Real (non-padding) training tokens per second, {preset_name} preset, task {STREAM_TASK} "
        f"({seconds:.0f} s each)"
    )
    rows = [
        ("ours, buckets, one process", padding["ours"], stream_rate("ours", preset_name, seconds)),
        ("ours, buckets, pinned per core", padding["ours"], pinned_workers_throughput("ours", preset_name, seconds)),
        ("same, glibc defaults", padding["ours"], pinned_workers_throughput("defaults", preset_name, seconds)),
    ]
    if hugging_face_available():
        rows.append(("HF, padded to batch's longest", padding["hf"], stream_rate("hf", preset_name, seconds)))
    baseline = rows[-1][2]
    print(f"{'trainer':32} {'padding':>8} {'real tok/s':>11} {'vs ' + rows[-1][0].split(',')[0]:>9}")
    for label, pad, rate in rows:
        print(f"{label:32} {pad:>8.0%} {rate:>11.0f} {rate / baseline:>8.2f}x", flush=True)


def main() -> None:
    parser = preset_rounds_parser(
        __doc__,
        "configurations timed at equal shapes (the real-token stream uses the first)",
        9,
        "interleaved rounds at equal shapes (median reported)",
    )
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="duration of each real-token measurement (0: no real-token table)"
    )
    parser.add_argument(
        "--serve",
        choices=(*SIDES, SCANNED, *(WITHOUT + name for name in CHANGES)),
        default=None,
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--without",
        nargs="*",
        choices=sorted(CHANGES),
        default=sorted(CHANGES),
        help="also time ours with each of these changes undone at equal shapes (step_changes.py; default: every "
        "one; none: --without alone)",
    )
    parser.add_argument(
        "--steps-per-call",
        type=int,
        default=1,
        help="also time ours with this many steps per device call at equal shapes (TrainConfig.steps_per_call)",
    )
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help=argparse.SUPPRESS)
    add_core_option(parser)
    args = parser.parse_args()
    pin_to_core(args.core)
    if args.serve is not None:
        serve(args.serve, args.presets[0], args.core is not None, args.dtype, args.steps_per_call)
        return
    print(
        f"jax {jax.__version__} on {jax.default_backend()}; HF baseline "
        f"{'present' if hugging_face_available() else 'absent (pip install -e .[reference])'}\n"
    )
    equal_shapes_table(args.presets, args.rounds, args.steps_per_call, tuple(args.without))
    if args.seconds > 0:
        real_tokens_table(args.presets[0], args.seconds)


if __name__ == "__main__":
    main()
