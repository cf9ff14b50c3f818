"""Transformer throughput: forward pass, and greedy decoding with the KV cache vs. without.

The baseline runs side by side: decoding without a cache recomputes the full forward pass over
the whole sequence buffer at every step (generate(..., use_cache=False)). Every figure is the
median of --repeats timed runs after one compile-and-warm-up run.

    python benchmarks/model.py                    # quick + paper presets, on JAX's default device
    python benchmarks/model.py --presets paper --batch 64 --new-tokens 128
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np
from flax import nnx

from crasplab.models import ModelConfig, Transformer, forward_flops_per_token, generate, parameter_count, preset
from crasplab.train.config import PRESETS as FROM_SCRATCH


def median_seconds(run, repeats: int) -> float:
    jax.block_until_ready(run())  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def model_config(name: str, max_positions: int) -> ModelConfig:
    """A from-scratch preset's model (APE, a 128-symbol vocabulary) or a pretrained shape."""
    if name in FROM_SCRATCH:
        return FROM_SCRATCH[name].model.replace(pe="ape").model_config(vocab_size=128, max_positions=max_positions)
    return preset(name, max_positions=max_positions)


def benchmark(name: str, args) -> dict:
    total_length = args.prompt + args.new_tokens
    config = model_config(name, max_positions=max(512, total_length))
    model = Transformer(config, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    tokens_BxT = rng.integers(0, config.vocab_size, (args.batch, total_length)).astype(np.int32)

    forward = nnx.jit(lambda m, tokens: m(tokens).logits_BxTxV)
    forward_s = median_seconds(lambda: forward(model, tokens_BxT), args.repeats)

    prompts_BxT = tokens_BxT[:, : args.prompt]
    prompt_lengths_B = np.full(args.batch, args.prompt)

    def decode(use_cache):
        return lambda: (
            generate(
                model, prompts_BxT, prompt_lengths_B, max_new_tokens=args.new_tokens, eos_id=None, use_cache=use_cache
            ).tokens_BxN
        )

    cached_s = median_seconds(decode(True), args.repeats)
    uncached_s = median_seconds(decode(False), args.repeats)
    forward_tokens = args.batch * total_length
    new_tokens = args.batch * args.new_tokens
    return {
        "preset": name,
        "params": parameter_count(config),
        "fwd tok/s": forward_tokens / forward_s,
        "fwd GFLOP/s": forward_tokens * forward_flops_per_token(config, (total_length + 1) / 2) / forward_s / 1e9,
        "decode tok/s (cache)": new_tokens / cached_s,
        "decode tok/s (no cache)": new_tokens / uncached_s,
        "cache speed-up": uncached_s / cached_s,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--presets",
        nargs="+",
        default=["quick", "paper"],
        help="from-scratch presets (quick, paper) or pretrained shapes (smollm2_135m, ...) to measure",
    )
    parser.add_argument("--batch", type=int, default=16, help="sequences per batch")
    parser.add_argument(
        "--prompt", type=int, default=32, help="prompt length for decoding (forward uses prompt + new tokens)"
    )
    parser.add_argument("--new-tokens", type=int, default=64, help="greedy tokens generated per sequence")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measurement (median reported)")
    args = parser.parse_args()

    print(
        f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}); batch {args.batch}, "
        f"prompt {args.prompt}, new tokens {args.new_tokens}, forward length {args.prompt + args.new_tokens}"
    )
    rows = [benchmark(name, args) for name in args.presets]
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(
            " | ".join(
                f"{value:,.1f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else value
                for value in row.values()
            )
        )


if __name__ == "__main__":
    main()
