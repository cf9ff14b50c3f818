"""What a model learned (experiments/what_learned.py): its agreement with each bounded program is
counted at the right positions, and a model that is one of the programs is recognised as it."""

import numpy as np
import pytest

from crasp.approximations import KGramLookup, last_within_window_or_count
from crasp.tasks import get_task
from crasplab.reports.what_learned import NONE_OF_THEM, agreement_cell, behaviour, learned_markdown
from crasplab.train.evaluate import build_eval_sets
from experiments import what_learned


def as_argmax(eval_set, answers_NxA: np.ndarray) -> np.ndarray:
    """The argmax array of a 'model' that answers `answers_NxA` at each answer step."""
    tokens = eval_set.batch.tokens_BxT
    at, answered = what_learned.answer_steps(eval_set.prompt_lengths_N, eval_set.batch.lengths_B)
    argmax = np.full(tokens.shape, -7)
    rows = np.repeat(np.arange(len(tokens))[:, None], at.shape[1], axis=1)
    argmax[rows[answered], at[answered] - 1] = answers_NxA[answered]
    return argmax


@pytest.mark.parametrize(
    "code, overrides, member",
    [
        ("NF", {}, "lookup"),
        ("NB", {}, "lookup"),
        ("NLLast", dict(occurrences="spread"), "program"),
    ],
)
def test_a_model_that_is_a_bounded_program_agrees_with_it_everywhere_and_with_the_task_where_it_is_right(
    code, overrides, member, monkeypatch
):
    task = get_task(code, **overrides)
    (eval_set,) = build_eval_sets(task, 0, [(13, 16)], 30, 200)
    tokens, prompts, lengths = eval_set.batch.tokens_BxT, eval_set.prompt_lengths_N, eval_set.batch.lengths_B
    if member == "lookup":
        lookup = KGramLookup(4, None, "first", code == "NB")
        members = {"4-gram": lookup.answers}
        right = lookup.correct(tokens, prompts, lengths)
    else:
        members = {"window or count": what_learned.program_answers(task, last_within_window_or_count("left", 6))}
        _, answered = what_learned.answer_steps(prompts, lengths)
        truth = np.take_along_axis(tokens, what_learned.answer_steps(prompts, lengths)[0], axis=1)
        right = ((members["window or count"](tokens, prompts, lengths) == truth) | ~answered).all(axis=1)
    ((name, answers),) = members.items()
    monkeypatch.setattr(
        what_learned, "teacher_forced_argmax", lambda trained, s: as_argmax(s, answers(tokens, prompts, lengths))
    )
    exact, agreements = what_learned.bin_agreements(None, eval_set, members)
    assert agreements[name]["agreeing"] == len(exact)  # it is the program
    assert exact.tolist() == right.tolist()  # and right exactly where the program is
    assert 0 < right.sum() < len(right)  # both kinds of string occur, so the test can tell


def test_a_seed_behaves_like_a_member_only_at_the_threshold():
    near, far = (
        agreement_cell(np.array([True] * 95 + [False] * 5)),
        agreement_cell(np.array([True] * 40 + [False] * 60)),
    )
    assert behaviour({"a": far, "b": near}, 0.9) == "like b (0.950)"
    assert behaviour({"a": far}, 0.9) == f"{NONE_OF_THEM} (closest: a, 0.400)"
    summary = dict(
        threshold=0.9,
        tasks=dict(
            NF=dict(
                predicted="no",
                seeds=[
                    dict(
                        seed=5,
                        bins=[dict(bin="31-40", task=far, members={"a": far, "b": near})],
                        shape_at_training=near,
                    )
                ],
            )
        ),
    )
    text = learned_markdown(summary)
    assert (
        "| 5 | 31-40 | 0.400 [" in text and "like b (0.950)" in text and "training lengths, test shape | 0.950" in text
    )
