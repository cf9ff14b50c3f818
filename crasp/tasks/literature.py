"""What the literature says about each task's expressibility, stored as data.

Two fragments are recorded per task: "pos" = C-RASP[pos] = C-RASP[periodic, local] (the APE
prediction) and "none" = C-RASP[] (the NoPE prediction). The interpreter decides positive verdicts
by verifying a witness program; these claims are what the papers (and the expressibility tables in
the papers) assert, so that experiments can set a prediction beside an outcome.

A claim is "not expressible" only where an impossibility argument exists; where the papers' table
says "no" but no argument is recorded, the verdict is "no program known".
"""

import enum
from dataclasses import dataclass

FRAGMENT_NAMES = {"pos": "C-RASP[pos]", "none": "C-RASP[]"}

HUANG = (
    "Huang et al. 2025, A Formal Framework for Understanding Length Generalization in "
    "Transformers (ICLR 2025, arXiv 2410.02140)"
)
VEITSMAN = "Veitsman, Jobanputra et al. 2025, Born a Transformer -- Always a Transformer? (arXiv 2505.21785)"
WITNESS_FILE = "witness program in crasp/witnesses.py"


class Expressibility(enum.Enum):
    EXPRESSIBLE = "expressible"
    NOT_EXPRESSIBLE = "not expressible"
    NO_PROGRAM_KNOWN = "no program known"


@dataclass(frozen=True)
class Claim:
    """One literature claim about one task in one fragment.

    argument: for EXPRESSIBLE the idea of a program; for NOT_EXPRESSIBLE the impossibility
    argument in one sentence; for NO_PROGRAM_KNOWN what is (not) known.
    table_says_expressible: the papers' table as written, kept even where the
    verdict is weaker than the table because no argument for the table's "no" is recorded.
    """

    verdict: Expressibility
    table_says_expressible: bool
    argument: str
    source: str

    def __post_init__(self):
        if not self.argument or not self.source:
            raise ValueError("a literature claim needs an argument and a source")
        if (self.verdict is Expressibility.EXPRESSIBLE) != self.table_says_expressible:
            raise ValueError(f"claim {self.argument!r}: verdict {self.verdict.value} contradicts the papers' table")

    @property
    def expressible(self) -> bool | None:
        """True / False where the literature decides; None for "no program known"."""
        return {Expressibility.EXPRESSIBLE: True, Expressibility.NOT_EXPRESSIBLE: False}.get(self.verdict)


def expressible(argument: str, source: str) -> Claim:
    return Claim(Expressibility.EXPRESSIBLE, True, argument, source)


def not_expressible(argument: str, source: str) -> Claim:
    return Claim(Expressibility.NOT_EXPRESSIBLE, False, argument, source)


def table_says_no_without_argument(remark: str, source: str) -> Claim:
    return Claim(
        Expressibility.NO_PROGRAM_KNOWN,
        False,
        "the papers' table marks this inexpressible, but no impossibility argument is recorded; " + remark,
        source,
    )


def inexpressible_in_both(argument: str, source: str) -> dict[str, Claim]:
    """C-RASP[] is a fragment of C-RASP[pos], so impossibility in C-RASP[pos] carries over."""
    return {
        "pos": not_expressible(argument, source),
        "none": not_expressible("C-RASP[] is a fragment of C-RASP[pos], where this is impossible: " + argument, source),
    }


CONSTANT_DISTANCE_REMARK = (
    "a C-RASP[] program may exist: the distance from the first occurrence of t, "
    "#[k <= j] (#[l <= k] Q_t(l) >= 1), equals 2 exactly at the position right after it "
    "(unverified; the interpreter decides)"
)

LOG_COMMUNICATION = "C-RASP[pos] has logarithmic communication complexity (Huang et al. 2025, Theorem 12)"
NOT_CHECKED = "a summary of the paper, not a checked citation of a numbered result"


def local_retrieval(side: str, which: str) -> dict[str, Claim]:
    """UL, UR (which="unique") and NLFirst, NRFirst (which="first")."""
    remark = (
        CONSTANT_DISTANCE_REMARK
        if side == "right"
        else "a constant distance from a first occurrence reaches right neighbours only, and the left "
        "neighbour may be a repeated token"
    )
    return {
        "pos": expressible(
            f"a local count ('the previous token is t') locates the {side} neighbour of the "
            f"{which} occurrence of the query; {WITNESS_FILE}",
            VEITSMAN,
        ),
        "none": table_says_no_without_argument(remark, VEITSMAN),
    }


def last_occurrence_retrieval() -> dict[str, Claim]:
    # Not communication complexity: one half of the input can send, for each symbol, its neighbour
    # at its last occurrence in constantly many bits, which is all the other half needs.
    return inexpressible_in_both(
        "Veitsman et al. (Lemma 6) reduce retrieval at the last occurrence to a language that Huang et al. 2025 "
        "show is outside C-RASP[pos] (their Lemmas 35-36)",
        VEITSMAN + "; " + HUANG,
    )


def unique_copy() -> dict[str, Claim]:
    return {
        "pos": expressible(
            "every token is distinct, so a local count finds its neighbour in the input; " + WITNESS_FILE,
            VEITSMAN + "; " + HUANG,
        ),
        "none": table_says_no_without_argument(
            CONSTANT_DISTANCE_REMARK + " (every token is a first occurrence)", VEITSMAN
        ),
    }


def copy_with_repeats() -> dict[str, Claim]:
    """NF, NB and repeat copy."""
    return inexpressible_in_both(
        LOG_COMMUNICATION + ", while copying a string whose tokens repeat needs linear communication "
        "(Veitsman et al., Lemma 8)",
        HUANG + "; " + VEITSMAN,
    )


def counting_only(argument: str) -> dict[str, Claim]:
    claim = expressible(argument + " (counts only, no positional operation)", HUANG)
    return {"pos": claim, "none": claim}


PARITY = inexpressible_in_both(
    "parity needs the number of ones modulo 2; C-RASP has no modulo on counts and "
    "Huang et al. state that periodic and local predicates do not recover it "
    f"({NOT_CHECKED})",
    HUANG,
)
ADDITION = inexpressible_in_both(
    LOG_COMMUNICATION + ", but the sum reveals the first operand to the side that "
    f"holds the second, which needs linear communication ({NOT_CHECKED})",
    HUANG,
)
BINARY_MAJORITY_INTERLEAVE = {
    "pos": expressible(
        "periodic predicates MOD_3 assign every bit to its string; each majority is a comparison of two counts", HUANG
    ),
    "none": table_says_no_without_argument(
        "assigning a bit to its string needs its position modulo 3, which C-RASP[] has no operation for", HUANG
    ),
}
