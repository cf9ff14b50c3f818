"""crasplab.reports.statistics (family-wise control, paired tests, cluster bootstrap) and
crasplab.reports.floors (trivial strategies on the in-context prompts)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crasplab.incontext.formal_prompts import cell_items
from crasplab.reports import floors, statistics
from crasplab.reports.intervals import difference_interval


def test_holm_matches_a_worked_example():
    # Sorted 0.01, 0.03, 0.04 -> 3 x 0.01, 2 x 0.03, max(0.06, 1 x 0.04): the step-down keeps order.
    assert statistics.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_holm_lies_between_the_raw_p_values_and_bonferroni(p_values):
    adjusted = statistics.holm(p_values)
    for p, q in zip(p_values, adjusted):
        assert p <= q <= min(1.0, len(p_values) * p) + 1e-12
    # A smaller raw p-value never gets a larger adjusted one.
    for i in range(len(p_values)):
        for j in range(len(p_values)):
            if p_values[i] < p_values[j]:
                assert adjusted[i] <= adjusted[j]


@settings(max_examples=60, deadline=None)
@given(n_a=st.integers(1, 120), n_b=st.integers(1, 120), data=st.data())
def test_the_p_value_agrees_with_newcombes_interval(n_a, n_b, data):
    k_a, k_b = data.draw(st.integers(0, n_a)), data.draw(st.integers(0, n_b))
    p = statistics.difference_p_value(k_a, n_a, k_b, n_b)
    _, low, high = difference_interval(k_a, n_a, k_b, n_b)
    excludes = low > 0 or high < 0
    # Equal up to the bisection's precision, where the interval's end sits on 0.
    if abs(p - 0.05) > 1e-6:
        assert excludes == (p < 0.05)


def test_mcnemar_exact_is_the_binomial_tail_of_the_discordant_pairs():
    assert statistics.mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert statistics.mcnemar_exact(2, 8) == pytest.approx(2 * sum(math.comb(10, k) for k in range(3)) / 1024)
    assert statistics.mcnemar_exact(5, 5) == 1.0 and statistics.mcnemar_exact(0, 0) == 1.0
    assert statistics.mcnemar_exact(1, 9) == statistics.mcnemar_exact(9, 1)


def test_paired_change_counts_what_was_gained_and_lost_and_rebuilds_identically():
    before = [0] * 10 + [1] * 10
    after = [1] * 9 + [0] + [1] * 10
    first, second = statistics.paired_change(before, after), statistics.paired_change(before, after)
    assert first == second  # seeded: a report rebuilds byte-identical
    assert (first["gained"], first["lost"]) == (9, 0) and first["gap"] == pytest.approx(0.45)
    assert first["low"] <= first["gap"] <= first["high"] and first["low"] > 0
    assert first["p"] == pytest.approx(statistics.mcnemar_exact(9, 0))


def test_a_paired_interval_is_narrower_than_the_unpaired_one_when_items_agree():
    # Every item that was right stays right, and 6 of 40 more become right: the pairs carry the
    # information that Newcombe's interval for independent samples throws away.
    before = [1] * 20 + [0] * 20
    after = [1] * 26 + [0] * 14
    paired = statistics.paired_change(before, after)
    _, low, high = difference_interval(26, 40, 20, 40)
    assert paired["high"] - paired["low"] < high - low and paired["low"] > 0 > low


def test_cluster_bootstrap_does_not_count_a_clusters_items_as_independent():
    rng = np.random.default_rng(1)
    clusters = [(int(rng.integers(5, 10)), 10, int(rng.integers(2, 8)), 10) for _ in range(12)]
    single = statistics.cluster_difference(clusters)
    # Ten times the items in every cluster, each cluster's proportions unchanged: a bootstrap over
    # items would narrow tenfold in variance; one over clusters is exactly the same.
    scaled = statistics.cluster_difference([tuple(10 * c for c in cluster) for cluster in clusters])
    assert scaled == pytest.approx(single)
    assert single["low"] <= single["gap"] <= single["high"]


def test_cluster_difference_refuses_a_proportion_without_items():
    with pytest.raises(ValueError, match="no items"):
        statistics.cluster_difference([(1, 2, 0, 0), (0, 3, 0, 0)])


@pytest.mark.parametrize(
    "gap, p, reading",
    [
        (0.2, 0.01, "above 0 after correction"),
        (-0.2, 0.01, "below 0 after correction"),
        (0.2, 0.2, "not resolved after correction"),
    ],
)
def test_corrected_side(gap, p, reading):
    assert statistics.corrected_side(gap, p) == reading


@settings(max_examples=20, deadline=None)
@given(
    code=st.sampled_from(["NRFirst", "NRLast", "NLFirst", "NLLast"]), length=st.integers(6, 40), seed=st.integers(0, 99)
)
def test_a_random_occurrence_in_the_tasks_direction_is_right_at_least_once_in_so_many(code, length, seed):
    direction = "after an occurrence" if code.startswith("NR") else "before an occurrence"
    for item in cell_items(code, length, 5, seed, 4, 4):
        tokens_part, query_part = item.prompt.rsplit("\n", 1)[-1].rsplit(" | ", 1)
        occurrences = tokens_part.split().count(query_part.rstrip(":").strip())
        strategies = floors.strategy_accuracies(code, item.prompt, item.expected)
        assert strategies[direction] >= 1 / occurrences
        assert 0 < strategies["random token"] <= 1


def test_floors_match_a_simulation_of_the_strategies():
    items = cell_items("NRLast", 20, 40, 3, 4, 4)
    rng = np.random.default_rng(0)
    hits = 0
    draws = 200
    for item in items:
        tokens_part, query_part = item.prompt.rsplit("\n", 1)[-1].rsplit(" | ", 1)
        tokens, query = tokens_part.split(), query_part.rstrip(":").strip()
        occurrences = [i for i, token in enumerate(tokens) if token == query]
        for _ in range(draws):
            i = occurrences[rng.integers(len(occurrences))]
            hits += i + 1 < len(tokens) and tokens[i + 1] == item.expected
    exact = floors.task_floor("NRLast", items)
    assert exact["strategies"]["after an occurrence"] == pytest.approx(hits / (draws * len(items)), abs=0.02)


def test_a_unique_tasks_answer_is_not_its_floor():
    records = cell_items("UR", 10, 20, 0, 4, 4)
    assert "after an occurrence" not in floors.task_floor("UR", records)["strategies"]
    copying = cell_items("UF", 3, 20, 0, 5, 5)
    # Three distinct letters of a length-3 input, each drawn with probability 1/3.
    assert floors.task_floor("UF", copying)["accuracy"] == pytest.approx(1 / 27)


def test_paired_change_variance_is_the_variance_of_the_per_prompt_differences():
    differences = np.array([1] * 8 + [-1] * 2 + [0] * 10)  # 8 gained, 2 lost of 20
    assert statistics.paired_change_variance(8 / 20, 2 / 20) == pytest.approx(differences.var())


@given(gap=st.floats(0.05, 0.5), variance=st.floats(0.05, 2), family=st.integers(1, 20))
def test_prompts_to_resolve_is_the_smallest_n_with_the_asked_power(gap, variance, family):
    def power(n):
        z = statistics.NormalDist().inv_cdf(1 - statistics.ALPHA / (2 * family))
        return statistics.NormalDist().cdf(gap / math.sqrt(variance / n) - z)

    n = statistics.prompts_to_resolve(gap, variance, family)
    assert power(n) >= 0.8 - 1e-9 and (n == 1 or power(n - 1) < 0.8 + 1e-9)


def test_the_power_preset_holds_the_prompts_a_gap_of_0_2_needs():
    from crasplab.incontext.finetune_config import PRESETS

    config = PRESETS["power"].config
    beyond = sum(hi - lo + 1 for lo, hi in config.test_bins if lo > config.train_lengths[1])
    # Worst-case variance of a difference of two independent accuracies (0.25 + 0.25), Holm over three gaps.
    assert beyond * config.examples_per_length >= statistics.prompts_to_resolve(0.2, 0.5, family=3)
