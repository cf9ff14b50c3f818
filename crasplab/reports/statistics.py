"""What a report may conclude from its comparisons: family-wise control, paired tests and
cluster-aware intervals, one module for every report on pretrained models.

- Family-wise control: Holm's step-down adjustment over the comparisons a report draws its
  conclusions from (the report names that family). A comparison is "above 0 after correction"
  when its estimate is above 0 and its Holm-adjusted p-value is below ALPHA; Holm keeps the chance
  of any false "above 0" in the family at ALPHA or less, whatever the dependence between them.
- Independent samples (two tasks' prompts): the p-value that inverts Newcombe's hybrid score
  interval (reports.intervals), so "p < 0.05" and "the 95% interval excludes 0" always agree.
- Paired samples (the same prompts before and after fine-tuning, the same strings under two
  ablations): McNemar's exact test on the discordant pairs, and a bootstrap that resamples pairs.
- Clustered items (transitions within one paragraph): a bootstrap that resamples clusters whole.

Bootstraps are seeded, so a report rebuilds byte-identical from the same files.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

from crasplab.reports.intervals import difference_interval

ALPHA = 0.05
BOOTSTRAP_DRAWS = 10_000
BOOTSTRAP_SEED = 0
# A percentile bootstrap over fewer clusters than this draws from a handful of distinct values: its
# interval means nothing (one paragraph with one ambiguous transition gives [0, 0]).
MIN_CLUSTERS = 5
_LARGEST_Z = 40.0  # a two-sided p-value below 1e-300: as good as 0 for any family size


def normal_two_sided_p(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2))


def difference_p_value(correct_a: int, total_a: int, correct_b: int, total_b: int) -> float:
    """Two-sided p-value of p_a = p_b for independent samples: the smallest level at which
    Newcombe's interval excludes 0 (found by bisection on its z, which widens it monotonically)."""
    difference = correct_a / total_a - correct_b / total_b
    if difference == 0:
        return 1.0

    def excludes_zero(z: float) -> bool:
        _, low, high = difference_interval(correct_a, total_a, correct_b, total_b, z=z)
        return low > 0 or high < 0

    if excludes_zero(_LARGEST_Z):
        return normal_two_sided_p(_LARGEST_Z)
    low_z, high_z = 0.0, _LARGEST_Z
    for _ in range(60):
        middle = (low_z + high_z) / 2
        low_z, high_z = (middle, high_z) if excludes_zero(middle) else (low_z, middle)
    return normal_two_sided_p(high_z)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the k-th smallest is multiplied by
    (m - k + 1), made non-decreasing along that order and capped at 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """McNemar's exact two-sided p-value from the discordant pairs: under no change each is
    equally likely either way, so the smaller count is binomial(only_first + only_second, 1/2)."""
    discordant = only_first + only_second
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, k) for k in range(min(only_first, only_second) + 1)) / 2**discordant
    return min(1.0, 2 * tail)


def bootstrap(
    statistic: Callable[..., float],
    groups: Sequence[np.ndarray],
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> dict:
    """Percentile 95% interval and two-sided p-value of `statistic(*groups)`, each group's rows
    (a pair, or a whole cluster) resampled with replacement, independently of the other groups.

    p-value: twice the smaller share of draws on either side of 0 (at least 1 / draws), the
    bootstrap's sign test of the estimate."""
    rng = np.random.default_rng(seed)
    estimate = float(statistic(*groups))
    samples = np.empty(draws)
    for d in range(draws):
        samples[d] = statistic(*(group[rng.integers(0, len(group), len(group))] for group in groups))
    low, high = np.quantile(samples, [ALPHA / 2, 1 - ALPHA / 2])
    if estimate == 0 and not samples.any():
        p_value = 1.0
    else:
        p_value = min(1.0, max(1 / draws, 2 * min(np.mean(samples <= 0), np.mean(samples >= 0))))
    return dict(gap=estimate, low=float(low), high=float(high), p=float(p_value))


def paired_change(before: Sequence[bool], after: Sequence[bool], seed: int = BOOTSTRAP_SEED) -> dict:
    """The change in accuracy from `before` to `after` on the same items: the paired bootstrap's
    interval and McNemar's exact p-value (reported as p)."""
    pairs = np.column_stack([np.asarray(before, dtype=float), np.asarray(after, dtype=float)])
    if len(pairs) == 0:
        raise ValueError("paired_change: no pairs (before and after are empty)")
    entry = bootstrap(lambda p: p[:, 1].mean() - p[:, 0].mean(), [pairs], seed=seed)
    gained = int(np.sum((pairs[:, 1] == 1) & (pairs[:, 0] == 0)))
    lost = int(np.sum((pairs[:, 1] == 0) & (pairs[:, 0] == 1)))
    return dict(entry, p=mcnemar_exact(gained, lost), gained=gained, lost=lost)


def cluster_difference(clusters: Sequence[tuple[int, int, int, int]], seed: int = BOOTSTRAP_SEED) -> dict:
    """Difference of two pooled proportions whose items come in clusters: each cluster gives
    (correct_a, total_a, correct_b, total_b) and clusters are resampled whole (ratio of sums)."""
    table = np.asarray(clusters, dtype=float).reshape(-1, 4)

    def gap(rows: np.ndarray) -> float:
        sums = rows.sum(axis=0)
        if sums[1] == 0 or sums[3] == 0:
            return 0.0  # a draw without one kind of item says nothing about the gap
        return sums[0] / sums[1] - sums[2] / sums[3]

    sums = table.sum(axis=0)
    if sums[1] == 0 or sums[3] == 0:
        raise ValueError("cluster_difference: one of the two proportions has no items in any cluster")
    return bootstrap(gap, [table], seed=seed)


def paired_change_variance(gained: float, lost: float) -> float:
    """Per-prompt variance of one task's change in accuracy on the same prompts, from the shares of
    prompts that become right (`gained`) and wrong (`lost`)."""
    return gained + lost - (gained - lost) ** 2


def prompts_to_resolve(gap: float, variance: float, family: int = 1, power: float = 0.8) -> int:
    """Prompts per task so that an estimate whose variance is `variance` / n resolves a true `gap`:
    its two-sided interval at level ALPHA / family (Holm's strictest step) excludes 0 with
    probability `power` (normal approximation)."""
    if not (gap > 0 and variance > 0 and family >= 1 and 0 < power < 1):
        raise ValueError(
            f"prompts_to_resolve: gap {gap} and variance {variance} must be > 0, family {family} >= 1 "
            f"and power {power} in (0, 1)"
        )
    z = NormalDist().inv_cdf(1 - ALPHA / (2 * family)) + NormalDist().inv_cdf(power)
    return math.ceil(variance * (z / gap) ** 2)


def correct_family(entries: list[dict], estimate: str = "gap") -> None:
    """Adds to each entry (a dict with its estimate under `estimate` and its p-value under `p`) its
    Holm-adjusted p-value (`p_holm`) over the whole list, the family, and the corrected reading
    (`corrected`)."""
    for entry, adjusted in zip(entries, holm([entry["p"] for entry in entries])):
        entry["p_holm"] = adjusted
        entry["corrected"] = corrected_side(entry[estimate], adjusted)


def p_value_text(p: float) -> str:
    """A p-value as the reports print it."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def corrected_side(gap: float, adjusted_p: float) -> str:
    if adjusted_p < ALPHA and gap > 0:
        return "above 0 after correction"
    if adjusted_p < ALPHA and gap < 0:
        return "below 0 after correction"
    return "not resolved after correction"
