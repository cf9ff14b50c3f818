"""Where trained retrieval models fail: accuracy by occurrence cell (distance D of the retrieved
occurrence from its end of the context, number k of occurrences of the query), each read against
L, the longest training context, on one test bin of a length_gen run.

    python experiments/length_gen.py --pe ape --protocol --sampler spread --test-bins 1-20,21-40,61-80
    python experiments/occurrence_cells.py runs/length_gen/ape-protocol-spread

For every fitted seed of each non-unique retrieval task in the run (any sampler), the model of its job folder
answers the strings of its final evaluation of the bin again (the same strings: they are drawn
from the job's seed), and the right answers are counted per cell. The recount must equal what
training recorded for the bin; otherwise the script stops. It writes occurrence_cells.json and
occurrence_cells.md in the run folder (or --out) and prints the tables; --report-only FOLDER
rebuilds the tables from occurrence_cells.json.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crasp.tasks import TASKS, Examples
from crasplab.records.files import read_json_object, write_json, write_text
from crasplab.cli.arguments import add_run_folder_flags, run_from_flags
from crasplab.cli.experiment import Report
from crasplab.records.job_folder import BinEval, job_folder, run_jobs, run_records
from crasplab.reports.occurrence_cells import cells_markdown, grid_counts, grid_edges, quadrant_counts
from crasplab.verdicts.counting import final_evaluations, fitted_seeds
from crasplab.verdicts.predictions import read_predictions
from crasplab.records.run_folder import RunFolderError
from crasplab.records.settings import SettingsError
from crasplab.verdicts.rules import VerdictRules, read_protocol
from crasplab.train.config import RunSettings
from crasplab.train.trained import evaluate_bin_again, load_trained_model

CELLS_JSON, CELLS_MARKDOWN = "occurrence_cells.json", "occurrence_cells.md"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, nargs="?", help="a length_gen run folder (with its job folders)")
    parser.add_argument(
        "--bin",
        default=None,
        metavar="LO-HI",
        help="the test bin to break down (default: the run's last); one of the run's bins",
    )
    add_run_folder_flags(parser, "the run folder", f"{CELLS_MARKDOWN} from {CELLS_JSON}")
    return parser


@dataclass(frozen=True)
class CellsSettings:
    """Which run and bin to break down, checked against the run's files when built."""

    run: Path
    settings: RunSettings  # the run's config.json
    tasks: tuple[str, ...]  # its tasks that have occurrence cells
    bins: dict[str, int]  # task -> index of the chosen bin among its bins


def cells_settings(args: argparse.Namespace) -> CellsSettings:
    if args.run is None:
        raise SettingsError("give the run folder to break down (or --report-only FOLDER)")
    settings = RunSettings.of_run(args.run)
    tasks = tuple(task for task in settings.tasks if hasattr(TASKS[task], "occurrence_cells"))
    if not tasks:
        raise SettingsError(
            f"{args.run} trained {', '.join(settings.tasks)}; occurrence cells exist for the non-unique "
            "retrieval tasks only (NLFirst, NRFirst, NLLast, NRLast)"
        )
    bins = {}
    for task in tasks:
        names = [f"{lo}-{hi}" for lo, hi in settings.train[task].test_bins]
        chosen = args.bin or names[-1]
        if chosen not in names[1:]:
            raise SettingsError(f"--bin {chosen}: {task}'s test bins are {', '.join(names[1:])}")
        bins[task] = names.index(chosen)
    return CellsSettings(args.run, settings, tasks, bins)


def seed_cells(run_dir: Path, task: str, seed: int, bin_index: int, recorded: BinEval):
    """(D_N, k_N, exact_N) of one fitted seed on the bin's strings, checked against the record."""
    trained = load_trained_model(job_folder(run_dir, task, seed))
    eval_set, exact_N = evaluate_bin_again(trained, bin_index)
    batch = eval_set.batch
    if int(exact_N.sum()) != recorded.correct or len(exact_N) != recorded.n:
        raise SystemExit(
            f"error: {task} seed {seed}: its model answers {int(exact_N.sum())} of {len(exact_N)} strings of bin "
            f"{recorded.lo}-{recorded.hi} right, but training recorded {recorded.correct} of {recorded.n} at its "
            "final evaluation; the checkpoint is not the one that was evaluated (was the job resumed or changed?)"
        )
    examples = Examples(
        tokens=batch.tokens_BxT,
        prompt_lengths=eval_set.prompt_lengths_N,
        lengths=batch.lengths_B,
        input_lengths=eval_set.input_lengths_N,
        vocab=trained.task.vocab,
        has_query=True,
    )
    distances_N, counts_N = trained.task.occurrence_cells(examples)
    return distances_N, counts_N, exact_N


def run(cells: CellsSettings, out: Path) -> None:
    """Recount every fitted seed's final evaluation of the bin by cell; write occurrence_cells.json."""
    run_dir, settings = cells.run, cells.settings
    predictions = read_predictions(run_dir)["tasks"]
    protocol = read_protocol(run_dir) or VerdictRules()
    finals = final_evaluations(run_records(run_dir, run_jobs(settings.tasks, settings.seeds)))
    summary = dict(run=str(run_dir), tasks={})
    for task in cells.tasks:
        config, bin_index = settings.train[task], cells.bins[task]
        lo, hi = config.test_bins[bin_index]
        longest = config.train_lengths[1]
        finished = {seed: job for seed, job in finals.get(task, {}).items() if job.finished}
        seeds, pooled = [], []
        for seed in fitted_seeds(protocol, finished):
            recorded = finished[seed].final.bins[bin_index]
            distances_N, counts_N, exact_N = seed_cells(run_dir, task, seed, bin_index, recorded)
            seeds.append(dict(seed=seed, quadrants=quadrant_counts(distances_N, counts_N, exact_N, longest)))
            pooled.append((distances_N, counts_N, exact_N))
            print(f"{task} seed {seed}: {int(exact_N.sum())} of {len(exact_N)} right on {lo}-{hi}", file=sys.stderr)
        distance_edges, count_edges = grid_edges(longest, hi)
        together = [np.concatenate(parts) for parts in zip(*pooled)] if pooled else [[], [], []]
        summary["tasks"][task] = dict(
            predicted=predictions[task]["prediction"]["label"],
            seeds=seeds,
            grid=dict(
                distance_edges=distance_edges,
                count_edges=count_edges,
                cells=grid_counts(*together, distance_edges, count_edges),
            ),
        )
        summary.update(bin=f"{lo}-{hi}", longest_training_context=longest)
    write_json(out / CELLS_JSON, summary)


def write_cells_report(out: Path) -> dict:
    """occurrence_cells.md from occurrence_cells.json."""
    path = Path(out) / CELLS_JSON
    if not path.exists():
        raise RunFolderError(f"{path} is missing: run `python experiments/occurrence_cells.py RUN` first")
    summary = read_json_object(path, "run `python experiments/occurrence_cells.py RUN` again to write it anew")
    write_text(Path(out) / CELLS_MARKDOWN, cells_markdown(summary))
    return summary


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    run_from_flags(
        args,
        cells_settings,
        lambda cells: cells.run,
        run,
        Report(write_cells_report, cells_markdown, CELLS_MARKDOWN),
    )


if __name__ == "__main__":
    main()
