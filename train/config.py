"""Training settings: one frozen dataclass, named presets, validation with actionable errors.

A run is fully described by a `TrainConfig` plus the model settings (a plain dict handed to
`models`), the task code and the seed; `config.json` in every run folder is `asdict` of these.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

SCHEDULES = ("linear", "constant")
RETRIEVAL_AND_COPYING = ("UL", "UR", "NLFirst", "NRFirst", "NLLast", "NRLast", "UF", "UB", "NF", "NB")


class ConfigError(ValueError):
    """A training setting is out of range or inconsistent with another one."""


@dataclass(frozen=True)
class TrainConfig:
    """How one model is trained and evaluated on one task.

    Lengths are task input lengths (context length for retrieval, source length for copying),
    both ends inclusive. Lengths below what a task's sampler can produce are raised to
    `task.min_length()` for that task (recorded in the run's metrics).
    """

    train_lengths: tuple[int, int] = (1, 50)
    test_bins: tuple[tuple[int, int], ...] = ((1, 50), (51, 100), (101, 150))
    batch_size: int = 64
    # Every training batch holds strings from one of this many contiguous ranges of the training
    # lengths and is padded to that range's longest string (train.data.LengthBuckets); 1: every
    # batch mixes all lengths and is padded to the longest training string.
    length_buckets: int = 1
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    # Linear warmup then linear decay to zero at max_steps ("linear"), or warmup then constant.
    schedule: str = "linear"
    warmup_steps: int = 1000
    max_steps: int = 30_000
    eval_every: int = 5_000
    # Stop once the training bin (bin 0 must equal the training range) has been at 100%
    # in this many consecutive evaluations; 0 disables early stopping.
    stop_after_perfect_evals: int = 1
    # Test strings at each input length of each bin (a bin's accuracy is the mean over its lengths).
    eval_examples_per_length: int = 40
    # Greedy KV-cache decoding on this many strings per bin; its exact match must agree with
    # the teacher-forced one (a disagreement is counted and reported).
    greedy_examples_per_bin: int = 64
    eval_batch_size: int = 250
    log_every: int = 100
    checkpoint_every: int = 1_000
    # APE only: each training example starts at a random offset so every position row is trained.
    random_position_offset: bool = True
    # Size of the position table (APE) and the longest sequence any run may see.
    max_positions: int = 0  # 0: derived from the longest test bin of the task

    def validate(self) -> TrainConfig:
        def require(condition: bool, message: str) -> None:
            if not condition:
                raise ConfigError(f"TrainConfig: {message}")

        lo, hi = self.train_lengths
        require(1 <= lo <= hi, f"train_lengths must be (lo, hi) with 1 <= lo <= hi, got {self.train_lengths}")
        require(len(self.test_bins) >= 1, "test_bins must hold at least one (lo, hi) bin")
        for bin_lo, bin_hi in self.test_bins:
            require(1 <= bin_lo <= bin_hi, f"each test bin must satisfy 1 <= lo <= hi, got {(bin_lo, bin_hi)}")
        require(tuple(self.test_bins[0]) == tuple(self.train_lengths),
                f"the first test bin {self.test_bins[0]} must equal train_lengths {self.train_lengths}: "
                "it is the in-distribution bin the stopping rule watches")
        require(self.schedule in SCHEDULES, f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        for name in ("batch_size", "length_buckets", "max_steps", "eval_every", "eval_examples_per_length",
                     "eval_batch_size", "log_every", "checkpoint_every"):
            require(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "greedy_examples_per_bin", "stop_after_perfect_evals", "max_positions"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        require(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        require(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        require(self.warmup_steps < self.max_steps,
                f"warmup_steps ({self.warmup_steps}) must be below max_steps ({self.max_steps})")
        return self

    def replace(self, **changes) -> TrainConfig:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown training setting(s) {sorted(unknown)}; known: "
                              f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes).validate()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        values = dict(values)
        values["train_lengths"] = tuple(values["train_lengths"])
        values["test_bins"] = tuple(tuple(b) for b in values["test_bins"])
        return cls().replace(**values)


@dataclass(frozen=True)
class Preset:
    """A named experiment scale: training settings, model size, task sampler overrides, seeds."""

    name: str
    description: str
    train: TrainConfig
    model: dict = field(default_factory=dict)
    # Keyword overrides for crasp.tasks.get_task, per task code.
    task_overrides: dict = field(default_factory=dict)
    # TrainConfig changes per task code (e.g. a longer budget where supervision is sparse).
    train_overrides: dict = field(default_factory=dict)
    seeds: tuple[int, ...] = (0, 1, 2)
    tasks: tuple[str, ...] = RETRIEVAL_AND_COPYING

    def overrides_for(self, task_code: str) -> dict:
        return dict(self.task_overrides.get(task_code, {}))

    def train_for(self, task_code: str, **changes) -> TrainConfig:
        """The task's training settings: the preset's, its per-task changes, then `changes`."""
        return self.train.replace(**{**self.train_overrides.get(task_code, {}), **changes})


PAPER = Preset(
    name="paper",
    description="Appendix B of the retrieval/copying paper: lengths 1-50, bins to 150, 4x4x256.",
    train=TrainConfig().validate(),
    model=dict(n_layers=4, n_heads=4, d_model=256, d_ff=1024),
    seeds=(0, 1, 2),
)

# Scaled down for a 2-core laptop from the calibration study in experiments/calibration/ (its
# README gives the measurements behind every number here). Copying supervises every answer token,
# retrieval one token per string: retrieval steps are cheaper (shorter strings) and it needs more
# of them, hence the per-task budgets. The unique retrieval tasks learn far faster over 16
# symbols than over 64; unique copying needs at least as many symbols as the longest test input.
RETRIEVAL = ("UL", "UR", "NLFirst", "NRFirst", "NLLast", "NRLast")
QUICK = Preset(
    name="quick",
    description="2-core CPU scale (experiments/calibration): lengths 1-20, bins to 40, 2 layers x 4 heads x d 64, "
                "1 seed.",
    train=TrainConfig(
        train_lengths=(1, 20), test_bins=((1, 20), (21, 30), (31, 40)), batch_size=64, learning_rate=1e-3,
        schedule="linear", warmup_steps=200, max_steps=6000, eval_every=500, stop_after_perfect_evals=1,
        length_buckets=5, eval_examples_per_length=25, greedy_examples_per_bin=32, eval_batch_size=250, log_every=100,
        checkpoint_every=500,
    ).validate(),
    model=dict(n_layers=2, n_heads=4, d_model=64, d_ff=256),
    task_overrides={"UL": dict(alphabet_size=16), "UR": dict(alphabet_size=16),
                    "UF": dict(alphabet_size=64), "UB": dict(alphabet_size=64)},
    train_overrides={code: dict(max_steps=8000) for code in RETRIEVAL},
    seeds=(0,),
)

PRESETS = {preset.name: preset for preset in (QUICK, PAPER)}
