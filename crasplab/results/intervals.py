"""95% intervals: Wilson score intervals for an accuracy, Newcombe's hybrid score interval (his
method 10, built from the two Wilson intervals) for a difference of two independent accuracies.
Both behave at 0% and 100%, where the normal approximation gives an interval of width 0."""

from __future__ import annotations

import math

Z_95 = 1.959963984540054


def wilson_interval(correct: int, total: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion; (0, 1) when nothing was observed."""
    if total == 0:
        return 0.0, 1.0
    p = correct / total
    denominator = 1 + z * z / total
    center = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    # The interval always contains p; clamping keeps rounding at p = 0 or 1 from saying otherwise.
    return min(p, max(0.0, center - half)), max(p, min(1.0, center + half))


def difference_interval(correct_a: int, total_a: int, correct_b: int, total_b: int) -> tuple[float, float, float]:
    """(p_a - p_b, low, high): Newcombe's hybrid score interval for independent samples."""
    p_a, p_b = correct_a / total_a, correct_b / total_b
    low_a, high_a = wilson_interval(correct_a, total_a)
    low_b, high_b = wilson_interval(correct_b, total_b)
    difference = p_a - p_b
    low = difference - math.sqrt((p_a - low_a) ** 2 + (high_b - p_b) ** 2)
    high = difference + math.sqrt((high_a - p_a) ** 2 + (p_b - low_b) ** 2)
    return difference, low, high
