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
from enum import StrEnum
from pathlib import Path

from crasp.discrimination import DEFAULT_THRESHOLD
from crasp.intervals import Z_95, wilson_interval
from crasplab.records.files import file_problem, read_json_object, write_json
from crasplab.records.run_folder import RunFolderError
from crasplab.records.settings import Settings


class Verdict(StrEnum):
    """A task's verdict at a test bin (rule 3), or its control's state there."""

    GENERALIZES = "generalizes"
    FAILS = "fails"
    MIXED = "mixed"
    INCONCLUSIVE = "inconclusive"
    TOO_FEW = "too few fitted seeds"
    NOT_RUN = "not run"  # a control that did not run with the task's setting


class Outcome(StrEnum):
    """A fitted seed's outcome at a test bin (rule 2)."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class VerdictRules(Settings):
    # The one default: crasp's discrimination check, which runs without the lab, reads the same number.
    threshold: float = DEFAULT_THRESHOLD
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
    outcome: Outcome

    @property
    def accuracy(self) -> float:
        return self.correct / self.total


def seed_fits(rules: VerdictRules, train_correct: int, train_total: int) -> bool:
    return train_total >= rules.min_train_strings and train_correct == train_total


def _outcome(low: float, high: float, threshold: float) -> Outcome:
    return Outcome.PASS if low >= threshold else Outcome.FAIL if high < threshold else Outcome.INCONCLUSIVE


def judge_seed(rules: VerdictRules, seed: int, correct: int, total: int) -> SeedAtBin:
    if total < rules.min_bin_strings:
        raise ValueError(f"seed {seed}: a bin of {total} strings is below the protocol's {rules.min_bin_strings}")
    low, high = wilson_interval(correct, total, rules.z)
    return SeedAtBin(seed, correct, total, low, high, _outcome(low, high, rules.threshold))


def _count_verdict(rules: VerdictRules, passed: int, fitted: int) -> Verdict:
    if passed >= rules.pass_fraction * fitted:
        return Verdict.GENERALIZES
    if passed <= rules.fail_fraction * fitted:
        return Verdict.FAILS
    return Verdict.MIXED


def task_verdict(rules: VerdictRules, seeds: list[SeedAtBin]) -> Verdict:
    """The verdict of one task at one bin from its fitted seeds' outcomes there."""
    if len(seeds) < rules.min_fitted_seeds:
        return Verdict.TOO_FEW
    passed = sum(s.outcome == Outcome.PASS for s in seeds)
    unsure = sum(s.outcome == Outcome.INCONCLUSIVE for s in seeds)
    # Every way the inconclusive seeds could fall: one verdict for all of them, or none.
    possible = {_count_verdict(rules, passed + k, len(seeds)) for k in range(unsure + 1)}
    return possible.pop() if len(possible) == 1 else Verdict.INCONCLUSIVE


def agrees(predicted_generalizes: bool | None, verdict: Verdict) -> bool | None:
    """Whether a verdict agrees with the prediction; None where either says nothing."""
    if predicted_generalizes is None or verdict not in (Verdict.GENERALIZES, Verdict.FAILS):
        return None
    return predicted_generalizes == (verdict == Verdict.GENERALIZES)


def counted_agreement(generalizes: bool | None, verdict: Verdict, discriminates: bool | None) -> bool | None:
    """Whether a bin's verdict agrees with the prediction, None where it is not counted: a bin
    that a bounded program passes cannot show a failure the theory predicts."""
    counted = generalizes is not False or discriminates is True
    return agrees(generalizes, verdict) if counted else None


# Fitted seeds a verdict needs, per position encoding: five for APE, whose theorem the lab tests
# first; three for the others.
REQUIRED_FITTED_SEEDS = {"ape": 5, "rope": 3, "nope": 3, "alibi": 3}


def rules_for(pe: str, threshold: float | None = None) -> VerdictRules:
    """The rules of a protocol run with position encoding `pe` (`threshold`: None for the default)."""
    return VerdictRules(
        threshold=DEFAULT_THRESHOLD if threshold is None else threshold,
        min_fitted_seeds=REQUIRED_FITTED_SEEDS[pe],
    )


PROTOCOL_FILE = "protocol.json"
PROTOCOL_FIX = (
    "restore it, or delete it and run the run's --protocol command again: it writes the rules anew (they "
    "follow from the encoding and the threshold)"
)


def read_protocol(run_dir: Path) -> VerdictRules | None:
    """protocol.json's rules (None for a run without the protocol), validated: a ResultFileError
    names the file, what is wrong and what to do."""
    path = Path(run_dir) / PROTOCOL_FILE
    if not path.exists():
        return None
    rules = read_json_object(path, PROTOCOL_FIX, required=("rules",))["rules"]
    try:
        return VerdictRules.from_dict(rules)
    except (TypeError, ValueError) as error:  # not an object, an unknown rule, or a rule out of its bounds
        raise file_problem(path, f"rules that do not read ({error})", PROTOCOL_FIX) from None


def write_protocol(run_dir: Path, rules: VerdictRules) -> None:
    """protocol.json, once: a rerun keeps the rules the run started with (a changed rule is refused)."""
    path = Path(run_dir) / PROTOCOL_FILE
    if path.exists():
        if read_protocol(run_dir) != rules:
            raise RunFolderError(
                f"{path} holds other rules than this command's; a protocol run keeps the rules it "
                "started with: use another --out"
            )
        return
    write_json(path, dict(rules=rules.to_dict(), text=rules.text()))


def reading_threshold(rules: VerdictRules | None, asked: float | None, run_dir: Path) -> float:
    """The one threshold a run's report reads at: a protocol run's rules fixed it before the run
    (`asked`, another one, is refused); any other run is read at `asked`, or the default."""
    if rules is None:
        return DEFAULT_THRESHOLD if asked is None else asked
    if asked is not None and asked != rules.threshold:
        raise RunFolderError(
            f"{run_dir} is a protocol run: its rules (protocol.json) fixed the threshold at {rules.threshold:g} "
            f"before it ran, so its report is read at that, not {asked:g}; leave out --threshold"
        )
    return rules.threshold


# A run that is not a protocol run, and the fine-tuning runs, observe instead of judging. A model
# below this on its own training lengths has not learned the task, so its longer bins say
# nothing about length generalization: it is reported apart and left out of the agreement count.
# (The protocol asks more: every one of at least min_train_strings exact.)
FIT_THRESHOLD = 0.99


class Observation(StrEnum):
    """What one seed of a run outside the protocol shows at its last test bin: rule 2 applied to it,
    with no minimum string counts. An observation, not a verdict: a task's verdict needs the
    protocol's fitted seeds (rule 3), and no observation is made from a mean over seeds."""

    # In the order a tally names them (observation_text).
    PASSES = "passes"
    FAILS = "fails"
    INCONCLUSIVE = "inconclusive"
    DID_NOT_FIT = "did not fit"


_OBSERVED = {
    Outcome.PASS: Observation.PASSES,
    Outcome.FAIL: Observation.FAILS,
    Outcome.INCONCLUSIVE: Observation.INCONCLUSIVE,
}


@dataclass(frozen=True)
class SeedObservation:
    seed: int
    observation: Observation
    train_accuracy: float
    accuracy: float  # at the last test bin
    low: float
    high: float


def observe_seed(
    seed: int, train: tuple[int, int], last: tuple[int, int], threshold: float, z: float = Z_95
) -> SeedObservation:
    """One seed's observation from (strings right, strings) on its training lengths and its last bin."""
    low, high = wilson_interval(*last, z)
    fits = train[0] >= FIT_THRESHOLD * train[1]
    observation = _OBSERVED[_outcome(low, high, threshold)] if fits else Observation.DID_NOT_FIT
    return SeedObservation(seed, observation, train[0] / train[1], last[0] / last[1], low, high)


def in_line(predicted_generalizes: bool | None, observations: list[SeedObservation]) -> bool | None:
    """Whether a task's observations agree with its prediction: True when every fitted seed is
    conclusive and on the predicted side (passes where it is predicted to generalize, fails where
    not), False when every one is on the other side, None otherwise (no prediction, no fitted seed,
    an inconclusive seed, or seeds on both sides)."""
    fitted = [o.observation for o in observations if o.observation != Observation.DID_NOT_FIT]
    if predicted_generalizes is None or not fitted or Observation.INCONCLUSIVE in fitted:
        return None
    sides = {(o == Observation.PASSES) == predicted_generalizes for o in fitted}
    return sides.pop() if len(sides) == 1 else None


def observation_text(observations: list[SeedObservation]) -> str:
    """One seed's observation, or a tally of several ("2 pass, 1 fails, 1 did not fit")."""
    if len(observations) == 1:
        return observations[0].observation.value
    plural = {Observation.PASSES: "pass", Observation.FAILS: "fail"}
    return ", ".join(
        f"{n} {plural.get(kind, kind.value) if n > 1 else kind.value}"
        for kind in Observation
        if (n := sum(o.observation == kind for o in observations))
    )
