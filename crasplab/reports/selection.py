"""Choosing one model configuration per task from a sweep's finished runs, by one rule applied
identically to every task and computed from the runs' files only.

The rule (Huang et al. 2025's protocol, with the lab's fit threshold):

1. A configuration fits a task when its runs' mean accuracy on the training bin (the training
   lengths) is at least the fit threshold (0.99, as in the length-generalization report).
2. Among the configurations that fit, the one with the highest mean accuracy on the validation
   bin: a bin of lengths beyond training that the final verdict never reads (the verdict judges
   fit on the training bin and generalization on its last, longest bin; the sweep's validation
   bin is the preset's first bin past training).
3. Ties on the validation accuracy (equal as recorded, to 6 decimals) go to the smaller model:
   fewer block weights (layers x d_model^2), then fewer layers, fewer heads, the lower
   learning rate; the order is total, so the choice never depends on listing order.
4. When no configuration fits, the task has no selection and its verdict seeds are not run:
   the sweep says which configuration came closest on the training bin.
5. A task with a run not yet finished (no result.json) gets no selection yet: a run still
   going could change it.

Each sweep run is a job folder `<sweep>/<task>/<configuration>/seed<s>` whose `result.json`
holds its final evaluation per bin.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from crasplab.records.files import ResultFileError
from crasplab.records.job_folder import JobFolder, JobResult
from crasplab.records.settings import Settings
from crasplab.verdicts.rules import FIT_THRESHOLD

# Huang et al. 2025's grid per task; "small" for a CPU.
GRIDS = {
    "huang": dict(n_layers=(1, 2, 4), n_heads=(1, 2, 4), d_model=(16, 64, 256), learning_rate=(1e-3, 1e-4)),
    "small": dict(n_layers=(1, 2), n_heads=(2, 4), d_model=(16, 64), learning_rate=(1e-3,)),
}
SELECTED, NONE_FITS, PENDING = "selected", "none fits", "pending"


@dataclass(frozen=True, order=True)
class Configuration(Settings):
    """One point of the sweep grid: a model size and a peak learning rate."""

    n_layers: int
    n_heads: int
    d_model: int
    learning_rate: float

    def check(self) -> None:
        for name in ("n_layers", "n_heads", "d_model"):
            self.require(getattr(self, name) >= 1, name, "an integer of at least 1")
        self.require(self.d_model % self.n_heads == 0, "d_model", f"a multiple of n_heads ({self.n_heads})")
        self.require(self.learning_rate > 0, "learning_rate", "a number above 0")

    @property
    def name(self) -> str:
        return f"L{self.n_layers}-H{self.n_heads}-D{self.d_model}-lr{self.learning_rate:g}"

    def size_order(self) -> tuple:
        """Rule 3's order: smaller models first."""
        return (self.n_layers * self.d_model**2, self.n_layers, self.n_heads, self.learning_rate)


def grid(n_layers, n_heads, d_model, learning_rate) -> list[Configuration]:
    """Every combination, less those whose width the heads cannot split (d_model % n_heads)."""
    return [
        Configuration(*values)
        for values in itertools.product(n_layers, n_heads, d_model, learning_rate)
        if values[2] % values[1] == 0
    ]


def sweep_folder(sweep_dir: Path, task: str, configuration: Configuration, seed: int) -> Path:
    return Path(sweep_dir) / task / configuration.name / f"seed{seed}"


@dataclass(frozen=True)
class Candidate:
    """A configuration's sweep runs on one task: mean accuracies over its finished seeds."""

    configuration: Configuration
    finished: bool
    train_accuracy: float | None
    validation_accuracy: float | None

    @property
    def fits(self) -> bool:
        return self.finished and self.train_accuracy >= FIT_THRESHOLD


def bin_accuracy(result: JobResult, wanted: tuple[int, int], path: Path) -> float:
    """The accuracy a result.json records for the bin `wanted` (lo, hi)."""
    for recorded in result.bins:
        if (recorded.lo, recorded.hi) == tuple(wanted):
            return recorded.accuracy
    held = ", ".join(f"{b.lo}-{b.hi}" for b in result.bins)
    raise ResultFileError(
        f"{path}: no evaluation of the bin {wanted[0]}-{wanted[1]} (it holds {held}); the sweep "
        "evaluates every run on its training bin and validation bin. Was this folder trained "
        "with other --test-bins? Delete it to rerun it, or give the bins it was trained with"
    )


def read_candidate(
    sweep_dir: Path,
    task: str,
    configuration: Configuration,
    seeds,
    train_bin: tuple[int, int],
    validation_bin: tuple[int, int],
) -> Candidate:
    accuracies = []
    for seed in seeds:
        job = JobFolder(sweep_folder(sweep_dir, task, configuration, seed))
        if not job.is_done():
            return Candidate(configuration, finished=False, train_accuracy=None, validation_accuracy=None)
        result, path = job.read_result(), job.result_file
        accuracies.append((bin_accuracy(result, train_bin, path), bin_accuracy(result, validation_bin, path)))
    train, validation = (round(sum(values) / len(values), 6) for values in zip(*accuracies))
    return Candidate(configuration, finished=True, train_accuracy=train, validation_accuracy=validation)


def select(candidates: list[Candidate]) -> tuple[str, Candidate | None]:
    """(status, the chosen candidate or None) by the module's rule."""
    if not all(candidate.finished for candidate in candidates):
        return PENDING, None
    fitting = [candidate for candidate in candidates if candidate.fits]
    if not fitting:
        return NONE_FITS, None
    best = max(candidate.validation_accuracy for candidate in fitting)
    tied = [candidate for candidate in fitting if candidate.validation_accuracy == best]
    return SELECTED, min(tied, key=lambda candidate: candidate.configuration.size_order())


def select_per_task(
    sweep_dir: Path,
    tasks,
    configurations: list[Configuration],
    seeds,
    bins: dict[str, tuple[tuple[int, int], tuple[int, int]]],
) -> dict:
    """selection.json's content: per task the status, the chosen configuration and every
    candidate. `bins`: task -> (training bin, validation bin), as its runs record them."""
    selections = {}
    for task in tasks:
        train_bin, validation_bin = bins[task]
        candidates = [
            read_candidate(sweep_dir, task, configuration, seeds, train_bin, validation_bin)
            for configuration in configurations
        ]
        status, chosen = select(candidates)
        closest = max((c for c in candidates if c.finished), key=lambda c: c.train_accuracy, default=None)
        selections[task] = dict(
            train_bin=list(train_bin),
            validation_bin=list(validation_bin),
            status=status,
            selected=None if chosen is None else chosen.configuration.to_dict(),
            closest_on_training_bin=None if closest is None else closest.configuration.name,
            candidates=[
                dict(
                    configuration=candidate.configuration.name,
                    finished=candidate.finished,
                    fits=candidate.fits,
                    train_accuracy=candidate.train_accuracy,
                    validation_accuracy=candidate.validation_accuracy,
                )
                for candidate in candidates
            ],
        )
    return dict(fit_threshold=FIT_THRESHOLD, seeds=list(seeds), tasks=selections)


def selection_markdown(selection: dict) -> str:
    """One table per task: every configuration's training-bin and validation-bin accuracy, the
    chosen one marked."""
    parts = [
        f"Selection rule: fit = mean training-bin accuracy >= {selection['fit_threshold']}; among those, the "
        f"highest mean accuracy on the validation bin, which the verdict never reads; ties to the smaller "
        f"model. Means over seeds {selection['seeds']}.\n"
    ]
    for task, entry in selection["tasks"].items():
        (train_lo, train_hi), (lo, hi) = entry["train_bin"], entry["validation_bin"]
        chosen = entry["selected"] and Configuration.from_dict(entry["selected"]).name
        verdict = {
            SELECTED: f"selected {chosen}",
            PENDING: "pending: runs not finished",
            NONE_FITS: f"no configuration fits (closest: {entry['closest_on_training_bin']})",
        }[entry["status"]]
        parts += [
            f"\n## {task}: {verdict}\n\n",
            f"| configuration | {train_lo}-{train_hi} (training) | {lo}-{hi} (validation) | fits |\n",
            "|---|---|---|---|\n",
        ]
        for candidate in entry["candidates"]:
            cells = (
                ["-", "-", "running"]
                if not candidate["finished"]
                else [
                    f"{candidate['train_accuracy']:.3f}",
                    f"{candidate['validation_accuracy']:.3f}",
                    "yes" if candidate["fits"] else "no",
                ]
            )
            mark = " **(selected)**" if candidate["configuration"] == chosen else ""
            parts.append(f"| {candidate['configuration']}{mark} | " + " | ".join(cells) + " |\n")
    return "".join(parts)
