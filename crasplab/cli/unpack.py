"""The finished jobs that came back from another machine (benchmarks/gpu_run.py's runs.tar.gz) put
into the local run folders. Unpacking adds; it never removes or changes a local file:

- the archive is read member by member under crasplab.records.archives's rules, into a scratch
  folder beside the run folders (the same file system, so a job moves into place with a rename);
- each local run folder is locked as a run locks it, so unpacking into a run that is training is
  refused, and its config.json must hold the settings that came back (a new folder gets them);
- a job that came back (<run>/<task>/seed<k>) is taken only when its job.json, metrics.jsonl and
  result.json read as the lab writes them and its job is the one its run's settings make for its
  task and seed; anything else is left out and said so;
- a local job folder is kept whatever it holds: the same finished job is already here; another
  one (unfinished, or of other settings) is a conflict, reported, and the job that came back is
  not taken (delete the local folder and unpack again to take it);
- a job moves into place with one rename of its whole folder, so a kill at any moment leaves each
  job absent or whole (a kill leaves only the scratch folder, `.unpacking-*`, which holds no run).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from crasplab.cli.length_gen import report_length_gen
from crasplab.errors import LabError
from crasplab.records.archives import extracted
from crasplab.records.invocations import INVOCATIONS_FILE
from crasplab.records.job_folder import JobFolder, job_folders, read_metrics
from crasplab.records.run_folder import CONFIG_FILE, RunFolderError, check_output_folder, holding_run_folders
from crasplab.records.run_folder import lock_run_folder
from crasplab.reports.length_gen import FIGURE_FILE
from crasplab.train.config import RunSettings
from crasplab.train.runs import make_jobs, read_job
from crasplab.verdicts.predictions import PREDICTIONS_FILE
from crasplab.verdicts.rules import PROTOCOL_FILE

# A run's own files that travel with its jobs; config.json first, the file that makes a folder a run's.
RUN_FILES = (CONFIG_FILE, PREDICTIONS_FILE, PROTOCOL_FILE, INVOCATIONS_FILE)
# What the report rebuilds from those: not taken, and not worth a word.
REBUILT = ("summary.json", "report.md", FIGURE_FILE)


@dataclass
class Unpacked:
    """What unpacking one run folder did: jobs taken, jobs already here, conflicts and what was left out."""

    run_dir: Path
    taken: list[str] = field(default_factory=list)
    already_here: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def unpack_runs(archive: Path, into: Path) -> list[Unpacked]:
    """The finished jobs of `archive` added to the run folders in `into`, and those runs' reports
    rebuilt; what was done to each run folder, which is also printed."""
    done = []
    with holding_run_folders(), extracted(archive, into) as scratch:
        for came_back in sorted(p for p in scratch.iterdir() if p.is_dir()):
            unpacked = unpack_run(came_back, Path(into) / came_back.name)
            report_length_gen(unpacked.run_dir)
            _print(unpacked)
            done.append(unpacked)
    return done


def unpack_run(came_back: Path, here: Path) -> Unpacked:
    """One run folder that came back added to `here` (locked while it is changed)."""
    settings = RunSettings.of_run(came_back)
    check_output_folder(here)  # a folder of something else than a run is refused
    lock_run_folder(here)
    if (here / CONFIG_FILE).exists():
        local = RunSettings.of_run(here)
        if local != settings:
            raise RunFolderError(
                f"{here} holds a run of other settings than the {came_back.name} that came back; unpack into "
                "another --into, or move the local run aside"
            )
    unpacked = Unpacked(here)
    for name in RUN_FILES:
        if (came_back / name).is_file() and not (here / name).exists():
            os.rename(came_back / name, here / name)
    for task, seed, folder in job_folders(came_back):
        _take_job(came_back, here, settings, task, seed, folder, unpacked)
    own = {*RUN_FILES, *REBUILT, *(task for task, _, _ in job_folders(came_back))}
    unpacked.left_out += [f"{p.name} (not a file of a run)" for p in sorted(came_back.iterdir()) if p.name not in own]
    return unpacked


def _take_job(
    came_back: Path, here: Path, settings: RunSettings, task: str, seed: int, folder: JobFolder, unpacked: Unpacked
) -> None:
    name = f"{task}/seed{seed}"
    local = JobFolder.of(here, task, seed)
    problem = _job_problem(settings, here, task, seed, folder)
    if problem is not None:  # named as in the archive: the scratch folder is gone when it is read
        problem = problem.replace(f"{came_back.parent}/", "")
    if problem is not None:
        unpacked.left_out.append(f"{name} ({problem})")
    elif not local.path.exists():
        local.path.parent.mkdir(parents=True, exist_ok=True)
        os.rename(folder.path, local.path)  # the whole job at once: a kill leaves it absent or whole
        unpacked.taken.append(name)
    elif _job_problem(settings, here, task, seed, local) is None and local.read_result() == folder.read_result():
        unpacked.already_here.append(name)
    else:
        unpacked.conflicts.append(
            f"{local.path} differs from the {name} that came back (unfinished here, or other settings or results); "
            "it is kept: delete it and unpack again to take the one that came back"
        )


def _job_problem(settings: RunSettings, run_dir: Path, task: str, seed: int, folder: JobFolder) -> str | None:
    """Why a job folder is not a finished job of this run's settings (None when it is one)."""
    if task not in settings.tasks:
        return f"{task} is not among the run's tasks"
    if not folder.is_done():
        return "unfinished"
    try:
        job = read_job(folder.path)
        folder.read_result()
        read_metrics(folder)
    except LabError as error:
        return str(error)
    expected = make_jobs(settings, run_dir, {task: [seed]})[0]
    if dataclasses.replace(job, out_dir=expected.out_dir) != expected:
        differences = ", ".join(job.stack_differences(expected))
        return f"its job.json differs from the job the run's settings make: {differences}"
    return None


def _print(unpacked: Unpacked) -> None:
    print(
        f"{unpacked.run_dir}: {len(unpacked.taken)} finished job(s) taken, {len(unpacked.already_here)} already here",
        flush=True,
    )
    for conflict in unpacked.conflicts:
        print(f"conflict: {conflict}", file=sys.stderr)
    for left_out in unpacked.left_out:
        print(f"left out: {unpacked.run_dir.name}/{left_out}", file=sys.stderr)
