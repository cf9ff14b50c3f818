"""Next-token programs: predictions, autoregressive generation and the teacher-forced check.

At position i the program predicts the unique symbol s with O[s](i) true. Zero or several true
outputs where a prediction is needed is an error of the program; it is reported with the
position and the outputs, never resolved silently.

Because every operation is causal, evaluating the program once on `prompt + answer` gives, at
each answer position, the prediction generation would make there: `check_teacher_forced`
verifies a whole batch in one vectorized pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from crasp.evaluate import evaluate
from crasp.expr import CraspError
from crasp.program import Program

NO_PREDICTION = -1  # zero true outputs
AMBIGUOUS = -2  # several true outputs


class PredictionError(CraspError, ValueError):
    """The program's outputs do not name exactly one symbol where a prediction is needed."""


def _require_next_token(program: Program) -> None:
    if program.output is None:
        raise CraspError(
            f"this is a language program (accept: {program.accept}); "
            "next-token predictions need `output: O` with a family O[s]"
        )


def encode(program: Program, strings: list[list[str]]) -> np.ndarray:
    """Symbol lists -> a (B, T) id array right-padded with -1; unknown symbols are an error."""
    ids = program.symbol_ids()
    width = max((len(s) for s in strings), default=0)
    out = np.full((len(strings), width), -1, np.int64)
    for row, string in enumerate(strings):
        for col, symbol in enumerate(string):
            if symbol not in ids:
                raise CraspError(
                    f"string {row}, position {col + 1}: symbol {symbol!r} is not in the "
                    f"program's alphabet ({' '.join(program.alphabet)})"
                )
            out[row, col] = ids[symbol]
    return out


def output_table(program: Program, tokens_BxT: np.ndarray) -> np.ndarray:
    """O[s](i) for every string, position and symbol: bool (B, T, V)."""
    _require_next_token(program)
    value = evaluate(program, tokens_BxT, [program.output])[program.output]
    return value.array


def predictions(program: Program, tokens_BxT: np.ndarray) -> np.ndarray:
    """The predicted symbol id at every position; NO_PREDICTION or AMBIGUOUS where not exactly one."""
    table = output_table(program, tokens_BxT)
    true_count = table.sum(axis=-1)
    return np.where(true_count == 1, table.argmax(axis=-1), np.where(true_count == 0, NO_PREDICTION, AMBIGUOUS))


def what_the_outputs_say(outputs: Sequence[str]) -> str:
    """Where a next-token program is wrong: no output true, several true, or the wrong one."""
    if not outputs:
        return "no output is true"
    if len(outputs) > 1:
        return f"outputs {', '.join(outputs)} are all true"
    return f"the program predicts {outputs[0]}"


@dataclass(frozen=True)
class Failure:
    example: int
    position: int  # 1-based position whose prediction is wrong (it predicts position + 1)
    expected: str
    outputs: tuple[str, ...]  # the symbols whose output is true there

    def describe(self) -> str:
        said = what_the_outputs_say(self.outputs)
        return f"example {self.example}, position {self.position}: expected {self.expected}, but {said}"


@dataclass(frozen=True)
class CheckResult:
    correct: np.ndarray  # bool (B,): every answer token (and EOS) predicted exactly
    failures: list[Failure]  # the first wrong position of each incorrect example

    @property
    def agreement(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else 1.0


def check_teacher_forced(
    program: Program, tokens_BxT: np.ndarray, prompt_lengths: np.ndarray, lengths: np.ndarray
) -> CheckResult:
    """Does the program predict tokens[prompt_length:length] of every string, teacher-forced?"""
    _require_next_token(program)
    B, T = tokens_BxT.shape
    positions = np.arange(T)
    # position p (0-based) predicts token p + 1; answer tokens are prompt_length .. length - 1
    needed = (positions[None, :] >= np.asarray(prompt_lengths)[:, None] - 1) & (
        positions[None, :] < np.asarray(lengths)[:, None] - 1
    )
    # Only the positions read are evaluated (crasp.selected_positions): table is (needed positions, V).
    table = evaluate(program, tokens_BxT, [program.output], positions_BxT=needed)[program.output].array
    example, position = np.nonzero(needed)
    target = tokens_BxT[example, position + 1]
    right = (table.sum(axis=-1) == 1) & table[np.arange(len(table)), target]
    correct = np.ones(B, bool)
    correct[example[~right]] = False
    failures = []
    for row in np.flatnonzero(~right):  # rows in order of (example, position)
        if failures and failures[-1].example == example[row]:
            continue  # the first wrong position of each example only
        outputs = tuple(program.alphabet[k] for k in np.flatnonzero(table[row]))
        failures.append(Failure(int(example[row]), int(position[row]) + 1, program.alphabet[target[row]], outputs))
    return CheckResult(correct, failures)


def generate(program: Program, prompt: list[str], max_new_tokens: int, stop: str | None = "<eos>") -> list[str]:
    """Greedy autoregressive generation: append the prediction until `stop` or max_new_tokens."""
    _require_next_token(program)
    string = list(prompt)
    for _ in range(max_new_tokens):
        table = output_table(program, encode(program, [string]))[0, len(string) - 1]
        outputs = [program.alphabet[k] for k in np.flatnonzero(table)]
        if len(outputs) != 1:
            raise PredictionError(
                f"at position {len(string)} ({string[-1]!r}) {what_the_outputs_say(outputs)}; "
                "a next-token program must make exactly one true"
            )
        string.append(outputs[0])
        if outputs[0] == stop:
            break
    return string[len(prompt) :]
