"""Can a test at longer lengths tell NLLast and NRLast from a program that looks back a fixed distance?

No C-RASP[pos] program retrieves at the last occurrence, but the program that searches only the
last `window` context tokens is in C-RASP[local] (crasp.approximations), and with a window of 20 it
agrees with the task on every string of the quick preset's training lengths (1-20). This script
measures, with the interpreter alone (no trained model), how often such window programs are right
on each sampler at longer lengths: where they stay right, a model that learned one generalizes
without contradicting the theory, and the test cannot show the prediction.

    python experiments/calibration/last_occurrence_window.py
"""

from __future__ import annotations

import argparse

from crasp.approximations import SIDE_OF_TASK, last_within_window
from crasp.check import agreement_by_length
from crasp.tasks import get_task

SAMPLERS = {
    "i.i.d. over 5 symbols (the paper's)": dict(occurrences="iid"),
    "the query exactly twice, 5 symbols": dict(occurrences=(2, 2)),
}


def window_agreement(code: str, sampler: str, window: int, lengths: list[int], samples: int) -> list[float]:
    """Exact match of the `window` program of `code` on the named sampler, at each length."""
    task = get_task(code, **SAMPLERS[sampler])
    program = last_within_window(SIDE_OF_TASK[code], window)(task.symbols)
    return list(agreement_by_length(task, program, lengths, samples_per_length=samples).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, nargs="+", default=[5, 10, 20], help="context tokens searched back")
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 20, 30, 40, 60, 100, 150])
    parser.add_argument("--samples", type=int, default=500, help="strings per length (default 500)")
    args = parser.parse_args()
    print("Exact match of window programs on each task's sampler, by context length\n")
    print("| task | sampler | window | " + " | ".join(str(n) for n in args.lengths) + " |")
    print("|---|---|---|" + "---|" * len(args.lengths))
    for code in SIDE_OF_TASK:
        for sampler in SAMPLERS:
            for window in args.windows:
                agreement = window_agreement(code, sampler, window, args.lengths, args.samples)
                print(f"| {code} | {sampler} | {window} | " + " | ".join(f"{a:.2f}" for a in agreement) + " |")


if __name__ == "__main__":
    main()
