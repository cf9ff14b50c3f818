"""A length_gen run under the verdict protocol: what it writes before training, which seeds it
runs, and the per-seed verdict table computed from its files.

Before the first job, the run folder gets `protocol.json` (the rules, crasplab.reports.verdicts);
beside the first invocation's training, helper processes make `predictions.json` (each task's
prediction and, for a task predicted not to generalize, whether each test bin can tell it from a
bounded program exact on the training lengths: crasp.discrimination), from the settings alone.
The report reads both files; nothing it shows is computed afresh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

from crasp.discrimination import DEFAULT_STRINGS, DiscriminationError, Request, bins_discriminating, discriminate
from crasp.prediction import predict
from crasp.tasks import get_task
from crasplab.records.files import file_problem, read_json_object, write_json
from crasplab.records.job_folder import BinEval
from crasplab.records.run_folder import RunFolderError
from crasplab.reports.verdicts import (
    FAILS,
    GENERALIZES,
    TOO_FEW,
    Protocol,
    agrees,
    judge_seed,
    seed_fits,
    task_verdict,
)
from crasplab.train.config import PROTOCOL_REHEARSAL, RunSettings, TrainConfig
from crasplab.train.sampling import cpu_only_children

PROTOCOL_FILE, PREDICTIONS_FILE = "protocol.json", "predictions.json"
# A task predicted not to generalize -> its control, the task theory says generalizes on strings of
# the same shape (the First tasks for the Last ones, unique copying for copying with repeats). The
# first's verdict at a bin is counted only where its control, trained at the same depth (and, in
# a table of several runs, on the same sampler and recipe), generalizes there: otherwise the bin,
# the depth or the recipe fails models for a reason that is not the prediction's. A control that
# did not run at that depth counts as one that does not generalize: nothing shows it would.
CONTROLS = {"NLLast": "NLFirst", "NRLast": "NRFirst", "NF": "UF", "NB": "UB"}
NOT_RUN = "not run"
# Fitted seeds a verdict needs: five for APE, whose theorem the lab tests first; three elsewhere.
REQUIRED_FITTED_SEEDS = {"ape": 5}
DEFAULT_REQUIRED_FITTED_SEEDS = 3
# CPU seconds of `crasp search` for a program exact on the training lengths, per task the check covers.
SEARCH_SECONDS = 60.0
# The rehearsal's checks rehearse the code path; what they find means nothing, as its numbers.
SEARCH_SECONDS_OF_PRESET = {PROTOCOL_REHEARSAL.name: 1.0}


def protocol_for(pe: str, threshold: float) -> Protocol:
    return Protocol(threshold=threshold, min_fitted_seeds=REQUIRED_FITTED_SEEDS.get(pe, DEFAULT_REQUIRED_FITTED_SEEDS))


PROTOCOL_FIX = (
    "restore it, or delete it and run the run's --protocol command again: it writes the rules anew (they "
    "follow from the encoding and the threshold)"
)
PREDICTIONS_FIX = (
    "restore it, or delete it and rebuild the report (experiments/length_gen.py --report-only RUN): it then "
    "holds the interpreter's predictions of today, marked so"
)


def read_protocol(run_dir: Path) -> Protocol | None:
    """protocol.json's rules (None for a run without the protocol), validated: a ResultFileError
    names the file, what is wrong and what to do."""
    path = Path(run_dir) / PROTOCOL_FILE
    if not path.exists():
        return None
    rules = read_json_object(path, PROTOCOL_FIX, required=("rules",))["rules"]
    try:
        return Protocol.from_dict(rules)
    except (TypeError, ValueError) as error:  # not an object, an unknown rule, or a rule out of its bounds
        raise file_problem(path, f"rules that do not read ({error})", PROTOCOL_FIX) from None


def write_protocol(run_dir: Path, protocol: Protocol) -> None:
    """protocol.json, once: a rerun keeps the rules the run started with (a changed rule is refused)."""
    path = Path(run_dir) / PROTOCOL_FILE
    if path.exists():
        if read_protocol(run_dir) != protocol:
            raise RunFolderError(
                f"{path} holds other rules than this command's; a protocol run keeps the rules it "
                "started with: use another --out"
            )
        return
    write_json(path, dict(rules=protocol.to_dict(), text=protocol.text()))


def predictions_for(pe: str, tasks) -> dict:
    """Each task's prediction, without discrimination checks (a run that is not a protocol run)."""
    with predictions_alongside(pe, tasks, {}, {}, {}, threshold=0.0, with_discrimination=False) as predictions:
        return predictions()


@contextlib.contextmanager
def predictions_alongside(
    pe: str,
    tasks,
    train_lengths: dict,
    test_bins: dict,
    task_overrides: dict,
    threshold: float,
    with_discrimination: bool,
    search_seconds: float = SEARCH_SECONDS,
    bin_strings: dict | None = None,
) -> Iterator[Callable[[], dict]]:
    """For each task its prediction and, with `with_discrimination`, for a task predicted not to
    generalize, per test bin, whether the bin discriminates (no bounded approximation exact on the
    training lengths passes it), with each approximation's score and interval. The checks (a
    minute or two per task, SEARCH_SECONDS of it the search) run in helper processes, one per
    task checked, while the `with` block runs: a protocol run trains meanwhile instead of waiting
    minutes before its first step. The function it yields waits for the checks and returns the
    predictions; leaving the block stops any check still running. The predictions depend on the
    settings alone, never on training. `bin_strings`: task -> strings per bin the bounded programs
    are scored on (default DEFAULT_STRINGS)."""
    checked = [task for task in tasks if with_discrimination and predict(task, pe).generalizes is False]
    pool = None
    if checked:
        with cpu_only_children():  # multiprocessing's Pool starts every process here
            pool = multiprocessing.get_context("spawn").Pool(len(checked))
    try:
        pending = {
            task: pool.apply_async(
                _discrimination,
                (task, train_lengths[task], test_bins[task][1:], task_overrides[task], threshold, search_seconds),
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


def settings_predictions(settings: RunSettings, with_discrimination: bool) -> dict:
    """predictions_for the tasks, lengths and samplers of a run's settings."""
    with settings_predictions_alongside(settings, with_discrimination) as predictions:
        return predictions()


def settings_predictions_alongside(settings: RunSettings, with_discrimination: bool):
    """predictions_alongside for the tasks, lengths and samplers of a run's settings."""
    return predictions_alongside(
        settings.model.pe,
        settings.tasks,
        {task: train.train_lengths for task, train in settings.train.items()},
        {task: train.test_bins for task, train in settings.train.items()},
        settings.task_overrides,
        settings.threshold,
        with_discrimination,
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
                settings.threshold,
                search_seconds,
                strings_per_bin(train),
            ),
            rechecked=f"rechecked on {today}, after the run, with the approximations of that day",
        )
        rechecked.append(task)
    write_json(Path(run_dir) / PREDICTIONS_FILE, predictions)
    return rechecked


def discrimination_markdown(discrimination: dict) -> str:
    """Per task predicted not to generalize: each bounded approximation, whether it is exact on
    the training lengths, and its accuracy [95% interval] at each test bin."""
    checked = {task: entry for task, entry in discrimination.items() if entry.get("checked")}
    if not checked:
        return ""
    lines = [
        "## The discrimination check\n",
        "A bin discriminates when no approximation exact on training passes it.",
    ]
    for task, entry in checked.items():
        bins = [f"{lo}-{hi}" for lo, hi in entry["bins"]]
        when = f" ({entry['rechecked']})" if entry.get("rechecked") else ""
        lines += [f"\n{task}{when}:\n", "| approximation | exact on training | " + " | ".join(bins) + " |"]
        lines.append("|---|---|" + "---|" * len(bins))
        for approximation in entry["approximations"]:
            intervals = approximation.get("interval") or [None] * len(approximation["accuracy"])
            scores = [
                f"{accuracy:.3f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")
                for accuracy, interval in zip(approximation["accuracy"], intervals)
            ] or ["-"] * len(bins)
            found = approximation["program"] is not None
            exact = ("yes" if approximation["exact_on_training"] else "no") if found else "none found"
            lines.append(f"| {approximation['name']} | {exact} | " + " | ".join(scores) + " |")
        verdicts = {True: "yes", False: "no", None: "unknown"}
        lines.append("| bin discriminates | | " + " | ".join(verdicts[d] for d in entry["discriminates"]) + " |")
    return "\n".join(lines) + "\n\n"


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


def _correct_of(bin_record: dict) -> tuple[int, int]:
    """(strings answered right, strings) of one bin of an evaluation record."""
    bin_eval = BinEval.from_dict(bin_record)
    return bin_eval.correct, bin_eval.n


def fitted_seeds(protocol: Protocol, finals: dict[int, dict]) -> list[int]:
    """The seeds (of one task's finished final evaluations) that fit their training lengths."""
    return [
        seed
        for seed, record in sorted(finals.items())
        if record["finished"] and seed_fits(protocol, *_correct_of(record["bins"][0]))
    ]


def next_seeds(
    protocol: Protocol, candidates, finals_by_task: dict[str, dict[int, dict]], tasks
) -> dict[str, list[int]]:
    """task -> the seeds to run next: its started seeds that have not finished (to resume them);
    else as many unused candidates as its fitted seeds fall short of `min_fitted_seeds` (all of
    them for a task not started). Only the training bin decides this."""
    plan = {}
    for task in tasks:
        finals = finals_by_task.get(task, {})
        unfinished = [seed for seed, record in sorted(finals.items()) if not record["finished"]]
        if unfinished:
            plan[task] = unfinished
            continue
        missing = protocol.min_fitted_seeds - len(fitted_seeds(protocol, finals))
        unused = [seed for seed in candidates if seed not in finals]
        if missing > 0 and unused:
            plan[task] = unused[:missing]
    return plan


def _by_job(records: list[dict], kind: str) -> dict[tuple[str, int], list[dict]]:
    """(task, seed) -> the run's records of one kind for that job, in the order written."""
    found = defaultdict(list)
    for record in records:
        if record["kind"] == kind:
            found[(record["task"], record["seed"])].append(record)
    return found


def _still_improving(evals: list[dict], record: dict, max_steps: int) -> bool:
    if record["step"] < max_steps or len(evals) < 2:
        return False
    return evals[-1]["bins"][0]["accuracy"] > evals[-2]["bins"][0]["accuracy"]


def protocol_rows(
    protocol: Protocol,
    records: list[dict],
    finals: dict[str, dict[int, dict]],
    tasks,
    predictions: dict,
    max_steps: dict,
    layers: dict[str, int],
) -> list[dict]:
    """One row per task: its depth (`layers`: task -> layers), fit counts, and per test bin each
    fitted seed's outcome and the verdict, counted where its control generalizes (apply_controls)."""
    evals = _by_job(records, "eval")
    rows = []
    for task in tasks:
        by_seed = {seed: record for seed, record in finals.get(task, {}).items() if record["finished"]}
        fitted = fitted_seeds(protocol, by_seed)
        unfit = [seed for seed in by_seed if seed not in fitted]
        prediction = predictions[task]["prediction"]
        discrimination = predictions[task]["discrimination"]
        bins = []
        for k, first in enumerate(by_seed[fitted[0]]["bins"][1:] if fitted else [], start=1):
            seeds = [judge_seed(protocol, seed, *_correct_of(by_seed[seed]["bins"][k])) for seed in fitted]
            verdict = task_verdict(protocol, seeds)
            discriminates = (
                None if not (discrimination and discrimination["checked"]) else discrimination["discriminates"][k - 1]
            )
            bins.append(
                dict(
                    lo=first["lo"],
                    hi=first["hi"],
                    verdict=verdict,
                    discriminates=discriminates,
                    agrees=counted_agreement(prediction["generalizes"], verdict, discriminates),
                    seeds=[dataclasses.asdict(s) for s in seeds],
                )
            )
        rows.append(
            dict(
                task=task,
                layers=layers[task],
                predicted=prediction["label"],
                generalizes=prediction["generalizes"],
                seeds_run=sorted(by_seed),
                fitted=fitted,
                unfit=unfit,
                still_improving=[s for s in unfit if _still_improving(evals[(task, s)], by_seed[s], max_steps[task])],
                steps_to_stop={s: by_seed[s]["step"] for s in sorted(by_seed)},
                bins=bins,
            )
        )
    apply_controls({(row["task"], row["layers"]): row for row in rows})
    return rows


def counted_agreement(generalizes: bool | None, verdict: str, discriminates: bool | None) -> bool | None:
    """Whether a bin's verdict agrees with the prediction, None where it is not counted: a bin
    that a bounded program passes cannot show a failure the theory predicts."""
    counted = generalizes is not False or discriminates is True
    return agrees(generalizes, verdict) if counted else None


def apply_controls(rows: dict[tuple, dict]) -> None:
    """`rows` keyed (task, *setting), the setting being what a control must share (its depth
    first; a table of several runs adds the sampler). Each bin of a task with a control records
    the control's task, depth and verdict there (NOT_RUN where no row of the control has that
    setting), and is left out of the agreement count unless the control generalizes."""
    for (task, *setting), row in rows.items():
        if task not in CONTROLS:
            continue
        control = rows.get((CONTROLS[task], *setting))
        verdicts = {(b["lo"], b["hi"]): b["verdict"] for b in control["bins"]} if control else {}
        for b in row["bins"]:
            verdict = verdicts.get((b["lo"], b["hi"]), TOO_FEW if control else NOT_RUN)
            b["control"] = dict(task=CONTROLS[task], layers=row["layers"], verdict=verdict)
            if verdict != GENERALIZES:
                b["agrees"] = None


def control_text(control: dict) -> str:
    """A bin's control in words: "its control UB at 4 layers not run"."""
    return f"its control {control['task']} at {control['layers']} layers {control['verdict']}"


def recipe_rows(protocol: Protocol, records: list[dict], tasks) -> list[dict]:
    """The recipe's benchmark, read from the training bin alone (never a test bin): per task, the
    seeds run and fitted, each fitted seed's step of its first fitted evaluation, each seed's step
    at its stop and its training time."""
    evals = _by_job(records, "eval")
    results = {job: found[-1] for job, found in _by_job(records, "result").items()}
    rows = []
    for task in tasks:
        seeds = sorted(seed for (t, seed) in results if t == task)
        steps_to_fit = {}
        for seed in seeds:
            fitted_at = [e["step"] for e in evals[(task, seed)] if seed_fits(protocol, *_correct_of(e["bins"][0]))]
            if fitted_at:
                steps_to_fit[seed] = fitted_at[0]
        rows.append(
            dict(
                task=task,
                seeds=seeds,
                steps_to_fit=steps_to_fit,
                steps_at_stop={seed: results[(task, seed)]["steps"] for seed in seeds},
                seconds={seed: round(results[(task, seed)]["elapsed_s"], 1) for seed in seeds},
            )
        )
    return rows


def _spread(values) -> str:
    values = sorted(values)
    return f"{statistics.median(values):g} ({values[0]:g}-{values[-1]:g})" if values else "-"


def recipe_text(train: dict) -> str:
    """The settings that make a training recipe, in words, from one task's `train` entry of a run's
    config.json (runs from before gradient clipping existed have no max_grad_norm: they did not clip)."""
    after_warmup = (
        f"linear decay to 0 at step {train['max_steps']}"
        if train["schedule"] == "linear"
        else f"constant to step {train['max_steps']}"
    )
    clipping = train.get("max_grad_norm", 0.0)
    stop = train["stop_after_perfect_evals"]
    return (
        f"batches of {train['batch_size']}, AdamW with weight decay {train['weight_decay']:g}, "
        f"learning rate {train['learning_rate']:g} after {train['warmup_steps']} warmup steps, {after_warmup}, "
        + (f"gradients clipped to norm {clipping:g}" if clipping > 0 else "no gradient clipping")
        + (f", stop after {stop} perfect evaluations in a row" if stop else ", no early stop")
        + f" (an evaluation every {train['eval_every']} steps)"
    )


def recipe_markdown(rows: list[dict]) -> str:
    """The recipe's benchmark as a table: fit rate and steps to fit per task."""
    lines = [
        "## The recipe on the training bin\n",
        "Read from the training bin only. A seed fits at its first evaluation that is exact on every "
        "training-length string (the protocol's rule 1); a seed fitted at one evaluation may still "
        "lose it later. Median (min-max) over seeds.\n",
        "| task | seeds finished | fitted at some evaluation | steps to fit | steps at stop | seconds per job |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['task']} | {len(row['seeds'])} | {len(row['steps_to_fit'])} of {len(row['seeds'])} | "
            f"{_spread(row['steps_to_fit'].values())} | {_spread(row['steps_at_stop'].values())} | "
            f"{_spread(row['seconds'].values())} |"
        )
    total = sum(sum(row["seconds"].values()) for row in rows)
    lines.append(f"\nTraining time, summed over jobs: {total / 60:.1f} min.\n")
    return "\n".join(lines) + "\n"


def last_bin_agreement(rows: list[dict]) -> tuple[int, int, int]:
    """At each task's last bin: verdicts that agree with the prediction, verdicts counted, and
    tasks with a generalizes/fails verdict."""
    last = [row["bins"][-1] for row in rows if row["bins"]]
    counted = [b for b in last if b["agrees"] is not None]
    return sum(b["agrees"] for b in counted), len(counted), sum(b["verdict"] in (GENERALIZES, FAILS) for b in last)


def protocol_markdown(protocol: Protocol, rows: list[dict]) -> str:
    lines = [
        "## Verdicts under the protocol\n",
        protocol.text() + "\n",
        "| task | predicted | seeds run | fitted | bin | seeds passing (accuracy [95% interval]) | verdict | "
        "bin discriminates | agrees |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        fit = f"{len(row['fitted'])}" + (
            f" (still improving at cap: {row['still_improving']})" if row["still_improving"] else ""
        )
        if not row["bins"]:
            lines.append(
                f"| {row['task']} | {row['predicted']} | {len(row['seeds_run'])} | {fit} | - | - | "
                "too few fitted seeds | - | - |"
            )
        for b in row["bins"]:
            passing = sum(s["outcome"] == "pass" for s in b["seeds"])
            cells = ", ".join(f"{s['correct'] / s['total']:.3f} [{s['low']:.3f}, {s['high']:.3f}]" for s in b["seeds"])
            discriminates = {None: "-", True: "yes", False: "no (a bounded program passes)"}[b["discriminates"]]
            if b.get("control") and b["control"]["verdict"] != GENERALIZES:
                discriminates += f"; {control_text(b['control'])}: not counted"
            agreement = {None: "-", True: "yes", False: "NO"}[b["agrees"]]
            lines.append(
                f"| {row['task']} | {row['predicted']} | {len(row['seeds_run'])} | {fit} | {b['lo']}-{b['hi']} "
                f"| {passing} of {len(b['seeds'])}: {cells} | {b['verdict']} | {discriminates} | {agreement} |"
            )
    agreeing, counted, decided = last_bin_agreement(rows)
    lines.append(
        f"\nAt the last bin: {agreeing} of {counted} counted verdicts agree "
        f"with the prediction ({decided} tasks with a "
        "generalizes/fails verdict; a task predicted not to generalize is counted only where its bin "
        "discriminates and its control, at the same depth, generalizes there).\n"
    )
    return "\n".join(lines) + "\n"
