"""The verdict protocol counts seeds, never means: a seed passes or fails a bin only when its
interval says so, and a task's verdict never depends on how an inconclusive seed is rounded."""

import dataclasses
import math

import pytest
from hypothesis import given, strategies as st

from crasp.prediction import predict
from crasp.tasks import CONTROLS
from crasplab.records.job_folder import BinEval, EvalRecord, JobRecords, JobResult
from crasplab.records.settings import SettingsError
from crasplab.train.config import TrainConfig
from crasplab.reports.protocol import protocol_markdown, recipe_markdown, recipe_text
from crasplab.verdicts.counting import apply_controls, next_seeds, protocol_rows, recipe_rows
from crasplab.verdicts.predictions import _discrimination, predictions_alongside
from crasplab.verdicts.rules import (
    Outcome,
    SeedAtBin,
    Verdict,
    VerdictRules,
    agrees,
    counted_agreement,
    judge_seed,
    seed_fits,
    task_verdict,
)

GENERALIZES, FAILS, MIXED, INCONCLUSIVE, TOO_FEW, NOT_RUN = (
    Verdict.GENERALIZES,
    Verdict.FAILS,
    Verdict.MIXED,
    Verdict.INCONCLUSIVE,
    Verdict.TOO_FEW,
    Verdict.NOT_RUN,
)
PROTOCOL = VerdictRules()


def seeds_with(outcomes):
    return [SeedAtBin(seed, 0, 1000, 0.0, 1.0, outcome) for seed, outcome in enumerate(outcomes)]


@pytest.mark.parametrize(
    "correct, outcome",
    [(1000, "pass"), (925, "pass"), (905, "inconclusive"), (890, "inconclusive"), (870, "fail"), (0, "fail")],
)
def test_a_seed_passes_or_fails_a_bin_only_when_its_wilson_interval_is_clear_of_the_threshold(correct, outcome):
    judged = judge_seed(PROTOCOL, 7, correct, 1000)
    assert judged.outcome == outcome
    assert judged.low <= correct / 1000 <= judged.high


def test_a_bin_below_the_protocols_size_and_a_fit_on_too_few_strings_are_refused():
    with pytest.raises(ValueError, match="999 strings is below the protocol's 1000"):
        judge_seed(PROTOCOL, 0, 999, 999)
    assert seed_fits(PROTOCOL, 500, 500) and not seed_fits(PROTOCOL, 499, 499) and not seed_fits(PROTOCOL, 999, 1000)


@pytest.mark.parametrize(
    "outcomes, verdict",
    [
        (["pass"] * 5, GENERALIZES),
        (["pass"] * 4 + ["fail"], GENERALIZES),
        (["pass"] * 3 + ["fail"] * 2, MIXED),
        (["pass"] + ["fail"] * 4, FAILS),
        (["pass"] * 3 + ["inconclusive", "fail"], INCONCLUSIVE),  # 3 of 5 (mixed) or 4 of 5 (generalizes)
        (["pass"] * 4 + ["inconclusive"], GENERALIZES),  # 4 or 5 of 5 either way
        (["inconclusive"] + ["fail"] * 4, FAILS),  # 0 or 1 of 5 either way
        (["pass"] * 4, TOO_FEW),
    ],
)
def test_the_task_verdict_counts_fitted_seeds(outcomes, verdict):
    assert task_verdict(PROTOCOL, seeds_with(outcomes)) == verdict


@given(st.lists(st.sampled_from(["pass", "fail", "inconclusive"]), min_size=5, max_size=12))
def test_an_inconclusive_seed_is_never_rounded_into_a_verdict(outcomes):
    verdict = task_verdict(PROTOCOL, seeds_with(outcomes))
    resolved = {
        task_verdict(PROTOCOL, seeds_with([o if o != "inconclusive" else choice for o in outcomes]))
        for choice in ("pass", "fail")
    }
    if verdict != INCONCLUSIVE:
        assert resolved == {verdict}
    else:
        assert len(resolved) > 1
    if "inconclusive" not in outcomes:
        passed = outcomes.count(Outcome.PASS)
        assert (verdict == GENERALIZES) == (passed >= 0.8 * len(outcomes))
        assert (verdict == FAILS) == (passed <= 0.2 * len(outcomes))


def test_agreement_needs_a_prediction_and_a_clear_verdict():
    assert agrees(True, GENERALIZES) and agrees(False, FAILS) and agrees(True, FAILS) is False
    assert agrees(None, GENERALIZES) is None and agrees(True, MIXED) is None and agrees(False, INCONCLUSIVE) is None


@pytest.mark.parametrize(
    "bad, says",
    [
        (dict(threshold=math.nan), "setting threshold = nan is not accepted; expected a finite number"),
        (dict(threshold=1.0), "setting threshold = 1.0 is not accepted; expected a number strictly between 0 and 1"),
        (dict(min_fitted_seeds=0), "setting min_fitted_seeds = 0 is not accepted; expected an integer of at least 1"),
        (dict(pass_fraction=0.2, fail_fraction=0.2), "VerdictRules: need 0 <= fail_fraction < pass_fraction <= 1"),
        (dict(z="2"), "setting z = '2' is not accepted; expected a finite number"),
    ],
)
def test_protocol_rules_are_validated_when_made(bad, says):
    with pytest.raises(SettingsError) as error:
        VerdictRules(**bad)
    assert says in str(error.value)


def evaluation(step, train_correct, test_correct, n_train=2000, n_test=1000):
    return EvalRecord(
        step, (BinEval(1, 20, train_correct / n_train, n_train), BinEval(21, 30, test_correct / n_test, n_test))
    )


def final(seed, train_correct, test_correct, finished=True, step=3000, earlier=(), task="UL", elapsed_s=60.0):
    """A job whose last evaluation has these counts, after the evaluations `earlier`."""
    last = evaluation(step, train_correct, test_correct)
    result = JobResult(task, seed, "ape", step, False, elapsed_s, last.bins) if finished else None
    return JobRecords(task, seed, (*earlier, last), (), result)


def test_next_seeds_resume_unfinished_jobs_then_replace_seeds_that_did_not_fit():
    candidates = list(range(1000, 1010))
    assert next_seeds(PROTOCOL, candidates, {}, ["UL"]) == {"UL": [1000, 1001, 1002, 1003, 1004]}
    finals = {1000 + s: final(1000 + s, 2000 if s < 3 else 1500, 990) for s in range(5)}
    assert next_seeds(PROTOCOL, candidates, {"UL": finals}, ["UL"]) == {"UL": [1005, 1006]}
    finals[1005] = final(1005, 2000, 990, finished=False)
    assert next_seeds(PROTOCOL, candidates, {"UL": finals}, ["UL"]) == {"UL": [1005]}
    enough = {1000 + s: final(1000 + s, 2000, 990) for s in range(5)}
    assert next_seeds(PROTOCOL, candidates, {"UL": enough}, ["UL"]) == {}


def test_protocol_rows_judge_seeds_and_leave_out_a_bin_that_cannot_discriminate():
    bimodal = {
        1000: final(1000, 2000, 996),
        1001: final(1001, 2000, 364),
        1002: final(1002, 2000, 999),
        1003: final(1003, 2000, 1000),
        1004: final(1004, 2000, 998),
        1005: final(1005, 1200, 0, step=16000, earlier=(evaluation(15500, 1000, 0),)),
    }
    failing = {1000 + s: final(1000 + s, 2000, 100) for s in range(5)}
    predictions = {
        "UB": dict(prediction=dict(label="yes", generalizes=True), discrimination=None),
        "NLLast": dict(
            prediction=dict(label="no", generalizes=False), discrimination=dict(checked=True, discriminates=[False])
        ),
    }
    rows = protocol_rows(
        PROTOCOL,
        {"UB": bimodal, "NLLast": failing},
        ["UB", "NLLast"],
        predictions,
        {"UB": 16000, "NLLast": 16000},
        {"UB": 2, "NLLast": 2},
    )
    ub, nllast = rows
    assert ub["fitted"] == [1000, 1001, 1002, 1003, 1004] and ub["still_improving"] == [1005]
    assert ub["bins"][0]["verdict"] == GENERALIZES and ub["bins"][0]["agrees"] is True  # 4 of 5 pass
    assert nllast["bins"][0]["verdict"] == FAILS and nllast["bins"][0]["agrees"] is None  # a window program passes


def test_the_recipe_benchmark_reads_the_training_bin_only():
    first_exact = evaluation(1000, 2000, 0)  # first exact on the training bin
    records = [
        final(1000, 2000, 1000, step=1500, earlier=(evaluation(500, 1200, 0), first_exact), task="UR", elapsed_s=61.26),
        # exact once, then lost: fitted at some evaluation
        final(1001, 1990, 1000, step=16000, earlier=(evaluation(500, 2000, 1000),), task="UR", elapsed_s=600.0),
        # a perfect test bin never makes a seed fit
        final(1002, 100, 1000, step=16000, task="UR", elapsed_s=590.0),
        final(1003, 2000, 0, step=500, finished=False, task="UR"),  # still running: not counted
    ]
    (row,) = recipe_rows(PROTOCOL, records, ["UR"])
    assert row["seeds"] == [1000, 1001, 1002]
    assert row["steps_to_fit"] == {1000: 1000, 1001: 500}
    assert row["steps_at_stop"] == {1000: 1500, 1001: 16000, 1002: 16000}
    table = recipe_markdown([row])
    assert "| UR | 3 | 2 of 3 | 750 (500-1000) | 16000 (1500-16000) | 590 (61.3-600) |" in table


RECIPES = st.fixed_dictionaries(
    dict(
        learning_rate=st.sampled_from([1e-4, 3e-4, 1e-3]),
        warmup_steps=st.sampled_from([0, 200, 1000]),
        schedule=st.sampled_from(["linear", "constant"]),
        max_steps=st.sampled_from([8000, 16000]),
        max_grad_norm=st.sampled_from([0.0, 0.5, 1.0]),
        stop_after_perfect_evals=st.sampled_from([0, 1, 2]),
        eval_every=st.sampled_from([250, 500]),
        batch_size=st.sampled_from([32, 64]),
        weight_decay=st.sampled_from([0.0, 0.01]),
    )
)


@given(RECIPES, RECIPES)
def test_two_recipes_read_alike_only_when_they_are_the_same(first, second):
    """A table is comparable only with tables of its own recipe: the text printed above it must tell
    every two recipes apart, and a run from before clipping existed reads as not clipping."""
    assert (recipe_text(TrainConfig(**first)) == recipe_text(TrainConfig(**second))) == (first == second)
    legacy = {name: value for name, value in TrainConfig(**first).to_dict().items() if name != "max_grad_norm"}
    assert recipe_text(TrainConfig.from_dict(legacy)) == recipe_text(TrainConfig(**dict(first, max_grad_norm=0.0)))


@pytest.mark.parametrize("task, control", sorted(CONTROLS.items()))
def test_a_task_counts_only_where_its_control_at_the_same_depth_generalizes(task, control):
    """One rule for every pair (the Last tasks and their First twins, copying with repeats and
    unique copying): a bin counts where the control, trained at the same depth, generalizes; a
    control that did not run at that depth counts as one that does not."""

    def rows_with(control_test_correct, control_layers=2):
        finals = {
            control: {2000 + s: final(2000 + s, 2000, control_test_correct) for s in range(5)},
            task: {2000 + s: final(2000 + s, 2000, 100) for s in range(5)},
        }
        predictions = {
            control: dict(prediction=dict(label="yes", generalizes=True), discrimination=None),
            task: dict(
                prediction=dict(label="no", generalizes=False), discrimination=dict(checked=True, discriminates=[True])
            ),
        }
        return protocol_rows(
            PROTOCOL,
            finals,
            [control, task],
            predictions,
            {control: 8000, task: 8000},
            {control: control_layers, task: 2},
        )

    first, last = rows_with(control_test_correct=1000)
    assert last["bins"][0]["control"] == dict(task=control, layers=2, verdict=GENERALIZES)
    assert last["bins"][0]["verdict"] == FAILS and last["bins"][0]["agrees"] is True
    first, last = rows_with(control_test_correct=700)  # the control fails the bin too
    assert first["bins"][0]["verdict"] == FAILS and first["bins"][0]["agrees"] is False
    assert last["bins"][0]["control"]["verdict"] == FAILS and last["bins"][0]["agrees"] is None
    assert f"its control {control} at 2 layers fails: not counted" in protocol_markdown(PROTOCOL, [first, last])
    first, last = rows_with(control_test_correct=1000, control_layers=4)  # the control generalizes, deeper
    assert (
        last["bins"][0]["control"] == dict(task=control, layers=2, verdict=NOT_RUN)
        and last["bins"][0]["agrees"] is None
    )


@given(
    verdict=st.sampled_from([GENERALIZES, FAILS, MIXED, INCONCLUSIVE, TOO_FEW, None]),
    generalizes=st.sampled_from([True, False, None]),
    discriminates=st.sampled_from([True, False, None]),
)
def test_a_verdict_counts_only_with_its_control_generalizing(verdict, generalizes, discriminates):
    """Whatever the control's verdict other than "generalizes" (None: it did not run), the bin of
    the task it controls is not counted; with it generalizing, the bin counts as it would alone."""
    row = dict(task="NF", layers=2, generalizes=generalizes, bins=[dict(lo=21, hi=30, verdict=FAILS)])
    row["bins"][0]["discriminates"] = discriminates
    row["bins"][0]["agrees"] = alone = counted_agreement(generalizes, FAILS, discriminates)
    rows = {("NF", 2): row}
    if verdict is not None:
        rows[("UF", 2)] = dict(task="UF", layers=2, bins=[dict(lo=21, hi=30, verdict=verdict)])
    apply_controls(rows)
    assert row["bins"][0]["agrees"] == (alone if verdict == GENERALIZES else None)


def test_discrimination_checks_made_beside_the_training_are_those_made_here():
    """predictions_alongside yields at once, while its checks run in helper processes, and what it
    then returns is what checking in this process gives (a task predicted to generalize gets none)."""
    tasks, lengths, bins = ("NLFirst", "NLLast", "NF"), (1, 6), ((1, 6), (7, 11))
    overrides = {task: dict(alphabet_size=4) for task in tasks}
    arguments = ("ape", tasks, dict.fromkeys(tasks, lengths), dict.fromkeys(tasks, bins), overrides, 0.9, 0.0)
    with predictions_alongside(*arguments) as predictions:
        made = predictions()
    assert made == predictions_made_here(*arguments)
    assert made["tasks"]["NLFirst"]["discrimination"] is None
    assert made["tasks"]["NLLast"]["discrimination"]["checked"]


def predictions_made_here(pe, tasks, lengths, bins, overrides, threshold, search_seconds) -> dict:
    def check(task):
        if predict(task, pe).generalizes is not False:
            return None
        return _discrimination(task, lengths[task], bins[task][1:], overrides[task], threshold, search_seconds)

    made = {task: dict(prediction=dataclasses.asdict(predict(task, pe)), discrimination=check(task)) for task in tasks}
    return dict(pe=pe, tasks=made)
