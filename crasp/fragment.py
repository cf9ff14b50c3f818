"""Which fragment of C-RASP a program lies in, and what that predicts for each position encoding.

The fragment is syntactic: a count with a local relation `j = i - c` needs [local], a MOD(m, r)
needs [periodic]. Huang et al. 2025: a task expressible in C-RASP[periodic, local] is guaranteed
to length-generalize for transformers with learned absolute positions (APE); C-RASP[] plays that
role for transformers without positional encodings (NoPE). For RoPE there is no theorem; the
lab uses the APE prediction and marks it.
"""

from __future__ import annotations

from dataclasses import dataclass

from crasp import expr as E
from crasp.program import Program

POSITION_ENCODINGS = ("ape", "rope", "nope")
PE_NAMES = {"ape": "APE", "rope": "RoPE", "nope": "NoPE"}  # as the papers write them


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
        if pe not in POSITION_ENCODINGS:
            raise ValueError(f"unknown position encoding {pe!r}; accepted: {', '.join(POSITION_ENCODINGS)}")
        return pe != "nope" or not self.positional_operations

    def program_prediction(self, pe: str) -> str:
        """What one verified program in this fragment predicts for `pe`, in words. A program
        outside C-RASP[] predicts nothing for NoPE: another program for the same task may be in
        C-RASP[], and none being known does not make the task inexpressible there."""
        if not self.predicts_generalization(pe):
            return f"no prediction: only C-RASP[] programs predict for NoPE (this one is in {self.name})"
        if pe == "rope":
            return "generalizes: the APE prediction (RoPE has no theorem)"
        covered_by = "C-RASP[]" if pe == "nope" else "C-RASP[periodic, local]"
        inside = "" if self.name == covered_by else f", inside {covered_by}"
        return f"generalizes: the program is in {self.name}{inside} (Huang et al. 2025)"

    def why(self, pe: str) -> str:
        if pe == "nope":
            if self.positional_operations:
                return f"the witness needs {self.name}; NoPE is covered only by C-RASP[]"
            return "witness in C-RASP[] (Huang et al. 2025, NoPE)"
        theorem = "" if pe == "ape" else "; no theorem for RoPE (APE prediction)"
        return f"witness in {self.name} (Huang et al. 2025, APE){theorem}"


def fragment_of(program: Program) -> Fragment:
    local = periodic = False
    for definition in program.definitions:
        for node in E.walk(definition.body, into_definitions=False):  # the ones it uses come in their turn
            local |= isinstance(node, E.CountOf) and node.offset is not None
            periodic |= isinstance(node, E.Periodic)
    return Fragment(local=local, periodic=periodic)
