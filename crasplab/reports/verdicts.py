"""The verdict protocol: one rule, fixed before any run, by which trained models are counted.

A task's verdict at a test bin is made seed by seed, never from a mean over seeds (bimodal seeds
average to numbers no model has):

1. A seed *fits* when it answers every one of at least `min_train_strings` training-length strings
   exactly. A seed that does not fit says nothing about longer inputs; it is reported apart, as
   "still improving at its cap" when its last evaluation was better than the one before.
2. A fitted seed *passes* a bin when the lower end of the Wilson interval of its accuracy there is
   at least the threshold, *fails* it when the upper end is below the threshold, and is
   *inconclusive* when the interval straddles the threshold. A bin needs `min_bin_strings`.
3. With F fitted seeds (at least `min_fitted_seeds`), the task *generalizes* at the bin when at
   least `pass_fraction` of them pass, *fails* when at most `fail_fraction` of them pass, and is
   *mixed* otherwise. Inconclusive seeds are never rounded: when deciding them either way could
   change the task's verdict, the verdict is *inconclusive*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crasp.intervals import Z_95, wilson_interval
from crasplab.records.settings import Settings

GENERALIZES, FAILS, MIXED, INCONCLUSIVE, TOO_FEW = (
    "generalizes",
    "fails",
    "mixed",
    "inconclusive",
    "too few fitted seeds",
)
PASS, FAIL, UNSURE = "pass", "fail", "inconclusive"


@dataclass(frozen=True)
class Protocol(Settings):
    threshold: float = 0.9
    min_train_strings: int = 500
    min_bin_strings: int = 1000
    min_fitted_seeds: int = 5
    pass_fraction: float = 0.8  # 4 of 5
    fail_fraction: float = 0.2  # 1 of 5
    z: float = Z_95

    def check(self) -> None:
        self.require(0 < self.threshold < 1, "threshold", "a number strictly between 0 and 1")
        for name in ("min_train_strings", "min_bin_strings", "min_fitted_seeds"):
            self.require(getattr(self, name) >= 1, name, "an integer of at least 1")
        self.require_that(
            0 <= self.fail_fraction < self.pass_fraction <= 1,
            f"need 0 <= fail_fraction < pass_fraction <= 1, got {self.fail_fraction!r}, {self.pass_fraction!r}",
        )
        self.require(self.z > 0, "z", "a number above 0")

    def text(self) -> str:
        """The rules in words, as every report prints them."""
        level = round(100 * (1 - math.erfc(self.z / math.sqrt(2))))
        return (
            f"A seed fits when it answers all of at least {self.min_train_strings} training-length strings "
            f"exactly. A fitted seed passes a test bin (at least {self.min_bin_strings} strings) when the "
            f"{level}% Wilson interval of its accuracy lies at or above {self.threshold}, fails it when the "
            f"interval lies below, and is inconclusive when the interval straddles {self.threshold}. With at "
            f"least {self.min_fitted_seeds} fitted seeds, a task generalizes at the bin when at least "
            f"{self.pass_fraction:.0%} of them pass, fails when at most {self.fail_fraction:.0%} pass, and is "
            "mixed otherwise; when the inconclusive seeds could change that verdict, it is inconclusive. No "
            "verdict is made from a mean over seeds."
        )


@dataclass(frozen=True)
class SeedAtBin:
    seed: int
    correct: int
    total: int
    low: float
    high: float
    outcome: str  # pass, fail or inconclusive

    @property
    def accuracy(self) -> float:
        return self.correct / self.total


def seed_fits(protocol: Protocol, train_correct: int, train_total: int) -> bool:
    return train_total >= protocol.min_train_strings and train_correct == train_total


def judge_seed(protocol: Protocol, seed: int, correct: int, total: int) -> SeedAtBin:
    if total < protocol.min_bin_strings:
        raise ValueError(f"seed {seed}: a bin of {total} strings is below the protocol's {protocol.min_bin_strings}")
    low, high = wilson_interval(correct, total, protocol.z)
    outcome = PASS if low >= protocol.threshold else FAIL if high < protocol.threshold else UNSURE
    return SeedAtBin(seed, correct, total, low, high, outcome)


def _count_verdict(protocol: Protocol, passed: int, fitted: int) -> str:
    if passed >= protocol.pass_fraction * fitted:
        return GENERALIZES
    if passed <= protocol.fail_fraction * fitted:
        return FAILS
    return MIXED


def task_verdict(protocol: Protocol, seeds: list[SeedAtBin]) -> str:
    """The verdict of one task at one bin from its fitted seeds' outcomes there."""
    if len(seeds) < protocol.min_fitted_seeds:
        return TOO_FEW
    passed = sum(s.outcome == PASS for s in seeds)
    unsure = sum(s.outcome == UNSURE for s in seeds)
    # Every way the inconclusive seeds could fall: one verdict for all of them, or none.
    possible = {_count_verdict(protocol, passed + k, len(seeds)) for k in range(unsure + 1)}
    return possible.pop() if len(possible) == 1 else INCONCLUSIVE


def agrees(predicted_generalizes: bool | None, verdict: str) -> bool | None:
    """Whether a verdict agrees with the prediction; None where either says nothing."""
    if predicted_generalizes is None or verdict not in (GENERALIZES, FAILS):
        return None
    return predicted_generalizes == (verdict == GENERALIZES)
