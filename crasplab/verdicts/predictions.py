"""What the interpreter predicts for a run's tasks, from the settings alone: each task's
prediction and, for a task predicted not to generalize, whether each test bin can tell it from a
bounded program exact on the training lengths (crasp.discrimination). A run writes it once, to
predictions.json, beside its first invocation's training; every report reads that file, so
nothing a report shows is computed afresh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
from collections.abc import Callable, Iterator
from pathlib import Path

from crasp.discrimination import DEFAULT_STRINGS, DiscriminationError, Request, bins_discriminating, discriminate
from crasp.prediction import predict
from crasp.tasks import get_task
from crasplab.records.files import file_problem, read_json_object, write_json
from crasplab.records.run_folder import RunFolderError
from crasplab.train.config import PROTOCOL_REHEARSAL, RunSettings, TrainConfig
from crasplab.train.sampling import cpu_only_children
from crasplab.verdicts.rules import VerdictRules, read_protocol

PREDICTIONS_FILE = "predictions.json"
# CPU seconds of `crasp search` for a program exact on the training lengths, per task the check covers.
SEARCH_SECONDS = 60.0
# The rehearsal's checks rehearse the code path; what they find means nothing, as its numbers.
SEARCH_SECONDS_OF_PRESET = {PROTOCOL_REHEARSAL.name: 1.0}
PREDICTIONS_FIX = (
    "restore it, or delete it and rebuild the report (experiments/length_gen.py --report-only RUN): it then "
    "holds the interpreter's predictions of today, marked so"
)


def predictions_for(pe: str, tasks) -> dict:
    """Each task's prediction, without discrimination checks (a run that is not a protocol run)."""
    with predictions_alongside(pe, tasks, {}, {}, {}, check_at=None) as predictions:
        return predictions()


@contextlib.contextmanager
def predictions_alongside(
    pe: str,
    tasks,
    train_lengths: dict,
    test_bins: dict,
    task_overrides: dict,
    check_at: float | None,
    search_seconds: float = SEARCH_SECONDS,
    bin_strings: dict | None = None,
) -> Iterator[Callable[[], dict]]:
    """For each task its prediction and, with a threshold `check_at` (None: no check), for a task
    predicted not to generalize, per test bin, whether the bin discriminates (no bounded approximation exact on the
    training lengths passes it), with each approximation's score and interval. The checks (a
    minute or two per task, SEARCH_SECONDS of it the search) run in helper processes, one per
    task checked, while the `with` block runs: a protocol run trains meanwhile instead of waiting
    minutes before its first step. The function it yields waits for the checks and returns the
    predictions; leaving the block stops any check still running. The predictions depend on the
    settings alone, never on training. `bin_strings`: task -> strings per bin the bounded programs
    are scored on (default DEFAULT_STRINGS)."""
    checked = [task for task in tasks if check_at is not None and predict(task, pe).generalizes is False]
    pool = None
    if checked:
        with cpu_only_children():  # multiprocessing's Pool starts every process here
            pool = multiprocessing.get_context("spawn").Pool(len(checked))
    try:
        pending = {
            task: pool.apply_async(
                _discrimination,
                (task, train_lengths[task], test_bins[task][1:], task_overrides[task], check_at, search_seconds),
                dict(strings=(bin_strings or {}).get(task, DEFAULT_STRINGS)),
            )
            for task in checked
        }

        def predictions() -> dict:
            entries = {}
            for task in tasks:
                check = pending.get(task)
                entries[task] = dict(
                    prediction=dataclasses.asdict(predict(task, pe)),
                    discrimination=None if check is None else check.get(),
                )
            return dict(pe=pe, tasks=entries)

        yield predictions
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


def settings_predictions(settings: RunSettings, rules: VerdictRules | None) -> dict:
    """predictions_for the tasks, lengths and samplers of a run's settings."""
    with settings_predictions_alongside(settings, rules) as predictions:
        return predictions()


def settings_predictions_alongside(settings: RunSettings, rules: VerdictRules | None):
    """predictions_alongside for the tasks, lengths and samplers of a run's settings, with the
    discrimination check at the threshold of `rules` (None: no check, a run outside the protocol)."""
    return predictions_alongside(
        settings.model.pe,
        settings.tasks,
        {task: train.train_lengths for task, train in settings.train.items()},
        {task: train.test_bins for task, train in settings.train.items()},
        settings.task_overrides,
        None if rules is None else rules.threshold,
        SEARCH_SECONDS_OF_PRESET.get(settings.preset, SEARCH_SECONDS),
        {task: strings_per_bin(train) for task, train in settings.train.items()},
    )


def strings_per_bin(train: TrainConfig) -> int:
    """Strings the discrimination check scores per bin: at least as many at each length as the
    models are scored on (a bounded program is judged with an interval no wider than a seed's)."""
    widest = max(hi - lo + 1 for lo, hi in train.test_bins[1:]) if len(train.test_bins) > 1 else 1
    return max(DEFAULT_STRINGS, train.eval_examples_per_length * widest)


def write_predictions(run_dir: Path, predictions: dict) -> None:
    """predictions.json, written once, by the run's first invocation (a protocol run's when its
    discrimination checks end, beside the training): a resumed run keeps its first one."""
    path = Path(run_dir) / PREDICTIONS_FILE
    if not path.exists():
        write_json(path, predictions)


def _discrimination(
    task: str,
    train_lengths,
    bins,
    overrides: dict,
    threshold: float,
    search_seconds: float = SEARCH_SECONDS,
    strings: int = DEFAULT_STRINGS,
) -> dict:
    try:
        request = Request(
            get_task(task, **overrides),
            tuple(train_lengths),
            tuple(map(tuple, bins)),
            threshold=threshold,
            search_seconds=search_seconds,
            strings=strings,
        )
    except DiscriminationError as error:
        return dict(checked=False, why=str(error))
    rows = discriminate(request)
    return dict(
        checked=True,
        bins=[list(b) for b in request.bins],
        discriminates=list(bins_discriminating(rows, request)),
        approximations=[
            dict(
                name=row.approximation,
                program=row.program,
                exact_on_training=row.exact_on_training,
                verification=row.verification,
                accuracy=[round(score.accuracy, 4) for score in row.scores],
                interval=[[round(end, 4) for end in score.interval] for score in row.scores],
            )
            for row in rows
        ],
    )


def recheck_discrimination(run_dir: Path, tasks, today: str, search_seconds: float = SEARCH_SECONDS) -> list[str]:
    """The discrimination check of `tasks` (those predicted not to generalize) made again with the
    approximations the lab has now, in the run's predictions.json: the entry the run started with
    stays under `discrimination_at_start`, and the new one's `rechecked` says when. The predictions themselves
    are not touched. Returns the tasks rechecked; rebuild the report after."""
    settings = RunSettings.of_run(Path(run_dir))
    threshold = (read_protocol(run_dir) or VerdictRules()).threshold
    predictions = read_predictions(run_dir)
    rechecked = []
    for task in tasks:
        entry = predictions["tasks"].get(task)
        if entry is None or entry["prediction"]["generalizes"] is not False:
            continue
        train = settings.train[task]
        entry.setdefault("discrimination_at_start", entry["discrimination"])
        entry["discrimination"] = dict(
            _discrimination(
                task,
                train.train_lengths,
                train.test_bins[1:],
                settings.task_overrides[task],
                threshold,
                search_seconds,
                strings_per_bin(train),
            ),
            rechecked=f"rechecked on {today}, after the run, with the approximations of that day",
        )
        rechecked.append(task)
    write_json(Path(run_dir) / PREDICTIONS_FILE, predictions)
    return rechecked


def read_predictions(run_dir: Path, tasks=()) -> dict:
    """predictions.json: `pe`, `tasks` (task -> prediction and discrimination; at least `tasks`)
    and, for a run made before the file existed, `note` (when and how it was added). Validated: a
    ResultFileError names the file, what is wrong and what to do."""
    path = Path(run_dir) / PREDICTIONS_FILE
    if not path.exists():
        raise RunFolderError(
            f"{path} is missing: a report shows what the interpreter predicted when the run started. A "
            "length_gen run made before that file existed gets one (computed then, and said so in the report) "
            f"from `python experiments/length_gen.py --report-only {run_dir}`"
        )
    predictions = read_json_object(path, PREDICTIONS_FIX, required=("tasks",))
    entries = predictions["tasks"]
    if not isinstance(entries, dict):
        raise file_problem(path, "'tasks' that is not an object (task -> prediction)", PREDICTIONS_FIX)
    for task in [*tasks, *entries]:
        entry = entries.get(task)
        prediction = entry.get("prediction") if isinstance(entry, dict) else None
        if not (isinstance(prediction, dict) and prediction.get("generalizes", "") in (True, False, None)):
            raise file_problem(path, f"no prediction for {task} (an object with 'generalizes')", PREDICTIONS_FIX)
    return predictions
