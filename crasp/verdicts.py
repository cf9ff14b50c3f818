"""What theory predicts for a task and a position encoding, decided by the interpreter.

A task whose witness program agrees with the task on every string checked is predicted to
length-generalize: for APE when the witness lies in C-RASP[periodic, local], for NoPE when it
lies in C-RASP[]; RoPE takes the APE prediction, marked "no theorem". A task without a verified
witness is predicted not to generalize only where the literature has an impossibility argument;
otherwise the prediction is unknown ("no program known"). Inexpressibility is never inferred
from a failed check.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from crasp.check import CheckReport, check_witness
from crasp.fragment import POSITION_ENCODINGS
from crasp.tasks import get_task
from crasp.witnesses import WITNESSES

# A quick verification for predictions (the `check` command runs the full one).
QUICK_LENGTHS = (1, 2, 3, 5, 8, 13, 30, 60, 150)
QUICK_SAMPLES = 50


@dataclass(frozen=True)
class Prediction:
    generalizes: bool | None  # None: theory says nothing either way
    label: str  # short, for tables
    reason: str  # the witness's fragment, or the impossibility argument and its source


@lru_cache(maxsize=None)
def verified_witnesses(code: str) -> tuple[CheckReport, ...]:
    task = get_task(code)
    reports = (check_witness(task, make, samples_per_length=QUICK_SAMPLES, exhaustive_max_length=4,
                             lengths=QUICK_LENGTHS) for make in WITNESSES.get(task.code, ()))
    return tuple(r for r in reports if r.verified)


def prediction(code: str, pe: str) -> Prediction:
    if pe not in POSITION_ENCODINGS:
        raise ValueError(f"unknown position encoding {pe!r}; accepted: {', '.join(POSITION_ENCODINGS)}")
    task = get_task(code)
    witnesses = verified_witnesses(task.code)
    fragment_key = "none" if pe == "nope" else "pos"
    covering = [w for w in witnesses if w.fragment.predicts_generalization(pe)]
    if covering:
        best = min(covering, key=lambda w: (w.fragment.local + w.fragment.periodic))
        label = "yes" if pe != "rope" else "yes (no theorem)"
        return Prediction(True, label, best.fragment.why(pe))
    claim = task.literature[fragment_key]
    if claim.expressible is False:
        label = "no" if pe != "rope" else "no (no theorem)"
        return Prediction(False, label, f"not in {'C-RASP[]' if pe == 'nope' else 'C-RASP[pos]'}: "
                                        f"{claim.argument} ({claim.source})")
    known = ", ".join(w.fragment.name for w in witnesses) or "none"
    return Prediction(None, "unknown", f"no program known in {'C-RASP[]' if pe == 'nope' else 'C-RASP[pos]'}"
                                       f" (verified witnesses: {known})")
