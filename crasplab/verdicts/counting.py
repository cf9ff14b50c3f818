"""A run's verdicts under the protocol, from its records: per task and test bin each fitted
seed's outcome and the task's verdict, counted where its control generalizes; the recipe's
benchmark on the training bin; and the seeds the next protocol round runs.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from crasp.tasks import CONTROLS
from crasplab.records.job_folder import BinEval, JobRecords
from crasplab.verdicts.rules import Verdict, VerdictRules, counted_agreement, judge_seed, seed_fits, task_verdict


def final_evaluations(jobs: list[JobRecords]) -> dict[str, dict[int, JobRecords]]:
    """task -> seed -> that job's records, for the jobs evaluated at least once (JobRecords.final
    is the last evaluation; JobRecords.result says whether the job has finished)."""
    finals: dict[str, dict[int, JobRecords]] = defaultdict(dict)
    for job in jobs:
        if job.final is not None:
            finals[job.task][job.seed] = job
    return finals


def fitted_seeds(rules: VerdictRules, finals: dict[int, JobRecords]) -> list[int]:
    """The seeds (of one task's finished final evaluations) that fit their training lengths."""
    return [seed for seed, job in sorted(finals.items()) if job.finished and _fits(rules, job.final.bins[0])]


def _fits(rules: VerdictRules, bin_eval: BinEval) -> bool:
    return seed_fits(rules, bin_eval.correct, bin_eval.n)


def next_seeds(
    rules: VerdictRules, candidates, finals_by_task: dict[str, dict[int, JobRecords]], tasks
) -> dict[str, list[int]]:
    """task -> the seeds to run next: its started seeds that have not finished (to resume them);
    else as many unused candidates as its fitted seeds fall short of `min_fitted_seeds` (all of
    them for a task not started). Only the training bin decides this."""
    plan = {}
    for task in tasks:
        finals = finals_by_task.get(task, {})
        unfinished = [seed for seed, job in sorted(finals.items()) if not job.finished]
        if unfinished:
            plan[task] = unfinished
            continue
        missing = rules.min_fitted_seeds - len(fitted_seeds(rules, finals))
        unused = [seed for seed in candidates if seed not in finals]
        if missing > 0 and unused:
            plan[task] = unused[:missing]
    return plan


def _still_improving(job: JobRecords, max_steps: int) -> bool:
    evaluations = job.evaluations
    if job.final.step < max_steps or len(evaluations) < 2:
        return False
    return evaluations[-1].bins[0].accuracy > evaluations[-2].bins[0].accuracy


def protocol_rows(
    rules: VerdictRules,
    finals: dict[str, dict[int, JobRecords]],
    tasks,
    predictions: dict,
    max_steps: dict,
    layers: dict[str, int],
) -> list[dict]:
    """One row per task: its depth (`layers`: task -> layers), fit counts, and per test bin each
    fitted seed's outcome and the verdict, counted where its control generalizes (apply_controls)."""
    rows = []
    for task in tasks:
        by_seed = {seed: job for seed, job in finals.get(task, {}).items() if job.finished}
        fitted = fitted_seeds(rules, by_seed)
        unfit = [seed for seed in by_seed if seed not in fitted]
        prediction = predictions[task]["prediction"]
        discrimination = predictions[task]["discrimination"]
        bins = []
        for k, first in enumerate(by_seed[fitted[0]].final.bins[1:] if fitted else (), start=1):
            seeds = [
                judge_seed(rules, seed, by_seed[seed].final.bins[k].correct, by_seed[seed].final.bins[k].n)
                for seed in fitted
            ]
            verdict = task_verdict(rules, seeds)
            discriminates = (
                None if not (discrimination and discrimination["checked"]) else discrimination["discriminates"][k - 1]
            )
            bins.append(
                dict(
                    lo=first.lo,
                    hi=first.hi,
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
                still_improving=[s for s in unfit if _still_improving(by_seed[s], max_steps[task])],
                steps_to_stop={s: by_seed[s].final.step for s in sorted(by_seed)},
                bins=bins,
            )
        )
    apply_controls({(row["task"], row["layers"]): row for row in rows})
    return rows


def apply_controls(rows: dict[tuple, dict]) -> None:
    """`rows` keyed (task, *setting), the setting being what a control must share (its depth
    first; a table of several runs adds the sampler). Each bin of a task with a control records
    the control's task, depth and verdict there (Verdict.NOT_RUN where no row of the control has that
    setting), and is left out of the agreement count unless the control generalizes."""
    for (task, *setting), row in rows.items():
        if task not in CONTROLS:
            continue
        control = rows.get((CONTROLS[task], *setting))
        verdicts = {(b["lo"], b["hi"]): b["verdict"] for b in control["bins"]} if control else {}
        for b in row["bins"]:
            verdict = verdicts.get((b["lo"], b["hi"]), Verdict.TOO_FEW if control else Verdict.NOT_RUN)
            b["control"] = dict(task=CONTROLS[task], layers=row["layers"], verdict=verdict)
            if verdict != Verdict.GENERALIZES:
                b["agrees"] = None


def recipe_rows(rules: VerdictRules, jobs: list[JobRecords], tasks) -> list[dict]:
    """The recipe's benchmark, read from the training bin alone (never a test bin): per task, the
    seeds run and fitted, each fitted seed's step of its first fitted evaluation, each seed's step
    at its stop and its training time."""
    finished = {(job.task, job.seed): job for job in jobs if job.finished}
    rows = []
    for task in tasks:
        seeds = sorted(seed for (t, seed) in finished if t == task)
        steps_to_fit = {}
        for seed in seeds:
            fitted_at = [e.step for e in finished[(task, seed)].evaluations if _fits(rules, e.bins[0])]
            if fitted_at:
                steps_to_fit[seed] = fitted_at[0]
        rows.append(
            dict(
                task=task,
                seeds=seeds,
                steps_to_fit=steps_to_fit,
                steps_at_stop={seed: finished[(task, seed)].result.steps for seed in seeds},
                seconds={seed: round(finished[(task, seed)].result.elapsed_s, 1) for seed in seeds},
            )
        )
    return rows


def last_bin_agreement(rows: list[dict]) -> tuple[int, int, int]:
    """At each task's last bin: verdicts that agree with the prediction, verdicts counted, and
    tasks with a generalizes/fails verdict."""
    last = [row["bins"][-1] for row in rows if row["bins"]]
    counted = [b for b in last if b["agrees"] is not None]
    return (
        sum(b["agrees"] for b in counted),
        len(counted),
        sum(b["verdict"] in (Verdict.GENERALIZES, Verdict.FAILS) for b in last),
    )
