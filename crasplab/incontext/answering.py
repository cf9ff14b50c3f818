"""The resumable loop that answers prompts into a run folder's results file, batch by batch."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from crasplab.incontext.greedy import answer_lines
from crasplab.records.files import read_jsonl, write_jsonl
from crasplab.records.run_folder import open_run_folder


def answer_pending(
    out: Path,
    config: dict,
    batches: list[list[dict]],
    answer: Callable[[list[dict]], list[dict]],
    key: Callable[[dict], tuple],
    started: float,
    results_file: str,
    may_change: tuple[str, ...] = (),
) -> None:
    """Open (and lock) the run folder with `config`, then answer every entry its results file lacks
    (by `key`), batch by batch, rewriting the file after each batch: an interrupted run resumes
    where it stopped. A batch is a list of entries to fill; `answer(batch)` returns them completed
    (the seconds each took are added). `may_change`: settings that do not change the answers."""
    open_run_folder(out, config, may_change)
    records = read_jsonl(out / results_file)
    done = {key(record) for record in records}
    pending = [[entry for entry in batch if key(entry) not in done] for batch in batches]
    pending = [batch for batch in pending if batch]
    evaluated, generation_seconds = 0, 0.0
    for batch in tqdm(pending, desc="batches", unit="batch"):
        batch_started = time.perf_counter()
        answered = answer(batch)
        seconds = time.perf_counter() - batch_started
        records += [dict(record, seconds=seconds / len(batch)) for record in answered]
        write_jsonl(out / results_file, records)
        evaluated += len(batch)
        generation_seconds += seconds
    if evaluated:
        print(
            f"evaluated {evaluated} prompts in {generation_seconds:.1f} s of generation; "
            f"wall time {time.perf_counter() - started:.1f} s"
        )
    else:
        print("nothing left to evaluate; rebuilding the report")


def graded_answers(
    pretrained, newline_id: int, batch_size: int, is_correct: Callable[[str, str], bool]
) -> Callable[[list[dict]], list[dict]]:
    """`answer` for answer_pending: each entry's greedy answer line to its "prompt" (as long as its
    "expected" answer allows), with `output` and `correct` = is_correct(output, expected)."""

    def answer(batch: list[dict]) -> list[dict]:
        outputs = answer_lines(
            pretrained,
            [entry["prompt"] for entry in batch],
            [entry["expected"] for entry in batch],
            newline_id,
            batch_size,
        )
        return [
            dict(entry, output=output, correct=is_correct(output, entry["expected"]))
            for entry, output in zip(batch, outputs)
        ]

    return answer


def in_batches(cell: list[dict], size: int) -> list[list[dict]]:
    return [cell[k : k + size] for k in range(0, len(cell), size)]
