"""What the lab predicts for every task of its library and every position encoding, pinned row by
row with the reason that decides it. A change in a witness, a search record or the encodings'
table that moves a prediction fails here and must be stated in the commit that makes it."""

import pytest

from crasp.position_encodings import ENCODINGS
from crasp.prediction import predict
from crasp.tasks import TASK_CODES

C_RASP = "witness in C-RASP[] (Huang et al. 2025"
LOCAL = "witness in C-RASP[local] (Huang et al. 2025, APE)"
LAST_OCCURRENCE = "Veitsman et al. (Lemma 6)"
COMMUNICATION = "logarithmic communication complexity (Huang et al. 2025, Theorem 12)"
SEARCHED = "no program known in C-RASP[] (verified witnesses: C-RASP[local]); search"

# task: (APE label, NoPE label, the APE reason, the NoPE reason). RoPE and ALiBi have no theorem:
# they show the APE label with "(no theorem)".
TABLE = {
    "UL": ("yes", "none up to size 11", LOCAL, SEARCHED),  # UL's left neighbour needs the local relation
    "UR": ("yes", "yes", C_RASP, C_RASP),  # the nested count: the token after the query's first occurrence
    "NLFirst": ("yes", "none up to size 11", LOCAL, SEARCHED),
    "NRFirst": ("yes", "yes", C_RASP, C_RASP),
    "NLLast": ("no", "no", LAST_OCCURRENCE, LAST_OCCURRENCE),
    "NRLast": ("no", "no", LAST_OCCURRENCE, LAST_OCCURRENCE),
    "UF": ("yes", "yes", C_RASP, C_RASP),  # unique copy: each token's first occurrence is its only one
    "UB": ("yes", "yes", C_RASP, C_RASP),
    "NF": ("no", "no", COMMUNICATION, COMMUNICATION),  # copying repeated tokens needs linear communication
    "NB": ("no", "no", COMMUNICATION, COMMUNICATION),
    "BinaryMajority": ("yes", "yes", C_RASP, C_RASP),
    "Majority": ("yes", "yes", C_RASP, C_RASP),
    "Sort": ("yes", "yes", C_RASP, C_RASP),
    "RepeatCopy": ("no", "no", COMMUNICATION, COMMUNICATION),
    "Parity": ("no", "no", "C-RASP has no modulo on counts", "C-RASP has no modulo on counts"),
    "Addition": ("no", "no", COMMUNICATION, COMMUNICATION),
    "BinaryMajorityInterleave": ("yes", "unknown", "witness in C-RASP[periodic]", "no program known in C-RASP[]"),
}


def test_the_table_covers_the_whole_library():
    assert set(TABLE) == set(TASK_CODES)


@pytest.mark.parametrize("task", sorted(TABLE))
def test_prediction_and_reason_for_each_task_and_encoding(task):
    ape_label, nope_label, ape_reason, nope_reason = TABLE[task]
    ape, nope = predict(task, "ape"), predict(task, "nope")
    assert (ape.label, nope.label) == (ape_label, nope_label)
    assert ape_reason in ape.reason and nope_reason in nope.reason
    for code, encoding in ENCODINGS.items():
        if encoding.theorem is None:  # borrowed, and said to be
            borrowed = predict(task, code)
            assert borrowed.generalizes == predict(task, encoding.borrows).generalizes
            assert borrowed.label == predict(task, encoding.borrows).label + " (no theorem)"
