"""What theory predicts for a task and a position encoding, decided by the interpreter.

A task whose witness program agrees with the task on every string checked is predicted to
length-generalize: for APE when the witness lies in C-RASP[periodic, local], for NoPE when it
lies in C-RASP[]; an encoding without a theorem (RoPE, ALiBi) takes the prediction of the one it
borrows, marked "no theorem" (the table is crasp.position_encodings). Witnesses are the
hand-written ones (crasp.witnesses) and the programs found by `python -m crasp search --record`
(crasp/search_results.json), each verified here again (the verdict kept between runs until the
crasp source changes: crasp.verdict_cache). A task without a verified witness is
predicted not to generalize only where the literature has an impossibility argument; otherwise
the prediction is unknown: "no program known", or "none up to size k" where a recorded search
enumerated every program up to size k in the fragment without finding one. Inexpressibility is
never inferred from a failed check or from a search.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache

from crasp.check import check_witness
from crasp.fragment import Fragment, fragment_of
from crasp.position_encodings import NOPE_THEOREM, encoding
from crasp.program import Program
from crasp.search.results import load as load_search_results
from crasp.tasks import Task, get_task
from crasp.verdict_cache import cached_verdict
from crasp.witnesses import WITNESSES

# A quick verification for predictions (the `check` command runs the full one).
QUICK_LENGTHS = (1, 2, 3, 5, 8, 13, 30, 60, 150)
QUICK_SAMPLES = 50


# The search fragment whose exhausted search speaks for a prediction: C-RASP[] for a theorem
# without positional operations, else C-RASP[periodic, local] (a smaller fragment says nothing).
def _search_fragment(pe: str) -> str:
    return "all" if encoding(pe).prediction_theorem.allows_positional_operations else "none"


@dataclass(frozen=True)
class Prediction:
    generalizes: bool | None  # None: theory says nothing either way
    label: str  # short, for tables
    reason: str  # the witness's fragment, or the impossibility argument and its source


@dataclass(frozen=True)
class Witness:
    program: Program
    fragment: Fragment
    found_by_search: str | None  # "found by search, size k", or None for a hand-written witness


def _makers(code: str) -> list[tuple[object, str | None]]:
    hand_written = [(make, None) for make in WITNESSES.get(code, ())]
    found = [
        (record.make_witness(), f"found by search, size {record.size}")
        for record in load_search_results().values()
        if record.task == code and record.program
    ]
    return hand_written + found


def _verified(task: Task, make, program: Program) -> bool:
    """The quick check of `program` (`make(task.symbols)`), kept between runs (crasp.verdict_cache)."""
    settings = f"samples {QUICK_SAMPLES}, exhaustive to 4, lengths {QUICK_LENGTHS}"

    def verify() -> bool:
        # Seconds per witness where no verdict is kept: say what runs (stderr keeps stdout a table).
        print(f"verifying a witness of {task.code} ({program.title or 'untitled'}) ...", file=sys.stderr, flush=True)
        return check_witness(
            task, make, samples_per_length=QUICK_SAMPLES, exhaustive_max_length=4, lengths=QUICK_LENGTHS
        ).verified

    return cached_verdict((task.code, str(program), settings), verify)


@lru_cache(maxsize=None)
def verified_witnesses(code: str) -> tuple[Witness, ...]:
    task = get_task(code)
    programs = ((make(task.symbols), make, source) for make, source in _makers(task.code))
    return tuple(
        Witness(program, fragment_of(program), source)
        for program, make, source in programs
        if _verified(task, make, program)
    )


def _exhausted_search(code: str, pe: str):
    record = load_search_results().get(f"{code} {_search_fragment(pe)}")
    return record if record is not None and record.claim else None


def predict(code: str, pe: str) -> Prediction:
    pe_encoding = encoding(pe)
    task = get_task(code)
    witnesses = verified_witnesses(task.code)
    # The literature's claims are about C-RASP[] ("none") and C-RASP[pos] ("pos").
    without_positions = pe_encoding.prediction_theorem == NOPE_THEOREM
    fragment_key = "none" if without_positions else "pos"
    fragment_name = "C-RASP[]" if without_positions else "C-RASP[pos]"
    caveat = "" if pe_encoding.theorem is not None else " (no theorem)"
    covering = [w for w in witnesses if w.fragment.predicts_generalization(pe)]
    if covering:
        # The smallest fragment decides; among equals a hand-written witness is named first.
        best = min(
            covering,
            key=lambda w: (w.fragment.local + w.fragment.periodic, w.found_by_search is not None),
        )
        label = "yes" + caveat
        found = f"; {best.found_by_search}" if best.found_by_search else ""
        return Prediction(True, label, best.fragment.why(pe) + found)
    claim = task.literature[fragment_key]
    if claim.expressible is False:
        label = "no" + caveat
        return Prediction(False, label, f"not in {fragment_name}: {claim.argument} ({claim.source})")
    known = ", ".join(w.fragment.name for w in witnesses) or "none"
    reason = f"no program known in {fragment_name} (verified witnesses: {known})"
    search = _exhausted_search(task.code, pe)
    if search is None:
        return Prediction(None, "unknown", reason)
    return Prediction(
        None, f"none up to size {search.complete_through}", f"{reason}; search (`{search.command}`): {search.claim}"
    )
