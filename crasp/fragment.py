"""Which fragment of C-RASP a program lies in, and what that predicts for each position encoding.

The fragment is syntactic: a count with a local relation `j = i - c` needs [local], a MOD(m, r)
needs [periodic]. What a fragment predicts for an encoding is read from the table of encodings
(crasp.position_encodings): the theorem that covers the encoding, or the one it borrows when none
does (RoPE, ALiBi), marked as such.
"""

from __future__ import annotations

from dataclasses import dataclass

from crasp import expr as E
from crasp.position_encodings import PE_NAMES, POSITION_ENCODINGS, encoding
from crasp.program import Program

__all__ = ["Fragment", "fragment_of", "POSITION_ENCODINGS", "PE_NAMES"]


@dataclass(frozen=True)
class Fragment:
    local: bool
    periodic: bool

    @property
    def name(self) -> str:
        parts = [p for p, used in (("periodic", self.periodic), ("local", self.local)) if used]
        return f"C-RASP[{', '.join(parts)}]"

    @property
    def positional_operations(self) -> bool:
        return self.local or self.periodic

    def predicts_generalization(self, pe: str) -> bool:
        """Whether a witness in this fragment predicts length generalization for `pe`."""
        return encoding(pe).prediction_theorem.allows_positional_operations or not self.positional_operations

    def program_prediction(self, pe: str) -> str:
        """What one verified program in this fragment predicts for `pe`, in words. A program
        outside C-RASP[] predicts nothing for NoPE: another program for the same task may be in
        C-RASP[], and none being known does not make the task inexpressible there."""
        pe_encoding = encoding(pe)
        theorem = pe_encoding.prediction_theorem
        if not self.predicts_generalization(pe):
            return (
                f"no prediction: only {theorem.fragment} programs predict for {pe_encoding.name} "
                f"(this one is in {self.name})"
            )
        if pe_encoding.theorem is None:
            return (
                f"generalizes: the {encoding(pe_encoding.borrows).name} prediction ({pe_encoding.name} has no theorem)"
            )
        inside = "" if self.name == theorem.fragment else f", inside {theorem.fragment}"
        return f"generalizes: the program is in {self.name}{inside} ({theorem.source})"

    def why(self, pe: str) -> str:
        pe_encoding = encoding(pe)
        theorem = pe_encoding.prediction_theorem
        if not self.predicts_generalization(pe):
            return f"the witness needs {self.name}; {pe_encoding.name} is covered only by {theorem.fragment}"
        caveat = f"; {pe_encoding.caveat()}" if pe_encoding.caveat() else ""
        covered = pe_encoding.name if pe_encoding.theorem is not None else encoding(pe_encoding.borrows).name
        return f"witness in {self.name} ({theorem.source}, {covered}){caveat}"


def fragment_of(program: Program) -> Fragment:
    local = periodic = False
    for definition in program.definitions:
        for node in E.walk(definition.body, into_definitions=False):  # the ones it uses come in their turn
            local |= isinstance(node, E.CountOf) and node.offset is not None
            periodic |= isinstance(node, E.Periodic)
    return Fragment(local=local, periodic=periodic)
