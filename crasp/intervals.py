"""95% Wilson score intervals for an accuracy: unlike the normal approximation, they behave at
0% and 100% (an interval of width 0 there would claim certainty from a finite sample). The
interpreter's discrimination check and the lab's reports both use this one."""

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
