"""Ablations whose controls are matched (crasplab.incontext.controls, experiments/mechanism.py): a
same-layers control removes as many heads of each ablated head's layer, a same-ranks control heads
near the ablated ones in their ranks under the other scores, neither removes an ablated head, the
seed fixes every draw; a run keeps each string's verdict, and its report tests every ablated score
on every task against no ablation and each control, paired on the same strings (McNemar)."""

import json
import shutil
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasplab.incontext.controls import RANK_NEIGHBOURS, matched_plan
from crasplab.models.analysis import SCORES, top_heads
from crasplab.records.files import write_jsonl
from crasplab.reports.statistics import mcnemar_exact
from experiments import mechanism
from tests.model_files import write_tiny_llama
from tests.test_mechanism import _flags


def rank_vectors(means: dict, score: str) -> dict:
    """(layer, head) -> its ranks under every score but `score`, 0 the highest (ties: earlier first)."""
    vectors = {}
    for name in (s for s in SCORES if s != score):
        for rank, head in enumerate(top_heads(means[name], means[name].size)):
            vectors.setdefault(head, []).append(rank)
    return {head: np.array(ranks) for head, ranks in vectors.items()}


@st.composite
def score_grids(draw) -> tuple:
    """(scores of every head, ablated scores, k grid with 1 in it, draws, seed) of a small model."""
    layers, heads, seed = draw(st.integers(1, 4)), draw(st.integers(2, 6)), draw(st.integers(0, 10**6))
    means = {name: np.random.default_rng([seed, i]).random((layers, heads)) for i, name in enumerate(SCORES)}
    ablate = draw(st.lists(st.sampled_from(SCORES), min_size=1, unique=True))
    k_grid = sorted({1, *draw(st.lists(st.integers(1, layers * heads // 2), max_size=2))})
    return means, ablate, k_grid, draw(st.integers(1, 3)), seed


@settings(max_examples=60, deadline=None)
@given(grid=score_grids())
def test_matched_controls_are_like_the_ablated_heads_and_never_among_them(grid):
    means, ablate, k_grid, draws, seed = grid
    layers, heads = means["induction"].shape
    sets = ["same-layers", "same-ranks"]
    plan = matched_plan(means, ablate, k_grid, sets, draws, seed)
    assert plan == matched_plan(means, ablate, k_grid, sets, draws, seed)  # the seed fixes the draws
    assert len(plan) == len(k_grid) * len(ablate) * len(sets) * draws
    for control in plan:
        ablated = top_heads(means[control.matches], control.k)
        per_layer = Counter(layer for layer, _ in ablated)
        if control.name == "same-layers":
            kept = sum(heads - n for n in per_layer.values())
            assert control.eligible == kept
            if control.heads is None:
                assert any(n > heads - n for n in per_layer.values())
                continue
            assert Counter(layer for layer, _ in control.heads) == per_layer
        else:
            assert control.eligible == layers * heads - control.k and control.heads is not None
            if control.k == 1:  # the one head drawn is among the RANK_NEIGHBOURS nearest in rank (ties count)
                ranks = rank_vectors(means, control.matches)
                (ablated_head,), (drawn,) = ablated, control.heads
                distances = sorted(
                    int(np.abs(ranks[c] - ranks[ablated_head]).sum()) for c in ranks if c != ablated_head
                )
                assert (
                    int(np.abs(ranks[drawn] - ranks[ablated_head]).sum())
                    <= distances[min(RANK_NEIGHBOURS, len(distances)) - 1]
                )
        assert len(set(control.heads)) == control.k and not set(control.heads) & set(ablated)


def test_the_draws_of_a_control_set_do_not_move_when_another_score_or_set_is_added():
    means = {name: np.random.default_rng(i).random((3, 5)) for i, name in enumerate(SCORES)}
    alone = matched_plan(means, ["induction"], [2], ["same-ranks"], 2, 7)
    more = matched_plan(means, ["previous_token", "induction"], [2], ["same-layers", "same-ranks"], 2, 7)
    assert all(control in more for control in alone)


@pytest.fixture(scope="module")
def matched_run(tmp_path_factory):
    """The tiny Llama's mechanism run with both matched sets (experiments/mechanism.py's defaults)."""
    out = tmp_path_factory.mktemp("runs") / "matched"
    mechanism.main(_flags(write_tiny_llama(tmp_path_factory.mktemp("model")), out))
    return out


def test_a_run_keeps_each_strings_verdict_and_draws_every_matched_control(matched_run):
    records = [json.loads(line) for line in (matched_run / "ablations.jsonl").read_text().splitlines()]
    for record in records:
        for cell in record["cells"]:
            assert len(cell["exact"]) == cell["total"] and cell["exact"].count("1") == cell["correct"]
    matched = Counter((r["ablation"], r["matches"]) for r in records if "matches" in r)
    assert set(matched) == {(name, score) for name in ("same-layers", "same-ranks") for score in SCORES[:4]}
    assert set(matched.values()) == {2 * 2 * 2}  # 2 tasks x 2 k x 2 draws


@pytest.fixture(scope="module")
def answered_run(matched_run, tmp_path_factory):
    """The tiny run with random verdicts in place of its own (the tiny model answers none), and its
    report rebuilt from them: judgements with something to lose."""
    out = tmp_path_factory.mktemp("runs") / "answered"
    shutil.copytree(matched_run, out)
    rng = np.random.default_rng(0)
    records = [json.loads(line) for line in (out / "ablations.jsonl").read_text().splitlines()]
    for record in records:
        for cell in record["cells"]:
            cell["exact"] = "".join(rng.choice(["0", "1"], cell["total"], p=[0.3, 0.7]))
            cell["correct"] = cell["exact"].count("1")
    write_jsonl(out / "ablations.jsonl", records)
    mechanism.main(["--report-only", str(out)])
    return out


@pytest.mark.parametrize("run", ["matched_run", "answered_run"])
def test_the_report_pairs_every_ablation_with_no_ablation_and_each_control(run, request):
    run = request.getfixturevalue(run)
    summary = json.loads((run / "summary.json").read_text())
    records = [json.loads(line) for line in (run / "ablations.jsonl").read_text().splitlines()]

    def verdicts(ablation, k, task, matches=None):
        chosen = [
            r for r in records if (r["ablation"], r["k"], r["task"], r.get("matches")) == (ablation, k, task, matches)
        ]
        return [
            np.array([v == "1" for c in r["cells"] for v in c["exact"]])
            for r in sorted(chosen, key=lambda r: r["draw"])
        ]

    judged = {(j["task"], j["score"], j["k"]) for j in summary["matched"]}
    testable = 0
    assert judged == {(task, score, k) for task in ("UF", "UR") for score in SCORES[:4] for k in (1, 2)}
    for j in summary["matched"]:
        (base,), (ablated,) = verdicts("none", 0, j["task"]), verdicts(j["score"], j["k"], j["task"])
        assert set(j["comparisons"]) == {"none", "random", "same-layers", "same-ranks"}
        none = j["comparisons"]["none"]
        assert none["change"] == pytest.approx(ablated.mean() - base.mean())
        assert none["change_low"] <= none["change"] <= none["change_high"]
        assert none["p"] == mcnemar_exact(int(np.sum(ablated & ~base)), int(np.sum(~ablated & base)))
        for name in ("same-layers", "same-ranks"):
            draws = verdicts(name, j["k"], j["task"], j["score"])
            assert j["comparisons"][name]["p"] == max(
                mcnemar_exact(int(np.sum(ablated & ~d)), int(np.sum(~ablated & d))) for d in draws
            )
            assert j["comparisons"][name]["change"] == pytest.approx(ablated.mean() - np.mean(draws))
        testable += base.any()
        if base.any():  # the smallest drop and the largest p-value of the comparisons, then Holm
            assert j["gap"] == max(c["change"] for c in j["comparisons"].values())
            assert j["p_holm"] >= j["p"] == max(c["p"] for c in j["comparisons"].values())
        else:
            assert "p" not in j
    assert testable == (0 if run.name == "matched" else len(judged))  # the tiny model answers none
    report = (run / "report.md").read_text()
    assert "## Every ablation against its controls (paired)" in report
    assert "| UR | first_occurrence (" in report and "| UF | previous_token (" in report
    assert summary["claims"] == [] and "removing induction heads drops UF" in report
