"""The smallest models and training settings the lab accepts, shared by the test modules (and,
as fixtures, by conftest.py)."""

from crasplab.train.config import ModelSettings, TrainConfig

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
    return TrainConfig(**{**values, **changes}).validate()
