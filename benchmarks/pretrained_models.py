"""Pretrained models on this machine: load time, peak memory and tokens per second of each named
model, the first one (SmolLM2-135M by default) the baseline the others are set against.

Each model runs in a process of its own, so that its peak resident memory (ru_maxrss: weights,
dequantization, compiled code and activations) is its own. Throughput: the forward pass over a
batch of prompts (prefill, prompt tokens per second) and greedy decoding with the KV cache (new
tokens per second, prefill included), each the median of --repeats timed runs after one
compile-and-warm-up run, on random token ids.

    python benchmarks/pretrained_models.py                          # smollm2 then gemma3-270m, ~5 min on 2 cores
    python benchmarks/pretrained_models.py --models gemma3-270m --batch 1 --prompt 600
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import jax
import numpy as np
from flax import nnx

from crasplab.models import generate
from crasplab.models.loading import NAMED_MODELS, load_pretrained

from model import median_seconds  # benchmarks/model.py, beside this script


def measure(name: str, args) -> dict:
    """One model's figures, in this process."""
    start = time.perf_counter()
    pretrained = load_pretrained(name)
    load_s = time.perf_counter() - start
    config = pretrained.config
    prompts_BxT = np.random.default_rng(0).integers(0, config.vocab_size, (args.batch, args.prompt)).astype(np.int32)
    forward = nnx.jit(lambda model, tokens: model(tokens).logits_BxTxV)
    forward_s = median_seconds(lambda: forward(pretrained.model, prompts_BxT), args.repeats)
    lengths_B = np.full(args.batch, args.prompt)
    decode_s = median_seconds(
        lambda: (
            generate(pretrained.model, prompts_BxT, lengths_B, max_new_tokens=args.new_tokens, eos_id=None).tokens_BxN
        ),
        args.repeats,
    )
    return dict(
        model=name,
        architecture=pretrained.architecture,
        load_s=load_s,
        prefill_tokens_per_s=args.batch * args.prompt / forward_s,
        decode_tokens_per_s=args.batch * args.new_tokens / decode_s,
        peak_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,  # KiB on Linux
    )


def in_own_process(name: str, args) -> dict:
    flags = ["--batch", args.batch, "--prompt", args.prompt, "--new-tokens", args.new_tokens, "--repeats", args.repeats]
    finished = subprocess.run(
        [sys.executable, __file__, "--one", name, *map(str, flags)], capture_output=True, text=True, check=False
    )
    if finished.returncode:
        raise SystemExit(f"the benchmark of {name} failed:\n{finished.stderr[-2000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["smollm2", "gemma3-270m"], choices=sorted(NAMED_MODELS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per row")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", choices=sorted(NAMED_MODELS), help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return
    print(
        f"{jax.devices()[0].platform}, batch {args.batch}, prompt {args.prompt} tokens, {args.new_tokens} new tokens, "
        f"median of {args.repeats}; ratios against {args.models[0]}"
    )
    print(
        f"{'model':<12} | {'architecture':<12} | {'load s':>6} | {'peak GiB':>8} | {'prefill tok/s':>13} | "
        f"{'x':>5} | {'decode tok/s':>12} | {'x':>5}"
    )
    baseline = None
    for name in args.models:
        row = in_own_process(name, args)
        baseline = baseline or row
        print(
            f"{name:<12} | {row['architecture']:<12} | {row['load_s']:>6.1f} | {row['peak_gib']:>8.2f} | "
            f"{row['prefill_tokens_per_s']:>13,.0f} | "
            f"{row['prefill_tokens_per_s'] / baseline['prefill_tokens_per_s']:>5.2f} | "
            f"{row['decode_tokens_per_s']:>12,.1f} | "
            f"{row['decode_tokens_per_s'] / baseline['decode_tokens_per_s']:>5.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
