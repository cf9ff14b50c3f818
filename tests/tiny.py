"""The smallest models, training settings and job folders the lab accepts, shared by the test
modules (and, as fixtures, by conftest.py)."""

import json
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from crasplab.models import (
    ModelConfig,
    Transformer,
)
from crasplab.records.files import append_jsonl, read_jsonl, write_json
from crasplab.records.job_folder import JobFolder
from crasplab.train.config import ModelSettings, TrainConfig
from flax import nnx

STYLES = {
    "gpt2_ape": dict(block="gpt2", position="ape"),
    "llama_rope_gqa": dict(block="llama", position="rope", n_kv_heads=2, qkv_bias=True),
    "llama_partial_rope": dict(block="llama", position="rope", rope_dim=4),
    "gpt2_nope": dict(block="gpt2", position="nope"),
    "gpt2_alibi": dict(block="gpt2", position="alibi"),
    # Gemma 3's block; layer 0 attends through a 3-position window, layer 1 (every 2nd) globally.
    "gemma3_window": dict(
        block="gemma3", position="rope", n_kv_heads=2, sliding_window=3, global_every=2, rope_local_base=50.0
    ),
}


def tiny_model(seed=0, **overrides) -> Transformer:
    """A 2-layer, d 32, 4-head model with weights large enough that attention is not uniform."""
    fields = dict(vocab_size=16, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_positions=64, init_std=0.3)
    return Transformer(ModelConfig(**(fields | overrides)), rngs=nnx.Rngs(seed))


def random_tokens(shape, seed=0, vocab_size=16):
    return jnp.asarray(np.random.default_rng(seed).integers(0, vocab_size, shape), jnp.int32)


ROOT = Path(__file__).resolve().parents[1]


def comparable(folder: Path) -> tuple[list[dict], dict]:
    records = read_jsonl(folder / "metrics.jsonl")  # a finished job's is stored compressed
    result = json.loads((folder / "result.json").read_text())
    result.pop("elapsed_s")
    return records, result


def run_worker(folder: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "crasplab.train.workers", str(folder)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


TINY_MODEL = ModelSettings(n_layers=1, n_heads=2, d_model=16)


def tiny_config(**changes) -> TrainConfig:
    values = dict(
        train_lengths=(1, 4),
        test_bins=((1, 4), (5, 6)),
        batch_size=8,
        learning_rate=3e-3,
        warmup_steps=2,
        max_steps=24,
        eval_every=8,
        stop_after_perfect_evals=0,
        eval_examples_per_length=4,
        greedy_examples_per_bin=8,
        eval_batch_size=8,
        log_every=4,
        checkpoint_every=4,
    )
    return TrainConfig(**{**values, **changes})


def write_run_records(run_dir: Path, records: list[dict]) -> None:
    """Records tagged with task and seed, written where training writes them: a "result" record as
    its job folder's result.json, every other one appended to the job folder's metrics.jsonl."""
    for record in records:
        folder = JobFolder.of(run_dir, record["task"], record["seed"])
        folder.path.mkdir(parents=True, exist_ok=True)
        if record["kind"] == "result":
            write_json(folder.result_file, {key: value for key, value in record.items() if key != "kind"})
        else:
            append_jsonl(
                folder.metrics_file, {key: value for key, value in record.items() if key not in ("task", "seed")}
            )
