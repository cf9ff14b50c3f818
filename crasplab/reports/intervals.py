"""Intervals (95% unless asked) for a difference of two independent accuracies: Newcombe's hybrid score interval
(his method 10), built from the two Wilson intervals (crasp.intervals). It behaves at 0% and 100%,
where the normal approximation gives an interval of width 0."""

from __future__ import annotations

import math

from crasp.intervals import Z_95, wilson_interval


def difference_interval(
    correct_a: int, total_a: int, correct_b: int, total_b: int, z: float = Z_95
) -> tuple[float, float, float]:
    """(p_a - p_b, low, high): Newcombe's hybrid score interval for independent samples; `z` sets
    the level (reports.statistics inverts it for a p-value)."""
    p_a, p_b = correct_a / total_a, correct_b / total_b
    low_a, high_a = wilson_interval(correct_a, total_a, z)
    low_b, high_b = wilson_interval(correct_b, total_b, z)
    difference = p_a - p_b
    low = difference - math.sqrt((p_a - low_a) ** 2 + (high_b - p_b) ** 2)
    high = difference + math.sqrt((high_a - p_a) ** 2 + (p_b - low_b) ** 2)
    return difference, low, high
