"""Can a test bin tell a task that does not generalize from a bounded program that fits training?

A task predicted not to length-generalize (no C-RASP[pos] program) still has bounded C-RASP[pos]
programs that are exact on every string of the training lengths (crasp.approximations: a window,
a window-or-count, a lookup by length, for copying k-gram lookups within a window; and whatever
`crasp search` finds when candidates only have to be exact on the training lengths). A model
trained at those lengths may have learned one
of them: the theory predicts it fails somewhere longer, not where. So a test bin can refute the
prediction only if no such program passes it: `discriminate` verifies each approximation on the
training lengths, scores it on each bin (at least 1000 strings, with a 95% Wilson interval), and
says per bin whether any passes the verdict threshold.

An approximation "passes" a bin when its interval reaches the threshold (upper bound >= it):
a bin discriminates only where every approximation exact on the training lengths lies wholly
below the threshold, so an approximation near it is never rounded into a discriminating bin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from crasp.approximations import BOUNDED_APPROXIMATIONS, LOOKUP_APPROXIMATIONS, KGramLookup, Maker
from crasp.expr import CraspError
from crasp.check import (
    EXHAUSTIVE_MAX_LENGTH,
    check_lengths,
    check_witness,
    correct_answers,
    exhaustive_strings,
    small_version,
)
from crasp.fragment import fragment_of
from crasp.intervals import wilson_interval
from crasp.program import print_program
from crasp.tasks import Examples, Task, get_task
from crasp.tasks.retrieval import NonUniqueRetrieval

DEFAULT_THRESHOLD = 0.9  # the lab's verdict threshold (a bin "passes" at >= 0.9)
DEFAULT_STRINGS = 1000  # per bin
DEFAULT_TRAINING_SAMPLES = 200  # random strings per training length, after the exhaustive stage
MAX_DRAWS_PER_STRING = 200  # far cells: strings drawn per string kept before the sampler is called too sparse
NON_UNIQUE_RETRIEVAL = ("NLFirst", "NRFirst", "NLLast", "NRLast")
# The official code of Veitsman et al. draws every retrieval context over 5 symbols; the library's
# unique tasks default to 150 (and the quick preset uses 16, chosen in its calibration).
OFFICIAL_ALPHABET_SIZE = 5
# A sampler the command line names -> the tasks it draws, each with the parameters it sets;
# "paper" (an empty table) is every task's own default.
SAMPLERS = {
    "paper": {},
    "official": {
        **{code: {"occurrences": "official"} for code in NON_UNIQUE_RETRIEVAL},
        **{code: {"alphabet_size": OFFICIAL_ALPHABET_SIZE} for code in ("UL", "UR")},
    },
    "spread": {code: {"occurrences": "spread"} for code in NON_UNIQUE_RETRIEVAL},
    # Copying with repeats trained on i.i.d. strings and tested on the repeat-break shape (a long
    # periodic stretch, then a break: crasp.tasks.copying), beyond the training lengths only.
    "repeat-break": {"NF": {}, "NB": {}},
}
REPEAT_BREAK = "repeat-break"


class DiscriminationError(CraspError, ValueError):
    """A request the discrimination check cannot satisfy; the message says what is accepted."""


@dataclass(frozen=True)
class BinScore:
    bin: tuple[int, int]
    correct: int
    strings: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.strings

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.strings)

    def passes(self, threshold: float) -> bool:
        """The interval reaches the threshold: the bin cannot rule out that this program passes."""
        return self.interval[1] >= threshold


@dataclass(frozen=True)
class Row:
    """One approximation: how it was made, whether it is exact on the training lengths, its scores."""

    approximation: str
    program: str | None  # its text (None: the search found nothing)
    fragment: str | None
    exact_on_training: bool
    verification: str  # which training strings were checked, in words (or what the search showed)
    scores: tuple[BinScore, ...]
    threshold: float

    def discriminates(self) -> tuple[bool, ...]:
        """Per bin: this program, exact on the training lengths, stays below the threshold there."""
        return tuple(not (self.exact_on_training and score.passes(self.threshold)) for score in self.scores)


@dataclass(frozen=True)
class Request:
    task: Task  # its parameters choose the sampler
    train_lengths: tuple[int, int]
    bins: tuple[tuple[int, int], ...]
    threshold: float = DEFAULT_THRESHOLD
    strings: int = DEFAULT_STRINGS
    training_samples: int = DEFAULT_TRAINING_SAMPLES
    far_only: bool = False  # score only strings with D >= L and k > L (non-unique retrieval)
    search_seconds: float = 0.0  # 0: no search
    seed: int = 0

    def __post_init__(self):
        lo, hi = self.train_lengths
        if not 1 <= lo <= hi or not self.training:
            raise DiscriminationError(
                f"training lengths {lo}-{hi}: accepted: 1 <= lo <= hi, including a length "
                f"the sampler produces ({self.task.min_length()} or more)"
            )
        if not self.bins:
            raise DiscriminationError("no test bin: give at least one, like 31-40")
        for bin_lo, bin_hi in self.bins:
            if not hi < bin_lo <= bin_hi:
                raise DiscriminationError(
                    f"test bin {bin_lo}-{bin_hi}: accepted: lo <= hi, both longer than the training lengths (> {hi})"
                )
            check_lengths(self.task, [bin_lo, bin_hi])
        if not 0 < self.threshold <= 1:
            raise DiscriminationError(f"threshold {self.threshold}: accepted: a number in (0, 1]")
        if not 1 <= self.strings <= 100_000 or not 1 <= self.training_samples <= 100_000:
            raise DiscriminationError(
                f"strings per bin {self.strings}, per training length {self.training_samples}: accepted: 1 to 100000"
            )
        if self.far_only and not isinstance(self.task, NonUniqueRetrieval):
            raise DiscriminationError(
                f"far cells (D >= L and k > L) are defined for NLFirst, NRFirst, NLLast and "
                f"NRLast, not for {self.task.code}"
            )
        shortest = min(bin_lo for bin_lo, _ in self.bins)
        if self.far_only and shortest < 2 * hi + 1:  # D + k <= length
            raise DiscriminationError(
                f"test bin from {shortest}: a string with D >= {hi} and k > {hi} has at least "
                f"{2 * hi + 1} tokens; accepted with far cells: bins from {2 * hi + 1}"
            )
        if not 0 <= self.search_seconds <= 3600:
            raise DiscriminationError(f"search seconds {self.search_seconds}: accepted: 0 (no search) to 3600")
        built = {**BOUNDED_APPROXIMATIONS, **LOOKUP_APPROXIMATIONS}
        if self.task.code not in built and self.search_seconds == 0:
            raise DiscriminationError(
                f"no bounded approximation is built for {self.task.code} (they are for "
                f"{', '.join(built)}); give search seconds > 0 to search for "
                "one exact on the training lengths"
            )
        if self.seed < 0:
            raise DiscriminationError(f"seed {self.seed}: accepted: an integer >= 0")

    @property
    def bound(self) -> int:
        """L, the longest training length: what a bounded approximation may need."""
        return self.train_lengths[1]

    @property
    def training(self) -> tuple[int, ...]:
        lo, hi = self.train_lengths
        return tuple(length for length in range(lo, hi + 1) if self.task.length_problem(length) is None)


def sampler_parameters(code: str, sampler: str, longest_training: int | None = None) -> dict:
    """The task parameters a named sampler sets for `code`: none for "paper" (the task's own
    sampler); for the others those of SAMPLERS, an error for a task they do not draw. The
    repeat-break sampler draws its shape from the first length beyond `longest_training`."""
    if sampler not in SAMPLERS:
        raise DiscriminationError(f"unknown sampler {sampler!r}; accepted: {', '.join(SAMPLERS)}")
    table = SAMPLERS[sampler]
    if table and code not in table:
        raise DiscriminationError(f"sampler {sampler!r} exists for {_and_list(table)}, not for {code}")
    parameters = dict(table.get(code, {}))
    if sampler == REPEAT_BREAK:
        if longest_training is None:
            raise DiscriminationError(
                "the repeat-break sampler draws its shape beyond the training lengths: give the longest of them"
            )
        parameters["repeat_break_from"] = longest_training + 1
    return parameters


def _and_list(codes) -> str:
    *rest, last = codes
    return f"{', '.join(rest)} and {last}" if rest else last


def task_with_sampler(code: str, sampler: str, longest_training: int | None = None) -> Task:
    """The task drawn by a named sampler (sampler_parameters)."""
    return get_task(code, **sampler_parameters(code, sampler, longest_training))


def discriminate(request: Request, progress: Callable[[str], None] = lambda line: None) -> list[Row]:
    """One row per bounded approximation of the task (hand-built programs, then k-gram lookups,
    then the search's)."""
    rows = []
    for name, factory in BOUNDED_APPROXIMATIONS.get(request.task.code, ()):
        progress(f"{name}: verifying on the training lengths")
        rows.append(_row(request, f"{name} (L={request.bound})", factory(request.bound)))
    lookups = LOOKUP_APPROXIMATIONS.get(request.task.code, lambda bound: ())(request.bound)
    if lookups:
        progress(f"{len(lookups)} k-gram lookups: verifying on the training lengths")
    rows += [_lookup_row(request, name, lookup) for name, lookup in lookups]
    if request.search_seconds > 0:
        progress(f"search: at most {request.search_seconds:g} s")
        rows.append(_searched(request))
    return rows


def bins_discriminating(rows: Sequence[Row], request: Request) -> tuple[bool | None, ...]:
    """Per bin: no approximation exact on the training lengths passes it; None where no
    approximation was scored (a search that found nothing scores nothing), which shows nothing."""
    scored = [row.discriminates() for row in rows if row.scores]
    if not scored:
        return (None,) * len(request.bins)
    return tuple(all(verdicts[k] for verdicts in scored) for k in range(len(request.bins)))


def _row(request: Request, name: str, make: Maker) -> Row:
    task = request.task
    exhaustive = min(EXHAUSTIVE_MAX_LENGTH, request.bound)
    report = check_witness(
        task,
        make,
        samples_per_length=request.training_samples,
        exhaustive_max_length=exhaustive,
        lengths=request.training,
        seed=request.seed,
    )
    program = make(task.symbols)
    verification = f"{report.agreement:.2%} of {report.strings}: {report.method}"
    if report.failure is not None:
        verification += f"; counterexample: {' '.join(report.failure.string)}"
    scores = tuple(
        score_bin(request, lambda examples: correct_answers(task, program, examples), bin_) for bin_ in request.bins
    )
    return Row(
        name,
        print_program(program),
        fragment_of(program).name,
        report.verified,
        verification,
        scores,
        request.threshold,
    )


def _lookup_row(request: Request, name: str, lookup: KGramLookup) -> Row:
    """A k-gram lookup, checked as check_witness checks a program: every input up to
    EXHAUSTIVE_MAX_LENGTH (over the small alphabet), then random strings at each training length."""
    task, small = request.task, small_version(request.task)
    exhaustive = min(EXHAUSTIVE_MAX_LENGTH, request.bound)
    strings = exhaustive_strings(small, exhaustive)
    right = [_lookup_on_strings(lookup, small, strings)] if strings else []
    rng = np.random.default_rng(request.seed)
    for length in request.training:
        examples = task.sample(rng, request.training_samples, length)
        right.append(lookup.correct(examples.tokens, examples.prompt_lengths, examples.lengths))
    right = np.concatenate(right)
    verification = (
        f"{right.mean():.2%} of {len(right)}: every input up to length {exhaustive} over "
        f"{' '.join(small.symbols)}, then {request.training_samples} random inputs at each of "
        f"{request.train_lengths[0]}-{request.train_lengths[1]}"
    )

    def judge(examples: Examples) -> np.ndarray:
        return lookup.correct(examples.tokens, examples.prompt_lengths, examples.lengths)

    scores = tuple(score_bin(request, judge, bin_) for bin_ in request.bins)
    return Row(name, lookup.text(), "C-RASP[local] (numpy)", bool(right.all()), verification, scores, request.threshold)


def _lookup_on_strings(lookup: KGramLookup, task: Task, strings: list[list[str]]) -> np.ndarray:
    ids = {symbol: k for k, symbol in enumerate(task.vocab)}
    tokens = np.zeros((len(strings), max(map(len, strings))), dtype=np.int64)
    for row, string in enumerate(strings):
        tokens[row, : len(string)] = [ids[symbol] for symbol in string]
    prompt_lengths = np.array([string.index("<sep>") + 1 for string in strings])
    return lookup.correct(tokens, prompt_lengths, np.array([len(string) for string in strings]))


def _searched(request: Request) -> Row:
    from crasp.search.driver import search
    from crasp.search.grammar import Grammar
    from crasp.search.options import SampleOptions, SearchOptions
    from crasp.search.report import claim

    # The search's own sample may hold only training lengths too: a longer string would rule out
    # programs that are exact on every training length.
    default = SampleOptions()
    random_lengths = tuple(length for length in default.random_lengths if length <= request.bound)
    sample = SampleOptions(
        exhaustive_length=min(default.exhaustive_length, request.bound),
        random_lengths=random_lengths or default.random_lengths,
        random_strings=default.random_strings if random_lengths else 0,
        seed=request.seed,
    )
    outcome = search(
        request.task,
        Grammar("all"),
        SearchOptions(time_limit=request.search_seconds, sample=sample),
        lengths=request.training,
    )
    name = f"search (C-RASP[periodic, local], {request.search_seconds:g} s)"
    if outcome.discovery is None:
        return Row(name, None, None, False, claim(outcome), (), request.threshold)
    row = _row(request, name, outcome.discovery.make)
    return Row(
        row.approximation,
        outcome.discovery.generic_text,
        row.fragment,
        row.exact_on_training,
        row.verification,
        row.scores,
        row.threshold,
    )


def score_bin(request: Request, correct_of: Callable[[Examples], np.ndarray], bin_: tuple[int, int]) -> BinScore:
    """An approximation (`correct_of`: a batch -> one bool per string, answered right) on
    `request.strings` strings of the bin, spread evenly over its lengths (only strings in the far
    cell with far_only), each length drawn from its own seeded generator."""
    lo, hi = bin_
    lengths = [length for length in range(lo, hi + 1) if request.task.length_problem(length) is None]
    per_length = -(-request.strings // len(lengths))
    correct = total = 0
    for length in lengths:
        rng = np.random.default_rng((request.seed, lo, hi, length))
        wanted, drawn = per_length, 0
        while wanted > 0:
            if drawn > MAX_DRAWS_PER_STRING * per_length:
                raise DiscriminationError(
                    f"at length {length}, {per_length - wanted} of {drawn} strings of the sampler "
                    f"({request.task.parameter_summary()}) have D >= {request.bound} and "
                    f"k > {request.bound}; the spread sampler draws them from length "
                    f"{2 * request.bound + 2} (k <= length / 2)"
                )
            examples = request.task.sample(rng, max(wanted, 64), length)
            drawn += len(examples)
            right = correct_of(examples)
            if request.far_only:
                distances, counts = request.task.occurrence_cells(examples)
                right = right[(distances >= request.bound) & (counts > request.bound)]
            right = right[:wanted]
            correct, total, wanted = correct + int(right.sum()), total + len(right), wanted - len(right)
    return BinScore(bin_, correct, total)


def format_table(rows: Sequence[Row], request: Request) -> str:
    """The table the command prints: one line per approximation, then the verdict per bin."""
    task = request.task
    header = ["approximation", "fragment", "exact on training"] + [f"{lo}-{hi}" for lo, hi in request.bins]
    body = []
    for row in rows:
        cells = [
            f"{s.accuracy:.3f} [{s.interval[0]:.3f}, {s.interval[1]:.3f}]"
            + (" passes" if row.exact_on_training and s.passes(request.threshold) else "")
            for s in row.scores
        ] or ["-"] * len(request.bins)
        exact = "none found" if row.program is None else "yes" if row.exact_on_training else "no"
        body.append([row.approximation, row.fragment or "-", exact] + cells)
    verdicts = [
        {True: "yes", False: "no", None: "unknown: no approximation"}[ok] for ok in bins_discriminating(rows, request)
    ]
    body.append(["bin discriminates", "", ""] + verdicts)
    widths = [max(len(line[k]) for line in [header] + body) for k in range(len(header))]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header] + body]
    lines.insert(1, "-" * max(len(line) for line in lines))
    lines.insert(-1, lines[1])
    sampler = task.parameter_summary()
    cell = f"; only strings with D >= {request.bound} and k > {request.bound}" if request.far_only else ""
    intro = [
        f"{task.code}: {task.description}",
        f"sampler: {sampler}; trained at {request.train_lengths[0]}-{request.train_lengths[1]}; "
        f"{request.strings} strings per bin{cell}; accuracy [95% Wilson interval]; an approximation exact on "
        f"training passes a bin when its interval reaches {request.threshold:g}",
    ]
    notes = [f"{row.approximation}: {row.verification}" for row in rows]
    return "\n".join(intro + [""] + lines + [""] + notes)
