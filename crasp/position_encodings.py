"""The position encodings the lab knows, and which theorem (if any) speaks for each.

One row per encoding. The theory side is all here: `crasp.fragment` and `crasp.prediction` read
this table and never test an encoding by name, so a new encoding gets a prediction (or the
plain statement that no theorem covers it) by adding a row. This table is the row's identity; the
layers above add their parts in tables keyed by the same codes (the model side, training, the
verdict rules, the compiler, the exporter: docs/layout.md, "Position encodings"), and
tests/test_position_encoding_facts.py keeps every part complete.

Huang et al. 2025 prove two results: a task expressible in C-RASP[periodic, local] length-
generalizes for transformers with learned absolute positions (APE), and one expressible in
C-RASP[] does for transformers without position encodings (NoPE); both for some sufficiently
large training length, under an idealized learning rule. No such result is known for RoPE or
ALiBi: for them the lab shows the APE prediction and labels it "no theorem". The papers'
experiments train APE and NoPE (Huang et al.) and APE and RoPE (Veitsman et al., whose retrieval
and copying tasks the lab runs); ALiBi is the lab's addition.
"""

from __future__ import annotations

from dataclasses import dataclass

HUANG_2025 = "Huang et al. 2025"
VEITSMAN_2025 = "Veitsman et al. 2025"  # the retrieval and copying tasks, and their official code


@dataclass(frozen=True)
class Theorem:
    """A length-generalization result: a witness in `fragment` predicts generalization."""

    fragment: str  # as Fragment.name writes it
    allows_positional_operations: bool  # whether a witness may use the local relation or MOD
    source: str


APE_THEOREM = Theorem("C-RASP[periodic, local]", allows_positional_operations=True, source=HUANG_2025)
NOPE_THEOREM = Theorem("C-RASP[]", allows_positional_operations=False, source=HUANG_2025)


@dataclass(frozen=True)
class PositionEncoding:
    code: str  # as on the command line and in ModelConfig.position
    name: str  # as the papers write it
    description: str
    theorem: Theorem | None  # None: no result is known; the prediction is borrowed
    borrows: str | None = None  # the encoding whose prediction is shown when there is no theorem
    trained_by: tuple[str, ...] = ()  # the papers whose experiments train it; (): an addition of the lab

    @property
    def prediction_theorem(self) -> Theorem:
        """The theorem whose prediction this encoding shows: its own, or the one it borrows."""
        return self.theorem if self.theorem is not None else encoding(self.borrows).theorem

    def caveat(self) -> str:
        """'' for an encoding with a theorem, else what its prediction rests on, in words."""
        if self.theorem is not None:
            return ""
        return f"no theorem for {self.name} ({encoding(self.borrows).name} prediction)"


ENCODINGS: dict[str, PositionEncoding] = {
    e.code: e
    for e in (
        PositionEncoding(
            "ape",
            "APE",
            "a learned vector per absolute position, added to the token embedding",
            APE_THEOREM,
            trained_by=(HUANG_2025, VEITSMAN_2025),
        ),
        PositionEncoding(
            "rope",
            "RoPE",
            "queries and keys rotated by an angle proportional to the position",
            None,
            borrows="ape",
            trained_by=(VEITSMAN_2025,),
        ),
        PositionEncoding(
            "nope",
            "NoPE",
            "no position information besides the causal mask",
            NOPE_THEOREM,
            trained_by=(HUANG_2025,),
        ),
        PositionEncoding(
            "alibi",
            "ALiBi",
            "a fixed per-head penalty on attention scores, linear in the distance (Press et al. 2022)",
            None,
            borrows="ape",
        ),
    )
}
POSITION_ENCODINGS: tuple[str, ...] = tuple(ENCODINGS)
PE_NAMES = {code: e.name for code, e in ENCODINGS.items()}
# The encodings a theorem covers: the columns of the prediction tables.
WITH_THEOREM: tuple[str, ...] = tuple(code for code, e in ENCODINGS.items() if e.theorem is not None)
# The encodings the papers train: the grid that reproduces them at their scale (experiments/paper_grid.py).
IN_THE_PAPERS: tuple[str, ...] = tuple(code for code, e in ENCODINGS.items() if e.trained_by)


def encoding(code: str) -> PositionEncoding:
    if code not in ENCODINGS:
        raise ValueError(f"unknown position encoding {code!r}; accepted: {', '.join(POSITION_ENCODINGS)}")
    return ENCODINGS[code]
