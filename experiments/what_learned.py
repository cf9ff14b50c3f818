"""What each model of a task predicted not to generalize learned: its string-level agreement on
every test bin with each bounded program exact on the training lengths (the discrimination
check's family, crasp.approximations) and with the task (crasplab.reports.what_learned).

    python experiments/length_gen.py --pe ape --protocol --sampler repeat-break --tasks NF UF --seed-block 1
    python experiments/what_learned.py runs/length_gen/ape-protocol-repeat-break

For every fitted seed of each such task in a protocol run, the model of its job folder answers the
strings of its final evaluation of each bin again (drawn from the job's seed, as training drew
them); the recount must equal what training recorded, otherwise the script stops. Where the test
bins draw another shape than training (the repeat-break sampler), the model is also scored on
that shape at the training lengths: a model wrong there already is tested on the shape, not on
the length. Writes what_learned.json and what_learned.md in the run folder (or --out) and prints
the tables; --report-only FOLDER rebuilds the tables from what_learned.json.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from crasp.approximations import BOUNDED_APPROXIMATIONS, LOOKUP_APPROXIMATIONS
from crasp.check import to_program_ids
from crasp.nexttoken import predictions
from crasp.tasks import get_task
from crasplab.cli.arguments import add_run_folder_flags, run_from_flags
from crasplab.cli.experiment import Report
from crasplab.records.files import read_json_object, write_json, write_text
from crasplab.records.job_folder import job_folder, run_jobs, run_records
from crasplab.records.run_folder import RunFolderError
from crasplab.records.settings import SettingsError
from crasplab.verdicts.counting import final_evaluations, fitted_seeds
from crasplab.verdicts.predictions import read_predictions
from crasplab.verdicts.rules import VerdictRules, read_protocol
from crasplab.reports.what_learned import agreement, agreement_cell, learned_markdown
from crasplab.train.config import RunSettings
from crasplab.train.evaluate import EvalSet, build_eval_sets
from crasplab.train.trained import (
    evaluation_strings,
    exact_as_training_computes,
    load_trained_model,
    teacher_forced_argmax,
)

LEARNED_JSON, LEARNED_MARKDOWN = "what_learned.json", "what_learned.md"
# An answer a program does not give (no output true, or several): never equal to a token id.
NO_PROGRAM_ANSWER = -1
Answers = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # tokens, prompts, lengths -> N x A


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, nargs="?", help="a length_gen protocol run folder (with its job folders)")
    add_run_folder_flags(parser, "the run folder", f"{LEARNED_MARKDOWN} from {LEARNED_JSON}")
    return parser


def run_settings_of(args: argparse.Namespace) -> RunSettings:
    if args.run is None:
        raise SettingsError("give the protocol run folder to read (or --report-only FOLDER)")
    return RunSettings.of_run(args.run)


def answer_steps(prompt_lengths: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the string position of each answer step's token, whether the string has that step)."""
    steps = np.arange(int((lengths - prompt_lengths).max()))[None, :]
    return prompt_lengths[:, None] + steps, steps < (lengths - prompt_lengths)[:, None]


def program_answers(task, make) -> Answers:
    """A bounded C-RASP program's answers, in the task's token ids (its prediction after each
    position of the string, fed the string)."""
    program = make(task.symbols)
    to_task = np.full(max(program.symbol_ids().values()) + 1, NO_PROGRAM_ANSWER)
    for symbol, program_id in program.symbol_ids().items():
        if symbol in task.vocab:
            to_task[program_id] = task.vocab.index(symbol)

    def answers(tokens, prompt_lengths, lengths):
        predicted = predictions(program, to_program_ids(tokens, task.vocab, program))
        at, _ = answer_steps(prompt_lengths, lengths)
        said = np.take_along_axis(predicted, np.minimum(at - 1, predicted.shape[1] - 1), axis=1)
        return np.where(said >= 0, to_task[np.maximum(said, 0)], NO_PROGRAM_ANSWER)

    return answers


def family(task_code: str, task, bound: int, exact: set[str]) -> dict[str, Answers]:
    """The check's members exact on the training lengths (named as predictions.json names them)."""
    members = {
        f"{name} (L={bound})": program_answers(task, factory(bound))
        for name, factory in BOUNDED_APPROXIMATIONS.get(task_code, ())
    }
    lookups = LOOKUP_APPROXIMATIONS.get(task_code, lambda bound: ())(bound)
    members.update({name: lookup.answers for name, lookup in lookups})
    return {name: answers for name, answers in members.items() if name in exact}


def bin_agreements(trained, eval_set: EvalSet, members: dict[str, Answers]) -> tuple[np.ndarray, dict]:
    """(exact_N, member -> agreement cell) of the model on one bin's strings."""
    tokens, prompts, lengths = eval_set.batch.tokens_BxT, eval_set.prompt_lengths_N, eval_set.batch.lengths_B
    at, answered = answer_steps(prompts, lengths)
    argmax = teacher_forced_argmax(trained, eval_set)
    model = np.take_along_axis(argmax, np.minimum(at - 1, argmax.shape[1] - 1), axis=1)
    truth = np.take_along_axis(tokens, np.minimum(at, tokens.shape[1] - 1), axis=1)
    exact = agreement(model, truth, answered)
    agreements = {
        name: agreement_cell(agreement(model, answers(tokens, prompts, lengths), answered))
        for name, answers in members.items()
    }
    return exact, agreements


def shape_at_training(trained, overrides: dict) -> dict | None:
    """The model's accuracy at the training lengths on the shape its test bins draw (the
    repeat-break sampler), or None where training and test draw one shape."""
    if not overrides.get("repeat_break_from"):
        return None
    shaped = get_task(trained.job.task_code, **{**overrides, "repeat_break_from": 1})
    (eval_set,) = build_eval_sets(
        shaped,
        trained.job.seed,
        [trained.setup.train_range],
        trained.job.train.eval_examples_per_length,
        trained.setup.max_positions,
    )
    return agreement_cell(exact_as_training_computes(trained, eval_set))


def run(settings: RunSettings, out: Path, run_dir: Path) -> None:
    predictions_file = read_predictions(run_dir)["tasks"]
    protocol = read_protocol(run_dir) or VerdictRules()
    finals = final_evaluations(run_records(run_dir, run_jobs(settings.tasks, settings.seeds)))
    summary = dict(run=str(run_dir), threshold=protocol.threshold, tasks={})
    for task_code in settings.tasks:
        entry = predictions_file[task_code]
        if entry["prediction"]["generalizes"] is not False or not (entry.get("discrimination") or {}).get("checked"):
            continue
        exact_names = {a["name"] for a in entry["discrimination"]["approximations"] if a["exact_on_training"]}
        config, overrides = settings.train[task_code], settings.task_overrides[task_code]
        members = family(task_code, get_task(task_code, **overrides), config.train_lengths[1], exact_names)
        finished = {seed: job for seed, job in finals.get(task_code, {}).items() if job.finished}
        seeds = []
        for seed in fitted_seeds(protocol, finished):
            trained = load_trained_model(job_folder(run_dir, task_code, seed))
            bins = []
            for index, eval_set in enumerate(evaluation_strings(trained)[1:], start=1):
                recorded = finished[seed].final.bins[index]
                exact, agreements = bin_agreements(trained, eval_set, members)
                if int(exact.sum()) != recorded.correct or len(exact) != recorded.n:
                    raise SystemExit(
                        f"error: {task_code} seed {seed}: its model answers {int(exact.sum())} of {len(exact)} "
                        f"strings of bin {recorded.lo}-{recorded.hi} right, but training recorded "
                        f"{recorded.correct} of {recorded.n}; the checkpoint is not the one that was evaluated"
                    )
                bins.append(dict(bin=f"{eval_set.lo}-{eval_set.hi}", task=agreement_cell(exact), members=agreements))
                print(f"{task_code} seed {seed} {eval_set.lo}-{eval_set.hi}: done", file=sys.stderr)
            seeds.append(dict(seed=seed, bins=bins, shape_at_training=shape_at_training(trained, overrides)))
        summary["tasks"][task_code] = dict(predicted=entry["prediction"]["label"], seeds=seeds)
    if not summary["tasks"]:
        raise SettingsError(
            f"{run_dir} has no task predicted not to generalize with a discrimination check: nothing to compare"
        )
    write_json(out / LEARNED_JSON, summary)


def write_learned_report(out: Path) -> dict:
    """what_learned.md from what_learned.json."""
    path = Path(out) / LEARNED_JSON
    if not path.exists():
        raise RunFolderError(f"{path} is missing: run `python experiments/what_learned.py RUN` first")
    summary = read_json_object(path, "run `python experiments/what_learned.py RUN` again to write it anew")
    write_text(Path(out) / LEARNED_MARKDOWN, learned_markdown(summary))
    return summary


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    run_from_flags(
        args,
        run_settings_of,
        lambda settings: args.run,
        lambda settings, out: run(settings, out, args.run),
        Report(write_learned_report, learned_markdown, LEARNED_MARKDOWN),
    )


if __name__ == "__main__":
    main()
