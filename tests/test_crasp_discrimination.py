"""The discrimination check: bounded approximations exact on every training-length string, their
scores on test bins, and which bins can test a "does not generalize" prediction."""

from __future__ import annotations

import numpy as np
import pytest

from crasp.__main__ import main
from crasp.approximations import BOUNDED_APPROXIMATIONS, last_within_window_or_count
from crasp.check import _task_strings_batch, check_witness, correct_answers, exhaustive_strings, small_version
from crasp.discrimination import (
    BinScore,
    DiscriminationError,
    Request,
    Row,
    bins_discriminating,
    discriminate,
    task_with_sampler,
)
from crasp.fragment import fragment_of
from crasp.intervals import wilson_interval
from crasp.tasks import TASK_CODES, get_task

PARAMETERS = [(code, name, factory) for code, makers in BOUNDED_APPROXIMATIONS.items() for name, factory in makers]


def test_every_task_predicted_not_to_generalize_has_a_bounded_approximation_but_addition():
    """The tasks whose APE prediction is "no": those with an impossibility argument (none has a witness)."""
    predicted_no = {code for code in TASK_CODES if get_task(code).literature["pos"].expressible is False}
    assert predicted_no - set(BOUNDED_APPROXIMATIONS) == {"Addition"}  # the search is its only approximation
    assert set(BOUNDED_APPROXIMATIONS) <= predicted_no


@pytest.mark.parametrize("code, name, factory", PARAMETERS)
def test_an_approximation_is_exact_on_every_string_up_to_its_bound(code, name, factory):
    """Every string of lengths 1-5 over 3 symbols (2 for parity and repeat copy): exhaustive."""
    small = small_version(get_task(code))
    report = check_witness(small, factory(5), exhaustive_max_length=5, lengths=())
    assert report.strings == len(exhaustive_strings(small, 5)) > 60 and report.verified, report.counterexample
    assert fragment_of(factory(5)(small.symbols)).name in ("C-RASP[]", "C-RASP[local]")


@pytest.mark.parametrize("side, code", [("left", "NLLast"), ("right", "NRLast")])
def test_the_window_or_count_program_is_exact_up_to_twice_its_bound_and_no_further(side, code):
    """With L = 3, every string up to length 6 is answered right; at length 7, `q q q q x x x`
    (q = a, D = 3 and k = 4, both beyond L) is the only kind of string it cannot answer."""
    task = small_version(get_task(code))
    make = last_within_window_or_count(side, 3)
    assert check_witness(task, make, exhaustive_max_length=6, lengths=()).verified
    strings = [s for s in exhaustive_strings(task, 7) if s.index("<sep>") == 8]  # every input of length 7
    right = _task_strings_batch(make(task.symbols), task, strings).correct
    far = [_last_distance(s[1:8], s[9]) >= 3 and s[1:8].count(s[9]) > 3 for s in strings]
    assert (~right).tolist() == far and any(far)


def _last_distance(inputs, query) -> int:
    return len(inputs) - 1 - max(i for i, s in enumerate(inputs) if s == query)


def test_wilson_intervals_match_known_values():
    assert wilson_interval(0, 1000) == pytest.approx((0.0, 0.003827), abs=1e-6)
    assert wilson_interval(50, 100) == pytest.approx((0.403832, 0.596168), abs=1e-6)
    assert wilson_interval(1000, 1000)[1] == 1.0


def test_parity_bins_known_by_hand():
    """Counting ones up to L = 4 is right on every string of length 5 but 11111 (31/32 = 0.969,
    passes 0.9) and on half the strings of length 9 (P(Bin(9, 1/2) <= 4) = 1/2): length 5
    cannot test the prediction, length 9 can."""
    request = Request(get_task("Parity"), (1, 4), ((5, 5), (9, 9)), strings=4000)
    (row,) = discriminate(request)
    assert row.exact_on_training and row.fragment == "C-RASP[]"
    at_5, at_9 = row.scores
    assert at_5.interval[0] <= 31 / 32 <= at_5.interval[1] and at_9.interval[0] <= 0.5 <= at_9.interval[1]
    assert bins_discriminating([row], request) == (False, True)


def test_on_far_cells_every_last_occurrence_approximation_fails():
    """Strings with D >= L and k > L are exactly those the window and the window-or-count miss."""
    request = Request(
        task_with_sampler("NRLast", "spread"), (1, 6), ((14, 16),), strings=300, far_only=True, training_samples=50
    )
    rows = discriminate(request)
    assert [row.approximation for row in rows] == ["window (L=6)", "window or count (L=6)"]
    assert all(row.exact_on_training for row in rows)
    assert [row.scores[0].accuracy for row in rows] == [0.0, 0.0] and bins_discriminating(rows, request) == (True,)
    # The same bin over every string of the spread sampler: the window or count passes most of them.
    mixed = discriminate(Request(request.task, (1, 6), ((14, 16),), strings=300, training_samples=50))
    assert 0.5 < mixed[1].scores[0].accuracy < 1.0


def test_without_an_approximation_no_bin_is_said_to_discriminate():
    request = Request(get_task("Addition"), (1, 5), ((9, 12),), search_seconds=1)
    nothing = Row("search", None, None, False, "no program of size <= 3", (), 0.9)
    assert bins_discriminating([nothing], request) == (None,)


def test_an_approximation_not_exact_on_training_decides_nothing():
    score = BinScore((21, 30), 1000, 1000)
    row = Row("broken", "", "C-RASP[]", False, "", (score,), 0.9)
    assert row.discriminates() == (True,)
    assert Row("exact", "", "C-RASP[]", True, "", (score,), 0.9).discriminates() == (False,)


def test_the_search_looks_for_programs_exact_on_the_training_lengths_only():
    """NRLast at length 3 has one kind of string, `q q x`: small programs answer it and fail on
    longer strings, and the search, verifying at the training lengths only, finds one."""
    request = Request(get_task("NRLast"), (1, 3), ((7, 8),), strings=300, search_seconds=60)
    searched = discriminate(request)[-1]
    assert searched.approximation.startswith("search") and searched.exact_on_training
    assert "alphabet: <bos> <sep> <eos> ..." in searched.program
    assert searched.scores[0].accuracy < 0.5


def test_scores_are_reproducible_and_spread_over_the_bin():
    task = get_task("NLLast")
    request = Request(task, (1, 5), ((11, 13),), strings=300)
    program = BOUNDED_APPROXIMATIONS["NLLast"][0][1](5)(task.symbols)
    from crasp.discrimination import score_bin

    def judge(examples):
        return correct_answers(task, program, examples)

    first, again = score_bin(request, judge, (11, 13)), score_bin(request, judge, (11, 13))
    assert first == again and first.strings == 300
    manual = [
        correct_answers(task, program, task.sample(np.random.default_rng((0, 11, 13, m)), 100, m)).sum()
        for m in (11, 12, 13)
    ]
    assert first.correct == sum(manual)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["discriminates", "NLLast", "--train-lengths", "1", "20", "--bins", "10-30"], "test bin 10-30: accepted"),
        (
            ["discriminates", "NLLast", "--train-lengths", "1", "20", "--bins", "31-40", "--far-cells"],
            "accepted with far cells: bins from 41",
        ),
        (
            ["discriminates", "UR", "--train-lengths", "1", "20", "--bins", "31-40", "--sampler", "spread"],
            "sampler 'spread' exists for NLFirst, NRFirst, NLLast and NRLast",
        ),
        (
            ["discriminates", "Addition", "--train-lengths", "1", "20", "--bins", "31-40", "--search-seconds", "0"],
            "no bounded approximation is built for Addition",
        ),
    ],
)
def test_the_command_refuses_what_it_cannot_check(argv, message, capsys):
    assert main(argv) == 2
    printed = capsys.readouterr()
    assert message in printed.err and printed.out == ""


def test_the_command_prints_the_table(capsys):
    assert (
        main(
            [
                "discriminates",
                "Parity",
                "--train-lengths",
                "1",
                "4",
                "--bins",
                "5-5",
                "9-9",
                "--strings",
                "2000",
                "--search-seconds",
                "0",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Parity: ")
    row = next(line for line in lines if line.startswith("count up to L (L=4)"))
    assert row.split("|")[3].strip().endswith("passes") and "passes" not in row.split("|")[4]
    verdict = next(line for line in lines if line.startswith("bin discriminates"))
    assert [cell.strip() for cell in verdict.split("|")[3:]] == ["no", "yes"]


def test_an_unknown_sampler_is_a_clear_error():
    with pytest.raises(DiscriminationError, match="unknown sampler 'far'; accepted: paper, official, spread"):
        task_with_sampler("NLLast", "far")
