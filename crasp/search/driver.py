"""The search loop: enumerate, test on the sample, verify with crasp.check, learn from failures.

Each round enumerates expressions by increasing size on the current sample. An output (or a
decision list of leaves and guards) that predicts every answer token of the sample is verified
by `crasp.check` in full: every string up to input length 6 over 3 symbols, then 200 random
strings per length up to 300. If the check fails, its counterexample (renamed onto the sample's
symbols) joins the sample and the search starts again: the enumeration is deterministic and a
larger sample only splits behaviours further. A counterexample the sample cannot hold (too long)
is replaced by a short one drawn from the small task; if none is found the round goes on, and
an output refuted so is recorded as an exception to what the search shows. A decision list
refuted after the last size ends the search: it changes nothing the enumeration has shown.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from crasp.check import EXHAUSTIVE_MAX_LENGTH, CheckReport, check_witness
from crasp.nexttoken import check_teacher_forced
from crasp.program import Program, print_program
from crasp.search.build import Builder, program_maker, tree_size
from crasp.search.enumerate import Budget, BudgetExhausted, Enumerator, LevelStats
from crasp.search.grammar import Grammar
from crasp.tasks.base import PROGRAM_SPECIALS
from crasp.search.options import SearchOptions
from crasp.search.sample import Sample, build_sample, full_strings, small_task
from crasp.search.store import CATEGORIES
from crasp.search.targets import CONTEXTS, Decision, Found, FoundBatch, GuardSet, LeafSet, Targets, unify
from crasp.syntax import GENERIC_MARK
from crasp.tasks import Task

QUICK_LENGTHS = (1, 2, 3, 5, 8, 13, 30)
MAX_COUNTEREXAMPLE_TOKENS = 40
COUNTEREXAMPLE_LENGTHS = (4, 5, 6, 8, 10, 12)


@dataclass
class Discovery:
    """A program that passed crasp.check."""

    program: Program  # over the task's own symbols
    make: Callable[[tuple[str, ...]], Program]
    size: int  # nodes of O written out in full
    enumerated_size: int  # the size of the enumeration when it was found
    shape: str  # "one expression" or "decision list of k leaves"
    seconds: float
    check: CheckReport

    @property
    def text(self) -> str:
        return print_program(self.program)

    @property
    def generic_text(self) -> str:
        """The program as an alphabet-generic file (`alphabet: <bos> <sep> <eos> ...`): the grammar
        names no task symbol, so the program reads any task's symbols, and `crasp check TASK
        --program FILE` can run it over the reduced alphabet of its exhaustive stage."""
        alphabet = "alphabet: " + " ".join(self.program.alphabet)
        return self.text.replace(alphabet, f"alphabet: {' '.join(PROGRAM_SPECIALS)} {GENERIC_MARK}", 1)


@dataclass
class SearchOutcome:
    task: Task
    grammar: Grammar
    options: SearchOptions
    sample: Sample
    levels: list[LevelStats]
    discovery: Discovery | None = None
    stopped: str | None = None  # why the enumeration stopped before max_size (a budget or an interruption)
    rounds: int = 1
    rejected: int = 0  # candidates that passed the sample but failed the check without a usable counterexample
    verifications: int = 0
    seconds: float = 0.0
    uncovered: list[str] = field(default_factory=list)  # predictions no output candidate made (last round)

    @property
    def complete_through(self) -> int:
        """The largest size up to which every expression was enumerated (0 if none)."""
        done = 0
        for level in self.levels:
            if not level.complete:
                break
            done = level.size
        return done


class _Restart(Exception):
    def __init__(self, sample: Sample):
        self.sample = sample


class _Success(Exception):
    def __init__(self, discovery: Discovery):
        self.discovery = discovery


class Search:
    def __init__(
        self,
        task: Task,
        grammar: Grammar,
        options: SearchOptions = SearchOptions(),
        on_level: Callable[[LevelStats], None] | None = None,
        progress: Callable[[int], None] | None = None,
        on_level_start: Callable[[int, int], None] | None = None,
        lengths: tuple[int, ...] | None = None,
    ):
        """`lengths`: verify candidates only at these input lengths (every short string up to the
        longest of them, then samples at each), to find a program exact on training lengths;
        by default a candidate is verified as `crasp check` verifies a witness."""
        self.task, self.grammar, self.options = task, grammar, options
        self.lengths = lengths
        self.on_level = on_level or (lambda level: None)
        self.on_level_start = on_level_start or (lambda size, planned: None)
        self.progress = progress
        self.started = time.monotonic()
        # The budget counts this process's CPU seconds, not the wall clock: a search that shares
        # the machine (the discrimination checks run beside training) covers what it would alone.
        self.started_cpu = time.process_time()
        self.rejected = self.verifications = 0

    def run(self) -> SearchOutcome:
        sample = build_sample(self.task, self.options.sample)
        budget = Budget(
            deadline=self.started_cpu + self.options.time_limit,
            max_behaviours=self.options.max_behaviours,
            memory_bytes=int(self.options.memory_gib * 2**30),
        )
        outcome = None
        for round_number in range(1, self.options.max_rounds + 1):
            outcome = SearchOutcome(self.task, self.grammar, self.options, sample, [], rounds=round_number)
            try:
                self._round(sample, budget, outcome)
                break
            except _Restart as restart:
                sample = restart.sample
            except _Success as success:
                outcome.discovery = success.discovery
                break
            except BudgetExhausted as exhausted:
                outcome.stopped = str(exhausted)
                break
            except KeyboardInterrupt:
                outcome.stopped = "interrupted"
                break
        else:
            outcome.stopped = f"{self.options.max_rounds} rounds of counterexamples"
        outcome.rejected, outcome.verifications = self.rejected, self.verifications
        outcome.seconds = time.monotonic() - self.started
        return outcome

    # -- one round over one sample
    def _round(self, sample: Sample, budget: Budget, outcome: SearchOutcome) -> None:
        targets = Targets(sample)
        leaves, guards = LeafSet(len(sample.needed)), GuardSet(len(sample.needed))
        enumerator = Enumerator(self.grammar, sample, self.options.max_size, budget, progress=self.progress)
        builder = Builder(enumerator.table, enumerator.atoms)
        enumerator.inspect = lambda *args: self._inspect(sample, targets, leaves, guards, builder, *args)
        outcome.levels = []
        for size in range(1, self.options.max_size + 1):
            plans = enumerator.plans(size)
            self.on_level_start(size, sum(p.candidates for p in plans) + enumerator.level_stats(size).planned)
            try:
                level = enumerator.run_level(size, plans)
            finally:
                outcome.levels = [enumerator.levels[k] for k in sorted(enumerator.levels) if k <= size]
                outcome.uncovered = [sample.prediction(k) for k in np.flatnonzero(~leaves.ever_right)]
            self.on_level(level)
            if leaves.changed:
                leaves.changed = False
                tree = unify(leaves, guards)
                if tree is not None:
                    self._try(sample, builder, tree, size, restart=size < self.options.max_size)

    def _inspect(
        self,
        sample: Sample,
        targets: Targets,
        leaves: LeafSet,
        guards: GuardSet,
        builder: Builder,
        category,
        size,
        kinds,
        args,
        packed,
    ) -> None:
        for context, values in targets.in_contexts(category.variables, packed).items():
            batch = FoundBatch(context, kinds, args, size, CATEGORIES.index(category))
            if not CONTEXTS[context][2]:
                guards.add(values, batch)
                continue
            right = targets.right(values)
            for k in np.flatnonzero(right.all(axis=1)):
                self._try(sample, builder, batch.at(k), size)
            leaves.add(right, batch)

    # -- verification
    def _try(
        self, sample: Sample, builder: Builder, tree: Decision | Found, enumerated_size: int, restart: bool = True
    ) -> None:
        """Verify a candidate that is right on the whole sample; success ends the search, and a
        counterexample the round (unless `restart` is off: after the last size a refuted decision
        list changes nothing the search has shown, so the search just ends)."""
        shape = "one expression" if isinstance(tree, Found) else f"decision list of {_leaves(tree)} leaves"
        make = program_maker(builder, tree, "")
        self.verifications += 1
        if self.lengths is None:
            quick = check_witness(
                self.task, make, samples_per_length=20, exhaustive_max_length=4, lengths=QUICK_LENGTHS
            )
            report = check_witness(self.task, make) if quick.verified else quick
        else:
            exhaustive = min(EXHAUSTIVE_MAX_LENGTH, max(self.lengths))
            quick = check_witness(
                self.task, make, samples_per_length=20, exhaustive_max_length=min(4, exhaustive), lengths=self.lengths
            )
            report = (
                check_witness(self.task, make, exhaustive_max_length=exhaustive, lengths=self.lengths)
                if quick.verified
                else quick
            )
        if report.verified:
            size = tree_size(make(self.task.symbols).target.body)
            title = (
                f"found by `python -m crasp search {self.task.code} --fragment {self.grammar.fragment}`: "
                f"{shape}, size {size}"
            )
            make = program_maker(builder, tree, title)
            raise _Success(
                Discovery(
                    make(self.task.symbols), make, size, enumerated_size, shape, time.monotonic() - self.started, report
                )
            )
        string = self._counterexample(sample, report, make) if restart else None
        if string is not None:
            raise _Restart(sample.with_string(string))
        if isinstance(tree, Found):  # an output the claim must except: its behaviour was not searched further
            self.rejected += 1

    def _counterexample(self, sample: Sample, report: CheckReport, make) -> tuple[str, ...] | None:
        """A failing string over the sample's symbols, not yet in the sample."""
        reported = report.counterexample.splitlines()[0].split() if report.counterexample else []
        string = sample.relabel(reported) if len(reported) <= MAX_COUNTEREXAMPLE_TOKENS else None
        if string is not None and string not in sample.strings:
            return string
        return self._short_counterexample(sample, make)

    def _short_counterexample(self, sample: Sample, make) -> tuple[str, ...] | None:
        """The shortest failing string among random ones of the small task (a few lengths)."""
        small = small_task(self.task, sample.options)
        program = make(sample.alphabet[len(PROGRAM_SPECIALS) :])
        rng = np.random.default_rng(sample.options.seed + len(sample.strings))
        ids = program.symbol_ids()
        for length in COUNTEREXAMPLE_LENGTHS:
            if small.length_problem(length) is not None:
                continue
            examples = small.sample(rng, 100, length)
            strings = full_strings(examples)
            width = max(len(x) for x in strings)
            tokens = np.full((len(strings), width), -1, np.int64)
            for row, string in enumerate(strings):
                tokens[row, : len(string)] = [ids[x] for x in string]
            result = check_teacher_forced(program, tokens, examples.prompt_lengths, examples.lengths)
            for failure in result.failures:
                string = sample.relabel(list(strings[failure.example]))
                if string is not None and string not in sample.strings:
                    return string
        return None


def _leaves(tree: Decision | Found) -> int:
    return 1 if isinstance(tree, Found) else _leaves(tree.if_true) + _leaves(tree.if_false)


def search(task: Task, grammar: Grammar, options: SearchOptions = SearchOptions(), **keywords) -> SearchOutcome:
    """The outcome of Search(task, grammar, options, **keywords): callbacks, or `lengths`."""
    return Search(task, grammar, options, **keywords).run()
