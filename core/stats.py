"""Confidence intervals for success rates, shared by the store (is a lesson hurting?) and the bench."""

import math

Z95 = 1.959964


def wilson(successes: int, total: int) -> tuple[float, float]:
    """95% interval for a success rate; honest at small n and at 0% / 100%, unlike p ± 2·se."""
    if total == 0:
        return 0.0, 0.0
    p = successes / total
    centre = (p + Z95**2 / (2 * total)) / (1 + Z95**2 / total)
    half = Z95 * math.sqrt(p * (1 - p) / total + Z95**2 / (4 * total**2)) / (1 + Z95**2 / total)
    return round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)
