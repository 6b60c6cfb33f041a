"""The statistics an eval reports, held for all inputs (hypothesis): bootstrap intervals that
shrink with more cases, a paired difference of identical arms that is exactly 0, and intervals
that hold the true mean of a known distribution about 95 % of the time."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgod import evalstats

scores = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=2, max_size=40)


@given(scores, st.integers(min_value=0, max_value=10**6))
def test_an_interval_holds_its_mean_and_stays_within_the_values(
    values: list[float], seed: int
) -> None:
    estimate = evalstats.bootstrap(values, seed=seed, resamples=300)
    assert min(values) - 1e-12 <= estimate.low <= estimate.mean <= estimate.high
    assert estimate.high <= max(values) + 1e-12
    assert estimate.n == len(values)


@settings(deadline=None)
@given(
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=5, max_size=30).filter(
        lambda values: max(values) - min(values) > 0.05
    ),
    st.integers(min_value=0, max_value=10**6),
)
def test_intervals_shrink_as_the_cases_grow(values: list[float], seed: int) -> None:
    """The same scores over four times the cases: the interval is about half as wide."""
    few = evalstats.bootstrap(values, seed=seed)
    many = evalstats.bootstrap(values * 4, seed=seed)
    assert many.high - many.low < few.high - few.low
    assert many.mean == pytest.approx(few.mean)


@given(scores, st.integers(min_value=0, max_value=10**6))
def test_a_paired_difference_of_identical_arms_is_zero(values: list[float], seed: int) -> None:
    difference = evalstats.paired(values, list(values), seed=seed)
    assert (difference.mean, difference.low, difference.high) == (0.0, 0.0, 0.0)
    assert not difference.significant


@given(scores, st.floats(min_value=0.01, max_value=0.5))
def test_pairing_cancels_what_the_cases_share(values: list[float], lift: float) -> None:
    """An arm that scores every case exactly `lift` above the baseline differs by `lift`, with
    no spread, however unlike each other the cases are."""
    treated = [value + lift for value in values]
    difference = evalstats.paired(treated, values, seed=1)
    assert difference.mean == pytest.approx(lift)
    assert difference.low == pytest.approx(lift) and difference.high == pytest.approx(lift)
    assert difference.significant


def test_paired_scores_must_be_the_same_cases() -> None:
    with pytest.raises(ValueError, match="same cases"):
        evalstats.paired([1.0, 0.0], [1.0])


@settings(deadline=None, max_examples=6, derandomize=True)
@given(
    st.floats(min_value=0.2, max_value=0.8),
    st.floats(min_value=0.05, max_value=0.3),
    st.integers(min_value=0, max_value=10**6),
)
def test_an_interval_holds_the_true_mean_about_95_percent_of_the_time(
    centre: float, spread: float, seed: int
) -> None:
    """Samples of 40 drawn from a normal distribution of known mean: the share of intervals
    that hold it is close to 95 % (200 samples: a standard error of 1.5 points)."""
    rng = random.Random(seed)
    trials, held = 200, 0
    for trial in range(trials):
        sample = [rng.gauss(centre, spread) for _ in range(40)]
        estimate = evalstats.bootstrap(sample, seed=f"{seed}:{trial}", resamples=500)
        held += estimate.low <= centre <= estimate.high
    assert 0.88 <= held / trials <= 0.99


def test_one_case_has_no_spread_and_no_case_has_no_mean() -> None:
    assert evalstats.bootstrap([0.7]) == evalstats.Estimate(0.7, 0.7, 0.7, 1)
    assert evalstats.bootstrap([]) == evalstats.Estimate(0.0, 0.0, 0.0, 0)
    assert evalstats.per_dollar(0.5, 0.0) is None
    assert evalstats.per_dollar(0.5, 0.25) == 2.0


def test_the_same_seed_gives_the_same_interval() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.5]
    assert evalstats.bootstrap(values, seed="ab12cd34:factory") == evalstats.bootstrap(
        values, seed="ab12cd34:factory"
    )
