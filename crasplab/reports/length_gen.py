"""The length-generalization report, computed from a run folder's files only.

Inputs: `config.json` (preset, tasks, seeds, threshold, model with its pe), `predictions.json` (what the
interpreter predicted when the run started) and each job folder's records (job_folder.run_records; a
job's final evaluation is its last "eval" record).
Outputs, written atomically into the same folder: `summary.json`, `report.md` and
`accuracy_by_length.png`. The prediction per task is the interpreter's (`crasp.prediction.predict`)
as predictions.json recorded it: APE is judged against C-RASP[pos], NoPE against C-RASP[], RoPE
gets the APE prediction marked "no theorem".
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import numpy as np

from crasp.position_encodings import encoding
from crasp.tasks import TASK_CODES
from crasplab.reports.figures import pyplot, save_figure, set_title
from crasplab.records.files import read_jsonl, rebuild_report
from crasplab.records.job_folder import RUN_SETTINGS_KEYS, EvalRecord, JobRecords, run_jobs, run_records
from crasplab.records.invocations import INVOCATIONS_FILE
from crasplab.reports.protocol import discrimination_markdown, protocol_markdown, recipe_markdown
from crasplab.records.run_folder import RunFolderError, read_run_config
from crasplab.train.config import RunSettings
from crasplab.train.provenance import bits_key
from crasplab.verdicts.counting import final_evaluations, protocol_rows, recipe_rows
from crasplab.verdicts.predictions import read_predictions
from crasplab.verdicts.rules import (
    FIT_THRESHOLD,
    Observation,
    VerdictRules,
    in_line,
    observation_text,
    observe_seed,
    read_protocol,
    reading_threshold,
)

FIGURE_FILE = "accuracy_by_length.png"


def read_settings(run_dir: Path) -> RunSettings:
    """A length_gen run's config.json as RunSettings: every setting checked (a hand-edited seed of
    "one" or a misspelt name is refused here instead of failing in numpy), and task names only
    the library's, since they become folder names."""
    run_dir = Path(run_dir)
    check_task_names(read_run_config(run_dir, RUN_SETTINGS_KEYS, "experiments/length_gen.py"), run_dir)
    return RunSettings.of_run(run_dir)


def read_records(run_dir: Path, settings: RunSettings) -> list[JobRecords]:
    """The records of the jobs of a run's settings (its tasks and seeds), from the job folders."""
    return run_records(run_dir, run_jobs(settings.tasks, settings.seeds))


def length_curve(evaluations: list[EvalRecord]) -> dict | None:
    """Accuracy at each input length (mean and std over seeds: one final evaluation per seed), from
    the per-length results of every bin; None for runs made before evaluations recorded them."""
    if not all(b.lengths for evaluation in evaluations for b in evaluation.bins):
        return None
    lengths = [n for b in evaluations[0].bins for n in b.lengths]
    accuracy_SxN = np.array([[a for b in evaluation.bins for a in b.length_accuracy] for evaluation in evaluations])
    return dict(
        lengths=lengths,
        mean=[round(float(a), 4) for a in accuracy_SxN.mean(axis=0)],
        std=[round(float(a), 4) for a in accuracy_SxN.std(axis=0)],
    )


def model_description(settings: RunSettings) -> str:
    """The run's model as the report states it, with the tasks whose model differs."""
    model = settings.model
    text = (
        f"{model.n_layers} layers x {model.n_heads} heads x d_model {model.d_model} "
        f"(d_ff {model.d_ff or 4 * model.d_model}, {model.dtype})"
    )
    changes = settings.model_overrides
    if changes:
        text += "; " + "; ".join(
            f"{task}: " + ", ".join(f"{name} {value}" for name, value in changed.items())
            for task, changed in changes.items()
        )
    return text


def _training_and_last_bin(job) -> tuple[tuple[int, int], tuple[int, int]]:
    """(strings right, strings) of a job's final evaluation on its training lengths and its last bin."""
    bins = job.final.bins
    return (bins[0].correct, bins[0].n), (bins[-1].correct, bins[-1].n)


def summarize(run_dir: Path, threshold: float | None = None) -> dict:
    """The run's summary, read at one threshold: a protocol run's, fixed in its rules before it ran
    (another `threshold` is refused), else `threshold` (None: the rules' default)."""
    run_dir = Path(run_dir)
    settings = read_settings(run_dir)
    protocol = read_protocol(run_dir)
    threshold = reading_threshold(protocol, threshold, run_dir)
    jobs = read_records(run_dir, settings)
    finals = final_evaluations(jobs)
    # What the interpreter predicted when the run started.
    predictions = read_predictions(run_dir, [task for task in settings.tasks if task in finals])
    written = predictions["tasks"]
    rows = []
    for task in settings.tasks:
        if task not in finals:
            continue
        by_seed = finals[task]
        # A job that scores its test bins only when it stops has none before: it is left out until then.
        asked = len(settings.train[task].test_bins)
        seeds = [seed for seed in sorted(by_seed) if len(by_seed[seed].final.bins) == asked]
        if not seeds:
            continue
        accuracy_SxK = np.array([[b.accuracy for b in by_seed[s].final.bins] for s in seeds])
        bins = [(b.lo, b.hi) for b in by_seed[seeds[0]].final.bins]
        prediction = written[task]["prediction"]
        # Each seed is observed on its own; seeds that did not fit say nothing about longer inputs.
        observations = [observe_seed(s, *_training_and_last_bin(by_seed[s]), threshold) for s in seeds]
        fitted = [o for o in observations if o.observation != Observation.DID_NOT_FIT]
        rows.append(
            dict(
                task=task,
                predicted=prediction,
                observed=observation_text(observations),
                observations=[dataclasses.asdict(o) for o in observations],
                seeds_fit=len(fitted),
                agrees=in_line(prediction["generalizes"], observations),
                seeds_agreeing=None
                if prediction["generalizes"] is None or not fitted
                else sum(in_line(prediction["generalizes"], [o]) is True for o in fitted),
                bins=[
                    dict(
                        lo=lo,
                        hi=hi,
                        mean=round(float(accuracy_SxK[:, k].mean()), 4),
                        std=round(float(accuracy_SxK[:, k].std()), 4),
                        per_seed=[float(a) for a in accuracy_SxK[:, k]],
                    )
                    for k, (lo, hi) in enumerate(bins)
                ],
                curve=length_curve([by_seed[s].final for s in seeds]),
                seeds=seeds,
                steps=[by_seed[s].final.step for s in seeds],
                stopped_early=[by_seed[s].result.stopped_early if by_seed[s].finished else None for s in seeds],
                finished=all(by_seed[s].finished for s in seeds),
                greedy_disagreements=sum(b.greedy_disagreements for s in seeds for b in by_seed[s].final.bins),
                greedy_checked=sum(b.greedy_checked for s in seeds for b in by_seed[s].final.bins),
                train_seconds=round(sum(by_seed[s].result.elapsed_s if by_seed[s].finished else 0.0 for s in seeds), 1),
            )
        )
    judged = [row for row in rows if row["agrees"] is not None]
    evaluated = [task for task in settings.tasks if task in finals]
    under_protocol = (
        None
        if protocol is None
        else dict(
            rules=protocol.to_dict(),
            text=protocol.text(),
            rows=protocol_rows(
                protocol,
                finals,
                evaluated,
                written,
                {task: train.max_steps for task, train in settings.train.items()},
                {task: settings.model_for(task).n_layers for task in settings.tasks},
            ),
            recipe=recipe_rows(protocol, jobs, evaluated),
            discrimination={
                task: entry["discrimination"] for task, entry in written.items() if entry["discrimination"]
            },
        )
    )
    invocations = read_jsonl(run_dir / INVOCATIONS_FILE) if (run_dir / INVOCATIONS_FILE).exists() else []
    return dict(
        protocol=under_protocol,
        environments=environments(jobs),
        commits=job_commits(jobs),
        invocations=invocations,
        predictions_note=predictions.get("note"),
        pe=settings.model.pe,
        preset=settings.preset,
        model=model_description(settings),
        threshold=threshold,
        fit_threshold=FIT_THRESHOLD,
        rows=rows,
        bins=[list(b) for b in settings.train[settings.tasks[0]].test_bins],
        agreements=sum(row["agrees"] for row in judged),
        judged=len(judged),
        did_not_fit=[row["task"] for row in rows if not row["seeds_fit"]],
        missing_tasks=[t for t in settings.tasks if t not in finals],
        train_seconds=round(sum(row["train_seconds"] for row in rows), 1),
    )


def check_task_names(config: dict, run_dir: Path) -> None:
    """Task names become folder names: only the library's codes are accepted from config.json, so
    a hand-edited name like '../..' can never point outside the run folder."""
    tasks = config["tasks"]
    if not (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)):
        raise RunFolderError(f"{run_dir}/config.json: tasks must be a list of task codes, got {tasks!r}")
    unknown = [t for t in tasks if t not in TASK_CODES]
    if unknown:
        raise RunFolderError(
            f"{run_dir}/config.json names tasks {unknown} that the library does not have; "
            f"accepted: {', '.join(TASK_CODES)}"
        )


def environments(jobs: list[JobRecords]) -> list[dict]:
    """The distinct machine-and-version environments the run's jobs trained in (a job resumed
    elsewhere counts in both), each with its jobs: numbers from two of them are not bit-comparable."""
    groups: dict[tuple, dict] = {}
    for job in jobs:
        for record in job.provenance:
            group = groups.setdefault(
                bits_key(record),
                dict(
                    jax=record["packages"].get("jax"),
                    jaxlib=record["packages"].get("jaxlib"),
                    device=f"{record['backend']} {record['device_kind']} x{record['device_count']}",
                    cpu=record["cpu"].get("model"),
                    cpu_flags_sha256=record["cpu"].get("flags_sha256"),
                    xla_flags=record["xla_flags"],
                    lab_commits=set(),
                    jobs=set(),
                ),
            )
            group["jobs"].add((job.task, job.seed))
            group["lab_commits"].add(str(record["lab_commit"]))
    return [
        dict(group, jobs=sorted(group["jobs"]), lab_commits=sorted(group["lab_commits"])) for group in groups.values()
    ]


def job_commits(jobs: list[JobRecords]) -> dict[str, list[list]]:
    """The lab's commit -> the jobs ([task, seed]) that trained under it (a job resumed under
    another commit is under both); "+changes" marks a commit with uncommitted changes, whose code
    no commit holds."""
    found = defaultdict(set)
    for job in jobs:
        for record in job.provenance:
            found[str(record["lab_commit"])].add((job.task, job.seed))
    return {commit: [list(job) for job in sorted(jobs)] for commit, jobs in sorted(found.items())}


def commits_markdown(commits: dict[str, list[list]]) -> str:
    if not commits:
        return ""
    lines = ["\nThe commits that trained the jobs (a resumed job may name two):\n"]
    for commit, jobs in commits.items():
        by_task = defaultdict(list)
        for task, seed in jobs:
            by_task[task].append(str(seed))
        note = " (uncommitted changes: no commit holds the code)" if commit.endswith("+changes") else ""
        lines.append(
            f"- {commit}{note}: "
            + "; ".join(f"{task} seed{'s' * (len(seeds) > 1)} {', '.join(seeds)}" for task, seeds in by_task.items())
            + "\n"
        )
    return "".join(lines)


def markdown_table(summary: dict) -> str:
    rows = summary["rows"]
    if not rows:
        return "(no finished evaluations yet)\n"
    asked = [tuple(b) for b in summary["bins"]]
    lines = [
        "| task | predicted | " + " | ".join(f"{lo}-{hi}" for lo, hi in asked) + " | observed | agrees |",
        "|---|---|" + "---|" * len(asked) + "---|---|",
    ]
    for row in rows:
        # A bin the task's sampler could not fill entirely is shown with the lengths it really holds.
        spread = len(row["seeds"]) > 1
        cells = [
            f"{b['mean']:.3f}"
            + (f" ± {b['std']:.3f}" if spread else "")
            + ("" if (b["lo"], b["hi"]) == wanted else f" ({b['lo']}-{b['hi']})")
            for b, wanted in zip(row["bins"], asked)
        ]
        agrees = "-" if row["agrees"] is None else ("yes" if row["agrees"] else "NO")
        if row["seeds_agreeing"] is not None and len(row["seeds"]) > 1:
            agrees += f" ({row['seeds_agreeing']} of {row['seeds_fit']} fitted seeds in line)"
        observed = row["observed"]
        if len(row["observations"]) == 1 and row["seeds_fit"]:
            seed = row["observations"][0]
            observed += f" [{seed['low']:.3f}, {seed['high']:.3f}]"
        lines.append(
            f"| {row['task']} | {row['predicted']['label']} | " + " | ".join(cells) + f" | {observed} | {agrees} |"
        )
    return "\n".join(lines) + "\n"


def report_markdown(summary: dict) -> str:
    """A protocol run leads with its per-seed verdicts and shows no mean over seeds; any other run
    with the table of mean accuracies and its one-line observations."""
    unfinished = [row["task"] for row in summary["rows"] if not row["finished"]]
    disagreements = sum(row["greedy_disagreements"] for row in summary["rows"])
    checked = sum(row["greedy_checked"] for row in summary["rows"])
    parts = [
        f"# Length generalization from scratch: {summary['pe'].upper()}, preset {summary['preset']}\n\n",
        f"Model: {summary['model']}.\n\n",
    ]
    if summary.get("protocol"):
        parts += [
            protocol_markdown(VerdictRules.from_dict(summary["protocol"]["rules"]), summary["protocol"]["rows"]),
            "\n" + recipe_markdown(summary["protocol"]["recipe"]) + "\n",
            discrimination_markdown(summary["protocol"].get("discrimination", {})),
        ]
    else:
        parts += [mean_table_markdown(summary)]
    parts += [
        f"Greedy KV-cache decoding disagreed with teacher forcing on {disagreements} of {checked} checked strings.\n",
        f"Training time (sum over jobs): {summary['train_seconds']:.0f} s.\n",
        invocations_markdown(summary.get("invocations", [])),
        "\nWhy each prediction"
        + (f" ({summary['predictions_note']})" if summary.get("predictions_note") else "")
        + ":\n\n"
        + "".join(
            f"- {row['task']}: {row['predicted']['reason'] or row['predicted']['label']}\n" for row in summary["rows"]
        ),
    ]
    if unfinished:
        parts.append(f"\nNot finished (last evaluation shown): {', '.join(unfinished)}.\n")
    if summary["missing_tasks"]:
        parts.append(f"\nNo evaluation yet: {', '.join(summary['missing_tasks'])}.\n")
    parts.append(environments_markdown(summary.get("environments", [])))
    parts.append(commits_markdown(summary.get("commits", {})))
    parts.append(f"\n![accuracy by length]({FIGURE_FILE})\n")
    return "".join(parts)


def mean_table_markdown(summary: dict) -> str:
    """The table of mean accuracies per bin over seeds, with what was observed and the agreement."""
    seeds = sorted({s for row in summary["rows"] for s in row["seeds"]})
    return "".join(
        [
            "Accuracy = exact match of the whole answer (teacher forcing, argmax), the same number of test "
            f"strings at every input length; mean ± std over seeds {seeds}. "
            f"Observed, seed by seed: a seed that fits (at least {summary['fit_threshold']} of its training-length "
            "strings exact; one that does not has not learned the task, so it says nothing about length "
            "generalization) passes the last bin when the 95% Wilson interval of its accuracy there lies at or "
            f"above {summary['threshold']}, fails it when the interval lies below, and is inconclusive otherwise "
            "(with one seed, its interval is shown). These are observations, not verdicts: a verdict needs the "
            "protocol's fitted seeds (--protocol), and the means in the table are numbers, never a decision. "
            "Lengths a task's sampler cannot produce are left out of its bins (the cell then names the lengths "
            "it holds).\n\n",
            markdown_table(summary),
            f"\nIn line with the prediction: {summary['agreements']} of {summary['judged']} tasks whose fitted seeds "
            "are all conclusive and on one side of it.\n",
            (
                f"Did not fit the training lengths, left out of the agreement count: "
                f"{len(summary['did_not_fit'])} ({', '.join(summary['did_not_fit'])}).\n"
                if summary["did_not_fit"]
                else ""
            ),
        ]
    )


def invocations_markdown(invocations: list[dict]) -> str:
    if not invocations:
        return "No invocation record (invocations.jsonl): the run's wall time is not in its files.\n"
    total = sum(record["wall_s"] for record in invocations)
    parts = ", ".join(
        f"{record['started']}: {record['wall_s'] / 60:.1f} min, {record['jobs']} jobs on {record['workers']}"
        + invocation_end(record)
        for record in invocations
    )
    return f"Wall time: {total / 60:.1f} min over {len(invocations)} invocation(s) ({parts}).\n"


def invocation_end(record: dict) -> str:
    if record.get("in_progress"):
        return ", no end recorded (killed, or still running): its time up to its last heartbeat"
    return "" if record.get("finished", True) else ", stopped before its end"


def environments_markdown(groups: list[dict]) -> str:
    if not groups:
        return "\nThe run predates provenance records: the machine and versions behind its numbers are unknown.\n"
    lines = [
        f"\nWhat decided the bits (the same seed gives the same numbers only under the same row): "
        f"{len(groups)} environment{'s' if len(groups) > 1 else ''}.\n"
    ]
    for group in groups:
        lines.append(
            f"- jax {group['jax']}, jaxlib {group['jaxlib']}, {group['device']}, CPU {group['cpu']} (flags "
            f"{group['cpu_flags_sha256']}), XLA_FLAGS '{group['xla_flags']}', lab {', '.join(group['lab_commits'])}: "
            f"{len(group['jobs'])} jobs\n"
        )
    return "".join(lines)


def draw_figure(summary: dict, path: Path) -> None:
    """Accuracy against input length per task (mean over seeds, band: ± std); line style: solid
    predicted to generalize, dashed predicted not to, dotted no prediction."""
    plt = pyplot()
    rows = summary["rows"]
    columns = min(5, max(len(rows), 1))
    grid_rows = max(1, -(-len(rows) // columns))
    figure, axes = plt.subplots(grid_rows, columns, figsize=(3 * columns, 2.6 * grid_rows), squeeze=False, sharey=True)
    style = {True: "-", False: "--", None: ":"}
    for ax, row in zip(axes.flat, rows):
        line = style[row["predicted"]["generalizes"]]
        if row["curve"] is not None:
            lengths, mean, std = (np.array(row["curve"][key]) for key in ("lengths", "mean", "std"))
            ax.plot(lengths, mean, linestyle=line, marker=".", markersize=3)
            ax.fill_between(lengths, mean - std, mean + std, alpha=0.25, linewidth=0)
        else:  # runs evaluated per bin only
            centers = [(b["lo"] + b["hi"]) / 2 for b in row["bins"]]
            ax.errorbar(
                centers,
                [b["mean"] for b in row["bins"]],
                yerr=[b["std"] for b in row["bins"]],
                linestyle=line,
                marker="o",
                capsize=3,
            )
        ax.axvspan(row["bins"][0]["lo"], row["bins"][0]["hi"], color="0.92", zorder=0)
        ax.axhline(summary["threshold"], color="0.6", linewidth=0.8, linestyle=":")
        ax.set_title(f"{row['task']}: {row['observed']}", fontsize=9)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("input length")
    for ax in axes.flat[len(rows) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("exact match")
    set_title(
        figure,
        f"{encoding(summary['pe']).name} ({summary['preset']}): solid = predicted to generalize, "
        "dashed = predicted not to; grey = training lengths; dotted = threshold",
        fontsize=9,
    )
    save_figure(figure, path, dpi=120)


def write_report(run_dir: Path, threshold: float | None = None) -> dict:
    """Rebuild summary.json, report.md and the figure from the run folder; return the summary."""
    return rebuild_report(
        run_dir, lambda folder: summarize(folder, threshold), report_markdown, draw_figure, FIGURE_FILE
    )
