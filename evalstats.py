"""evalstats.py — the numbers an eval reports, and how sure they are. Standard library only.

An eval scores each case in each arm; the question is whether a difference between arms is
real or the luck of which cases were drawn. So every mean comes with a 95 % bootstrap interval
(resampling the cases with replacement, the percentile interval of the resampled means), and
the comparison of two arms is **paired**: the same case's score in one arm minus the other's,
bootstrapped as one sample, so the spread between easy and hard cases cancels out instead of
hiding the difference. A difference whose interval excludes 0 is called significant.

The resampling is seeded (`seed`), so showing a recorded eval again gives the same intervals.
No model calls, no I/O.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95
"""The intervals' confidence level."""
RESAMPLES = 2000
"""Bootstrap resamples per interval: enough that the interval's ends move by well under a
percent of its width between seeds."""


@dataclass(frozen=True)
class Estimate:
    """A mean over `n` cases with its bootstrap interval [low, high]."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def significant(self) -> bool:
        """The interval excludes 0 (for a difference: the two arms really differ)."""
        return self.n > 1 and (self.low > 0 or self.high < 0)

    def to_json(self) -> dict[str, float | int | bool]:
        return {
            "mean": round(self.mean, 6),
            "low": round(self.low, 6),
            "high": round(self.high, 6),
            "n": self.n,
            "significant": self.significant,
        }


def mean(values: Sequence[float]) -> float:
    """The plain mean (0.0 for no values: an arm with no scored case shows as nothing else)."""
    return math.fsum(values) / len(values) if values else 0.0


def bootstrap(
    values: Sequence[float],
    *,
    seed: int | str = 0,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
) -> Estimate:
    """The mean of `values` and its percentile bootstrap interval at `level`.

    One value (or none) has no spread to resample: its interval is the value itself. Identical
    values give an interval of that value alone, whatever the seed.
    """
    data = [float(value) for value in values]
    n = len(data)
    centre = mean(data)
    if n < 2 or min(data) == max(data):
        return Estimate(centre, centre, centre, n)
    rng = random.Random(str(seed))
    draws = sorted(math.fsum(rng.choices(data, k=n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    low = draws[_index(tail, resamples)]
    high = draws[_index(1.0 - tail, resamples)]
    return Estimate(centre, min(low, centre), max(high, centre), n)


def _index(quantile: float, count: int) -> int:
    return min(count - 1, max(0, math.floor(quantile * count)))


def paired(
    treated: Sequence[float],
    baseline: Sequence[float],
    *,
    seed: int | str = 0,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
) -> Estimate:
    """The mean paired difference `treated[i] - baseline[i]` with its bootstrap interval.

    Both sequences are the same cases in the same order; a length mismatch is a bug."""
    if len(treated) != len(baseline):
        raise ValueError(f"paired scores need the same cases: {len(treated)} != {len(baseline)}")
    differences = [a - b for a, b in zip(treated, baseline, strict=True)]
    return bootstrap(differences, seed=seed, level=level, resamples=resamples)


def per_dollar(score: float, usd: float) -> float | None:
    """Score per dollar spent on a case; None when nothing was spent (no price to divide by)."""
    return score / usd if usd > 0 else None
