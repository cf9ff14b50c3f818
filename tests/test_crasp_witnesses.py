"""Every witness equals the task's reference on hypothesis-drawn inputs; broken witnesses are caught."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasp.__main__ import main
from crasp.check import check_witness
from crasp.expr import Q, any_, count, family
from crasp.nexttoken import generate
from crasp.tasks import get_task
from crasp.witnesses import WITNESSES, in_input, majority, prev, retrieval_program, t

WITNESS_CASES = [(code, make) for code, makers in WITNESSES.items() for make in makers]


@pytest.mark.parametrize("code, make", WITNESS_CASES, ids=[f"{c}-{m.__name__}" for c, m in WITNESS_CASES])
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), length=st.integers(1, 60))
def test_witness_generates_the_reference_answer(code, make, seed, length):
    task = get_task(code, alphabet_size=8) if "alphabet_size" in task_params(code) else get_task(code)
    if task.length_problem(length):
        length = task.min_length()
    examples = task.sample(np.random.default_rng(seed), 2, length)
    program = make(task.symbols)
    for row in range(2):
        prompt_end = int(examples.prompt_lengths[row])
        prompt = [task.vocab[k] for k in examples.tokens[row, :prompt_end]]
        query = examples.queries[row] if task.has_query else None
        reference = task.answer(examples.inputs[row], query) if task.has_query else task.answer(examples.inputs[row])
        assert generate(program, prompt, max_new_tokens=len(reference) + 1) == reference + ["<eos>"]


def task_params(code):
    return get_task(code).params


def broken_unique_right(symbols):
    """UR answering the left neighbour: the count keys on the query at j instead of j - 1."""
    wrong = family("right_of_query", ["s"], lambda s: any_(t, Q(t) & (count(Q(t) & prev(s) & in_input) >= 1)))
    return retrieval_program(symbols, wrong, "a broken UR witness")


def test_a_broken_witness_is_caught_with_a_small_counterexample():
    report = check_witness(get_task("UR"), broken_unique_right, samples_per_length=20, lengths=(5,))
    assert not report.verified
    first_line, second_line = report.counterexample.splitlines()
    assert first_line.startswith("<bos>") and len(first_line.split()) <= 8  # found by the exhaustive stage
    assert "expected" in second_line


def test_check_command_exits_nonzero_and_prints_the_counterexample(monkeypatch, capsys):
    monkeypatch.setitem(WITNESSES, "UR", (broken_unique_right,))
    with pytest.raises(SystemExit) as exited:
        main(["check", "UR", "--samples", "10"])
    assert exited.value.code == 1
    assert "smallest counterexample" in capsys.readouterr().out


def test_a_witness_verified_without_a_kept_verdict_says_so_on_stderr_once(tmp_path, monkeypatch, capsys):
    # A cold `crasp tasks` verifies for seconds: it must say what it does, and only while it does.
    import crasp.prediction as prediction
    from crasp.verdict_cache import FOLDER_VARIABLE

    monkeypatch.setenv(FOLDER_VARIABLE, str(tmp_path))
    checked = []
    monkeypatch.setattr(
        prediction, "check_witness", lambda *a, **k: checked.append(1) or SimpleNamespace(verified=True)
    )
    task = get_task("Majority")
    for _ in range(2):
        assert prediction._verified(task, majority, majority(task.symbols))
    assert checked == [1]
    assert (
        capsys.readouterr().err == "verifying a witness of Majority (Majority: at <sep>, the symbol whose count is "
        "at least every other count) ...\n"
    )
