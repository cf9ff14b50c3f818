"""Where trained retrieval models fail: accuracy by occurrence cell (distance D of the retrieved
occurrence from its end of the context, number k of occurrences of the query), each read against
L, the longest training context, on one test bin of a length_gen run.

    python experiments/length_gen.py --pe ape --protocol --sampler spread --test-bins 1-20,21-40,61-80
    python experiments/occurrence_cells.py runs/length_gen/ape-protocol-spread

For every fitted seed of each non-unique retrieval task in the run (any sampler), the model of its job folder
answers the strings of its final evaluation of the bin again (the same strings: they are drawn
from the job's seed), and the right answers are counted per cell. The recount must equal what
training recorded for the bin; otherwise the script stops. It writes occurrence_cells.json and
occurrence_cells.md in the run folder and prints the tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from crasp.tasks import TASKS, Examples
from crasplab.results.files import write_json, write_text
from crasplab.results.job_folder import RUN_SETTINGS_KEYS, BinEval, job_folder
from crasplab.results.length_gen import final_evaluations, read_records
from crasplab.results.occurrence_cells import cells_markdown, grid_counts, grid_edges, quadrant_counts
from crasplab.results.protocol import fitted_seeds, read_predictions, read_protocol
from crasplab.results.run_folder import RunFolderError, read_run_config
from crasplab.results.verdicts import Protocol
from crasplab.train.config import RunSettings
from crasplab.train.trained import evaluate_bin_again, load_trained_model

CELLS_JSON, CELLS_MARKDOWN = "occurrence_cells.json", "occurrence_cells.md"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a length_gen run folder (with its job folders)")
    parser.add_argument(
        "--bin",
        default=None,
        metavar="LO-HI",
        help="the test bin to break down (default: the run's last); one of the run's bins",
    )
    return parser.parse_args(argv)


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


def main(argv=None) -> None:
    args = parse_args(argv)
    run_dir = args.run
    try:
        run_config = read_run_config(run_dir, RUN_SETTINGS_KEYS, "experiments/length_gen.py")
        predictions = read_predictions(run_dir)["tasks"]
    except RunFolderError as error:
        raise SystemExit(f"error: {error}")
    settings = RunSettings.from_dict(run_config)
    tasks = [task for task in settings.tasks if hasattr(TASKS[task], "occurrence_cells")]
    if not tasks:
        raise SystemExit(
            f"error: {run_dir} trained {', '.join(settings.tasks)}; occurrence cells exist for the non-unique "
            "retrieval tasks only (NLFirst, NRFirst, NLLast, NRLast)"
        )
    protocol = read_protocol(run_dir) or Protocol()
    finals = final_evaluations(read_records(run_dir, run_config))
    summary = dict(run=str(run_dir), tasks={})
    for task in tasks:
        config = settings.train[task]
        bins = [f"{lo}-{hi}" for lo, hi in config.test_bins]
        chosen = args.bin or bins[-1]
        if chosen not in bins[1:]:
            raise SystemExit(f"error: --bin {chosen}: {task}'s test bins are {', '.join(bins[1:])}")
        bin_index = bins.index(chosen)
        longest = config.train_lengths[1]
        finished = {seed: record for seed, record in finals.get(task, {}).items() if record["finished"]}
        seeds, pooled = [], []
        for seed in fitted_seeds(protocol, finished):
            recorded = BinEval.from_dict(finished[seed]["bins"][bin_index])
            distances_N, counts_N, exact_N = seed_cells(run_dir, task, seed, bin_index, recorded)
            seeds.append(dict(seed=seed, quadrants=quadrant_counts(distances_N, counts_N, exact_N, longest)))
            pooled.append((distances_N, counts_N, exact_N))
            print(f"{task} seed {seed}: {int(exact_N.sum())} of {len(exact_N)} right on {chosen}", file=sys.stderr)
        distance_edges, count_edges = grid_edges(longest, config.test_bins[bin_index][1])
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
        summary.update(bin=chosen, longest_training_context=longest)
    markdown = cells_markdown(summary)
    write_json(run_dir / CELLS_JSON, summary)
    write_text(run_dir / CELLS_MARKDOWN, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
