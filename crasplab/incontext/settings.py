"""The settings of the experiments on pretrained models (experiments/pretrained.py, finetune.py,
realistic.py, mechanism.py): one frozen dataclass each, checked when built (every error names the
setting, what was given and what is accepted), written into the run folder's config.json and read
back from it by the report (crasplab.records.run_folder.read_run_settings).

Defaults are the scripts' defaults.
"""

from __future__ import annotations

from pathlib import Path

from dataclasses import dataclass

from crasp.tasks import RETRIEVAL_AND_COPYING, TASK_CODES, TaskError
from crasplab.incontext.controls import CONTROL_SETS
from crasplab.incontext.directions import DIRECTIONS
from crasplab.incontext.formal_prompts import Demonstrations, check_prompt_lengths
from crasplab.incontext.git_history import COMMANDS
from crasplab.models.analysis import SCORES
from crasplab.models.config import DTYPES
from crasplab.records.settings import Settings, SettingsError
from crasplab.incontext.finetune_config import FinetuneConfig
from crasplab.verdicts.rules import DEFAULT_THRESHOLD

ABLATIONS = ("mean", "zero")


def _prompt_lengths(tasks, lengths, demonstrations: Demonstrations) -> None:
    """check_prompt_lengths, its TaskError as a SettingsError (a setting, not a task, is wrong)."""
    try:
        check_prompt_lengths(tasks, lengths, demonstrations)
    except TaskError as error:
        raise SettingsError(str(error)) from None


class PromptSettings(Settings):
    """What the four experiments share: the model, the seed and decoding batches."""

    RESULTS_UNCHANGED = ("batch_size",)

    def check(self) -> None:
        self.require(self.seed >= 0, "seed", "an integer of at least 0")
        self.require(self.batch_size >= 1, "batch_size", "an integer of at least 1")

    def at_least(self, minimum: int, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            values = value if isinstance(value, tuple) else (value,)
            self.require(all(v >= minimum for v in values), name, f"integers of at least {minimum}")

    def among(self, name: str, accepted) -> None:
        value = getattr(self, name)
        values = value if isinstance(value, tuple) else (value,)
        self.require(
            set(values) <= set(accepted),
            name,
            f"{'values' if isinstance(value, tuple) else 'one'} of {', '.join(accepted)}",
        )


@dataclass(frozen=True)
class PretrainedSettings(PromptSettings):
    """experiments/pretrained.py: few-shot prompts of the ten tasks, answered greedily."""

    model: str = "smollm2"
    tasks: tuple[str, ...] = RETRIEVAL_AND_COPYING
    lengths: tuple[int, ...] = (10, 20, 40)
    n: int = 40
    seed: int = 0
    batch_size: int = 16
    dtype: str = "float32"
    retrieval_demonstrations: int = 4
    retrieval_demo_length: int = 4
    copying_demonstrations: int = 5
    copying_demo_length: int = 5

    @property
    def demonstrations(self) -> Demonstrations:
        return Demonstrations(
            retrieval=(self.retrieval_demonstrations, self.retrieval_demo_length),
            copying=(self.copying_demonstrations, self.copying_demo_length),
        )

    def check(self) -> None:
        super().check()
        self.among("tasks", RETRIEVAL_AND_COPYING)
        self.among("dtype", DTYPES)
        self.at_least(
            1, "n", "retrieval_demonstrations", "retrieval_demo_length", "copying_demonstrations", "copying_demo_length"
        )
        _prompt_lengths(self.tasks, self.lengths, self.demonstrations)


@dataclass(frozen=True)
class FinetuneSettings(PromptSettings):
    """experiments/finetune.py: a preset's fine-tuning settings with the command line's changes."""

    RESULTS_UNCHANGED = ()

    model: str = "smollm2"
    preset: str = "quick"
    tasks: tuple[str, ...] = ("UF", "UB", "NF", "NB")
    seed: int = 0
    threshold: float = DEFAULT_THRESHOLD
    finetune: FinetuneConfig = FinetuneConfig()

    @property
    def batch_size(self) -> int:  # PromptSettings' check reads it
        return self.finetune.batch_size

    def check(self) -> None:
        super().check()
        self.among("tasks", RETRIEVAL_AND_COPYING)
        self.require(0 <= self.threshold <= 1, "threshold", "a number from 0 to 1")
        config = self.finetune
        # The first bin is the training range, so these are every length a prompt is drawn at.
        demonstrations = (config.demonstrations, config.demo_length)
        _prompt_lengths(
            self.tasks,
            sorted({n for lo, hi in config.test_bins for n in range(lo, hi + 1)}),
            Demonstrations(retrieval=demonstrations, copying=demonstrations),
        )


@dataclass(frozen=True)
class RealisticSettings(PromptSettings):
    """What the two subcommands of experiments/realistic.py share; `experiment` names the subcommand."""

    experiment: str
    model: str = "smollm2"
    seed: int = 0
    dtype: str = "float32"

    def check(self) -> None:
        super().check()
        named = type(self).__dataclass_fields__["experiment"].default
        self.require(self.experiment == named, "experiment", repr(named))
        self.among("dtype", DTYPES)


@dataclass(frozen=True)
class LoremRunSettings(RealisticSettings):
    """experiments/realistic.py lorem: lorem-ipsum paragraphs copied forward and backward."""

    experiment: str = "lorem"
    lengths: tuple[int, ...] = (50, 100, 200, 400)
    directions: tuple[str, ...] = tuple(DIRECTIONS)
    n: int = 6
    batch_size: int = 6
    demonstrations: int = 2
    demo_length: int = 30
    repeat_word: float = 0.15
    repeat_sentence: float = 0.15
    output_limit: float = 1.5  # outputs are read up to this many times the reference's tokens

    def check(self) -> None:
        super().check()
        self.among("directions", DIRECTIONS)
        self.at_least(1, "lengths", "n", "demo_length")
        self.at_least(0, "demonstrations")
        for name in ("repeat_word", "repeat_sentence"):
            self.require(0 <= getattr(self, name) <= 1, name, "a probability from 0 to 1")
        self.require(self.output_limit >= 1, "output_limit", "a number of at least 1")


@dataclass(frozen=True)
class GitRunSettings(RealisticSettings):
    """experiments/realistic.py git: the hashes of a synthetic history in revert or cherry-pick order."""

    experiment: str = "git"
    commits: tuple[int, ...] = (2, 4, 8, 16)
    commands: tuple[str, ...] = tuple(COMMANDS)
    n: int = 10
    batch_size: int = 10
    examples: int = 3
    example_commits: int = 4

    def check(self) -> None:
        super().check()
        self.among("commands", COMMANDS)
        self.at_least(1, "commits", "n", "example_commits")
        self.at_least(0, "examples")


@dataclass(frozen=True)
class MechanismSettings(PromptSettings):
    """experiments/mechanism.py: head scores and ablations, on a pretrained model (`model`, with
    `tasks`, `lengths`, `n`) or on the model of one task of a from-scratch run (`run`, with
    `task`, `train_seed`, `examples_per_length`); the settings of the other kind are None."""

    model: str | None = "smollm2"
    tasks: tuple[str, ...] | None = ("UF", "UB", "UR", "UL")
    lengths: tuple[int, ...] | None = (5,)
    n: int | None = 32
    run: str | None = None
    task: str | None = None
    train_seed: int | None = None
    examples_per_length: int | None = None  # None: as many as the run's training evaluated
    periods: tuple[int, ...] = (5, 10, 20)
    sequences: int = 100
    ablate: tuple[str, ...] = ("induction", "anti_induction", "previous_token", "first_occurrence")
    k: tuple[int, ...] = (4, 16)
    draws: int = 2
    # The controls matched to each ablated score's heads (crasplab.incontext.controls), `draws`
    # of each, beside the "random" control every run draws.
    controls: tuple[str, ...] = CONTROL_SETS
    ablation: str = "mean"
    greedy_check: int = 8
    seed: int = 0
    batch_size: int = 32

    @classmethod
    def upgrade_config(cls, values: dict) -> dict:
        """Runs before these settings (the committed ones in evidence/mechanism) drew no matched
        controls, recorded only their own kind of model, and a from-scratch model's seed only in
        the name of its job folder (<run>/<task>/seed<k>)."""
        if "controls" not in values:
            values = {**values, "controls": []}
        if "train_seed" in values or "kind" not in values:
            return values
        if values["kind"] == "from-scratch":
            seed = Path(str(values.get("job_folder", ""))).name.removeprefix("seed")
            other = dict(model=None, tasks=None, lengths=None, n=None, train_seed=int(seed) if seed.isdigit() else None)
        else:
            other = dict(run=None, task=None, train_seed=None, examples_per_length=None)
        return {**other, **values}

    def check(self) -> None:
        super().check()
        pretrained = {"model": self.model, "tasks": self.tasks, "lengths": self.lengths, "n": self.n}
        from_scratch = {"run": self.run, "task": self.task, "train_seed": self.train_seed}
        given, other = (pretrained, from_scratch) if self.run is None else (from_scratch, pretrained)
        for name, value in {**given, **other}.items():
            self.require(
                (value is None) == (name in other),
                name,
                "a value for a model of its kind and none for the other kind (give --model or --run, not both)"
                if name in given
                else "none: it belongs to the other kind of model",
            )
        if self.run is None:
            self.among("tasks", RETRIEVAL_AND_COPYING)
            self.at_least(1, "lengths", "n")
            _prompt_lengths(self.tasks, self.lengths, Demonstrations())
        else:
            self.among("task", TASK_CODES)
            self.at_least(0, "train_seed")
            if self.examples_per_length is not None:
                self.at_least(1, "examples_per_length")
        self.at_least(2, "periods", "sequences")
        self.at_least(1, "k")
        self.at_least(0, "draws", "greedy_check")
        self.among("ablate", SCORES)
        self.among("controls", CONTROL_SETS)
        self.among("ablation", ABLATIONS)
