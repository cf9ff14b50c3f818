"""Tokens per second of one training step (forward, backward, AdamW), ours against Hugging Face.

For the quick and the paper configurations (GPT-2 blocks with APE, batch 64, the longest
training string of unique copy: 2 * max_length + 3 tokens), times our jitted step
(train.steps.make_train_step, a stack of one model) and, when torch and transformers are
installed, GPT2LMHeadModel with torch.optim.AdamW on the same shapes and the same answer-only
loss, and prints the ratio. `--compare-workers` also measures the CPU layout choice of
train.workers: two single-threaded processes pinned to one core each against one process that
uses every core (total steps per second of the quick configuration).

    python benchmarks/train_step.py                 # about two minutes on a 2-core CPU
    python benchmarks/train_step.py --compare-workers
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
from flax import nnx

from train.config import PRESETS
from train.model import build_model
from train.steps import make_optimizer, make_train_step
from train.workers import SINGLE_THREAD_XLA_FLAGS, available_cores

VOCAB_SIZE = 154  # unique copy over 150 symbols + 4 special tokens


def shapes(preset_name: str) -> tuple[dict, int, int, int]:
    """(model settings, batch size, sequence length, max_positions) of a preset's longest training batch."""
    preset = PRESETS[preset_name]
    longest_input = preset.train.train_lengths[1]
    longest_test = max(hi for _, hi in preset.train.test_bins)
    return preset.model, preset.train.batch_size, 2 * longest_input + 3, 2 * longest_test + 3


def random_batch(rng: np.random.Generator, batch: int, length: int) -> dict[str, np.ndarray]:
    tokens = rng.integers(4, VOCAB_SIZE, size=(batch, length)).astype(np.int32)
    prompt = length // 2 + 1
    mask = np.zeros((batch, length), np.float32)
    mask[:, prompt - 1:length - 1] = 1.0
    return dict(tokens_BxT=tokens, positions_BxT=np.tile(np.arange(length, dtype=np.int32), (batch, 1)),
                valid_BxT=np.ones((batch, length), bool), targets_BxT=np.roll(tokens, -1, axis=1), loss_mask_BxT=mask)


def time_steps(step, warmup: int, repeats: int) -> float:
    """Median seconds per call of `step()` (which must block until done) after `warmup` calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def ours(preset_name: str, repeats: int) -> float:
    model_settings, batch, length, max_positions = shapes(preset_name)
    preset = PRESETS[preset_name]
    model = build_model("ape", model_settings, VOCAB_SIZE, max_positions, seed=0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = make_optimizer(preset.train)
    state = [jax.tree.map(lambda x: x[None], params)]
    state.append(jax.vmap(optimizer.init)(state[0]))
    train_step = make_train_step(graphdef, rest, optimizer)
    data = {k: v[None] for k, v in random_batch(np.random.default_rng(0), batch, length).items()}

    def step():
        state[0], state[1], loss, _ = train_step(state[0], state[1], data)
        loss.block_until_ready()

    return time_steps(step, warmup=2, repeats=repeats)


def hugging_face(preset_name: str, repeats: int) -> float | None:
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return None
    model_settings, batch, length, max_positions = shapes(preset_name)
    preset = PRESETS[preset_name]
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB_SIZE, n_positions=max_positions, n_embd=model_settings["d_model"],
                        n_layer=model_settings["n_layers"], n_head=model_settings["n_heads"],
                        n_inner=model_settings.get("d_ff", 4 * model_settings["d_model"]),
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new",
                        bos_token_id=1, eos_token_id=3)
    model = GPT2LMHeadModel(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=preset.train.learning_rate, weight_decay=0.01)
    data = {k: torch.from_numpy(v) for k, v in random_batch(np.random.default_rng(0), batch, length).items()}

    def step():
        logits = model(input_ids=data["tokens_BxT"].long(), position_ids=data["positions_BxT"].long()).logits
        nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), data["targets_BxT"].long().flatten(),
                                                reduction="none")
        mask = data["loss_mask_BxT"].flatten()
        loss = (nll * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return time_steps(step, warmup=2, repeats=repeats)


def compare_workers(seconds: float) -> dict:
    """Quick-configuration steps per second: one process on all cores vs one pinned process per core."""
    cores = available_cores()
    command = [sys.executable, __file__, "--steps-for", str(seconds)]
    one = subprocess.run(command, capture_output=True, text=True, check=True)
    single = json.loads(one.stdout.splitlines()[-1])["steps_per_second"]
    env = dict(os.environ, XLA_FLAGS=SINGLE_THREAD_XLA_FLAGS)
    processes = [subprocess.Popen(command + ["--core", str(core)], stdout=subprocess.PIPE, text=True, env=env)
                 for core in cores]
    pinned = [json.loads(p.communicate()[0].splitlines()[-1])["steps_per_second"] for p in processes]
    return dict(cores=len(cores), one_process_all_cores=single, pinned_processes_total=sum(pinned),
                ratio=sum(pinned) / single)


def steps_for(seconds: float) -> None:
    """Child of --compare-workers: run quick steps for `seconds` and print the rate as JSON."""
    model_settings, batch, length, max_positions = shapes("quick")
    model = build_model("ape", model_settings, VOCAB_SIZE, max_positions, seed=0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = make_optimizer(PRESETS["quick"].train)
    params = jax.tree.map(lambda x: x[None], params)
    opt_state = jax.vmap(optimizer.init)(params)
    train_step = make_train_step(graphdef, rest, optimizer)
    data = {k: v[None] for k, v in random_batch(np.random.default_rng(0), batch, length).items()}
    params, opt_state, loss, _ = train_step(params, opt_state, data)
    loss.block_until_ready()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        params, opt_state, loss, _ = train_step(params, opt_state, data)
        loss.block_until_ready()
        steps += 1
    print(json.dumps(dict(steps_per_second=steps / (time.perf_counter() - start))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["quick", "paper"], choices=sorted(PRESETS),
                        help="configurations to time")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per measurement (median reported)")
    parser.add_argument("--compare-workers", action="store_true",
                        help="also time 1 process on all cores against 1 pinned single-threaded process per core")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of each --compare-workers measurement")
    parser.add_argument("--steps-for", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.core is not None:
        os.sched_setaffinity(0, {args.core})
    if args.steps_for is not None:
        steps_for(args.steps_for)
        return
    print(f"{'config':8} {'tokens/step':>11} {'ours ms':>9} {'ours tok/s':>11} {'HF ms':>9} {'HF tok/s':>10} {'ratio':>6}")
    for name in args.presets:
        _, batch, length, _ = shapes(name)
        tokens = batch * length
        ours_s = ours(name, args.repeats)
        hf_s = hugging_face(name, args.repeats)
        hf_cells = ("-", "-", "-") if hf_s is None else (f"{hf_s * 1e3:.1f}", f"{tokens / hf_s:.0f}", f"{hf_s / ours_s:.2f}x")
        print(f"{name:8} {tokens:>11} {ours_s * 1e3:>9.1f} {tokens / ours_s:>11.0f} {hf_cells[0]:>9} {hf_cells[1]:>10} "
              f"{hf_cells[2]:>6}", flush=True)
    if args.compare_workers:
        print(json.dumps(compare_workers(args.seconds)))


if __name__ == "__main__":
    main()
