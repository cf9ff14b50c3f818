"""Does a model trained on NLLast or NRLast find the last occurrence, or only a recent one?

No C-RASP[pos] program retrieves at the last occurrence, yet APE models of these tasks reach 0.9
on lengths 31-40. The test strings draw every context symbol uniformly from 5, so the query's last
occurrence lies a few positions from the end at every length; a model that looks only at recent
positions would pass. This script reads the trained models of a length_gen.py run, decodes fresh
test strings at one length (the run's own sampler), and splits exact match by how far the last
occurrence lies from the end of the context.

    python experiments/calibration/last_occurrence_distance.py runs/length_gen/ape-quick-3seeds
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from crasp.tasks import EOS_ID, PAD_ID
from models.generate import generate
from train.trained import job_folders, load_trained_model

TASKS = ("NLLast", "NRLast")
# Distance (in context positions) from the query's last occurrence to the last context symbol.
DISTANCE_GROUPS = ((0, 3), (4, 7), (8, 15), (16, 1000))


def distances_from_end(tokens_NxT: np.ndarray, prompt_lengths_N: np.ndarray) -> np.ndarray:
    """For `<bos> c_1 .. c_m <sep> q`: m - 1 - (index of q's last occurrence among c)."""
    distances = []
    for tokens, prompt_length in zip(tokens_NxT, prompt_lengths_N):
        context, query = tokens[1:prompt_length - 2], tokens[prompt_length - 1]
        distances.append(len(context) - 1 - np.flatnonzero(context == query)[-1])
    return np.array(distances)


def exact_match(trained, tokens_NxT: np.ndarray, prompt_lengths_N: np.ndarray, lengths_N: np.ndarray) -> np.ndarray:
    answer_length = int((lengths_N - prompt_lengths_N).max())
    generated_NxA = np.asarray(generate(trained.model, tokens_NxT, prompt_lengths_N, max_new_tokens=answer_length,
                                        eos_id=EOS_ID, pad_id=PAD_ID).tokens_BxN)
    return np.array([np.array_equal(generated_NxA[i, :n - p], tokens_NxT[i, p:n])
                     for i, (p, n) in enumerate(zip(prompt_lengths_N, lengths_N))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run folder of experiments/length_gen.py with NLLast and NRLast")
    parser.add_argument("--length", type=int, default=40, help="context length of the test strings (default 40)")
    parser.add_argument("--n", type=int, default=2000, help="test strings per model (default 2000)")
    args = parser.parse_args()
    header = " | ".join(f"{lo}-{hi}" if hi < 1000 else f"{lo}+" for lo, hi in DISTANCE_GROUPS)
    print(f"Exact match at length {args.length} by distance of the last occurrence from the end "
          f"(strings in each group in brackets)\n")
    print(f"| task | seed | all | {header} |\n|---|---|---|" + "---|" * len(DISTANCE_GROUPS))
    for task in TASKS:
        for folder in job_folders(args.run_dir, task):
            trained = load_trained_model(folder)
            examples = trained.task.sample(np.random.default_rng(12345), args.n, args.length)
            right_N = exact_match(trained, examples.tokens, examples.prompt_lengths, examples.lengths)
            distance_N = distances_from_end(examples.tokens, examples.prompt_lengths)
            cells = []
            for lo, hi in DISTANCE_GROUPS:
                group = (distance_N >= lo) & (distance_N <= hi)
                cells.append(f"{right_N[group].mean():.2f} ({group.sum()})" if group.any() else "-")
            print(f"| {task} | {trained.job.seed} | {right_N.mean():.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
