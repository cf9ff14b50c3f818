"""Does a model trained on NLLast or NRLast find the last occurrence, or only a recent one?

No C-RASP[pos] program retrieves at the last occurrence, yet APE models of these tasks reach 0.9
on lengths 31-40. The test strings draw every context symbol uniformly from 5, so the query's last
occurrence lies a few positions from the end at every length; a model that looks only at recent
positions would pass. This script reads the trained models of a length_gen.py run, decodes fresh
test strings at one length (the run's own sampler), and splits exact match by how far the last
occurrence lies from the end of the context. Far occurrences are rare (about 2% of strings at
length 40), so strings are drawn until every distance group holds the same number of them.

    python experiments/calibration/last_occurrence_distance.py runs/length_gen/ape-quick-3seeds
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from crasp.tasks import get_task
from crasplab.train.evaluate import greedy_exact_match
from crasplab.train.trained import job_folders, load_trained_model

TASKS = ("NLLast", "NRLast")
# Distance (in context positions) from the query's last occurrence to the last context symbol.
DISTANCE_GROUPS = ((0, 3), (4, 7), (8, 15), (16, 1000))


def context_and_query(tokens_T: np.ndarray, prompt_length: int) -> tuple[np.ndarray, int]:
    """The context c_1 .. c_m and the query q of `<bos> c_1 .. c_m <sep> q` (the prompt)."""
    return tokens_T[1 : prompt_length - 2], tokens_T[prompt_length - 1]


def distances_from_end(tokens_NxT: np.ndarray, prompt_lengths_N: np.ndarray) -> np.ndarray:
    """m - 1 - (index of q's last occurrence among c_1 .. c_m), per string."""
    distances = []
    for tokens_T, prompt_length in zip(tokens_NxT, prompt_lengths_N):
        context, query = context_and_query(tokens_T, prompt_length)
        distances.append(len(context) - 1 - np.flatnonzero(context == query)[-1])
    return np.array(distances)


def occurrences(tokens_NxT: np.ndarray, prompt_lengths_N: np.ndarray) -> np.ndarray:
    """How often the query occurs in each context (far last occurrences go with rare queries)."""
    return np.array(
        [
            np.sum(context == query)
            for context, query in (context_and_query(tokens_T, p) for tokens_T, p in zip(tokens_NxT, prompt_lengths_N))
        ]
    )


def strings_by_distance(task, length: int, per_group: int, seed: int = 12345) -> list[tuple[np.ndarray, ...]]:
    """(tokens_NxT, prompt_lengths_N, lengths_N) with `per_group` test strings of `length` for each
    of DISTANCE_GROUPS, from the task's own sampler: a string goes to the group of its distance,
    and draws stop when every group is full (strings of one length share one width)."""
    rng = np.random.default_rng(seed)
    chosen: list[list[tuple]] = [[] for _ in DISTANCE_GROUPS]
    while any(len(rows) < per_group for rows in chosen):
        examples = task.sample(rng, 10 * per_group, length)
        distance_N = distances_from_end(examples.tokens, examples.prompt_lengths)
        for rows, (lo, hi) in zip(chosen, DISTANCE_GROUPS):
            rows += [
                (examples.tokens[i], examples.prompt_lengths[i], examples.lengths[i])
                for i in np.flatnonzero((distance_N >= lo) & (distance_N <= hi))
            ]
    return [tuple(np.stack(column) for column in zip(*rows[:per_group])) for rows in chosen]


def sampler_distances(task, lengths: list[int], n: int = 2000, seed: int = 0) -> str:
    """How far from the end the task's sampler puts the last occurrence, at each of `lengths`."""
    rng = np.random.default_rng(seed)
    parts = []
    for length in lengths:
        examples = task.sample(rng, n, length)
        distance_N = distances_from_end(examples.tokens, examples.prompt_lengths)
        parts.append(f"length {length}: mean {distance_N.mean():.1f}, 90% within {np.percentile(distance_N, 90):.0f}")
    return f"{task.code} sampler, distance of the last occurrence from the end: " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run folder of experiments/length_gen.py with NLLast and NRLast")
    parser.add_argument("--length", type=int, default=40, help="context length of the test strings (default 40)")
    parser.add_argument("--per-group", type=int, default=200, help="test strings per distance group (default 200)")
    args = parser.parse_args()
    for task in TASKS:
        print(sampler_distances(get_task(task), [20, 30, args.length]))
    print()
    header = " | ".join(f"{lo}-{hi}" if hi < 1000 else f"{lo}+" for lo, hi in DISTANCE_GROUPS)
    print(
        f"Exact match at length {args.length} by distance of the last occurrence from the end "
        f"({args.per_group} strings per group)\n"
    )
    print(f"| task | seed | {header} |\n|---|---|" + "---|" * len(DISTANCE_GROUPS))
    for task in TASKS:
        groups = None
        for folder in job_folders(args.run_dir, task):
            trained = load_trained_model(folder)
            if groups is None:
                groups = strings_by_distance(trained.task, args.length, args.per_group)
                counts = [f"{occurrences(tokens, prompts).mean():.1f}" for tokens, prompts, _ in groups]
                print(f"| {task} | (query occurrences, mean) | " + " | ".join(counts) + " |")
            cells = [f"{greedy_exact_match(trained.model, *strings).mean():.2f}" for strings in groups]
            print(f"| {task} | {trained.job.seed} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
