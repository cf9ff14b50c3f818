"""The lines of results.jsonl, the answers of the experiments that answer prompts, as typed
records: one type per experiment, each line read into it by `read_results` (a line of another
shape is an error naming the file and the line). Each experiment's writer (crasplab.incontext,
experiments/realistic.py) appends the answers as they come, so an interrupted run keeps every one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from crasplab.records.files import file_problem, read_jsonl
from crasplab.records.run_folder import RESULTS_FILE

A = TypeVar("A")


@dataclass(frozen=True, kw_only=True)
class GradedAnswer:
    """A prompt, the answer expected and the model's greedy answer to it, graded, and the seconds it took."""

    index: int
    prompt: str
    expected: str
    output: str
    correct: bool
    seconds: float


@dataclass(frozen=True, kw_only=True)
class PromptAnswer(GradedAnswer):
    """experiments/pretrained.py: a few-shot prompt of a task's cell (`task`, `length`)."""

    task: str
    length: int


@dataclass(frozen=True)
class StagedAnswer:
    """experiments/finetune.py (crasplab.incontext.finetune.answer_records): a test prompt answered
    greedily before or after fine-tuning (`stage`)."""

    task: str
    stage: str
    length: int
    index: int
    expected: str
    output: str
    correct: bool
    seconds: float


@dataclass(frozen=True)
class LoremAnswer:
    """experiments/realistic.py lorem: a paragraph copied in one `direction`, the model's tokens
    beside the reference's (ids and the reference's text pieces), at most `limit` of them."""

    direction: str
    length: int
    index: int
    prompt: str
    reference: str
    reference_ids: list[int]
    reference_pieces: list[str]
    output: str
    output_ids: list[int]
    limit: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class GitAnswer(GradedAnswer):
    """experiments/realistic.py git: the commit hashes a git `command` over `commits` commits lists."""

    command: str
    commits: int


def read_results(run_dir: Path, answer_type: type[A]) -> list[A]:
    """The lines of a run's results.jsonl (read_jsonl: plain or compressed, a torn last line
    skipped) as `answer_type`: a line that is not one is a ResultFileError naming the file and the line."""
    path = Path(run_dir) / RESULTS_FILE
    answers = []
    for number, values in enumerate(read_jsonl(path), start=1):
        try:
            answers.append(answer_type(**values))
        except TypeError as error:
            raise file_problem(
                path,
                f"line {number} is not a {answer_type.__name__} ({error})",
                "restore it from a copy, or run the experiment again into another --out",
            ) from None
    return answers
