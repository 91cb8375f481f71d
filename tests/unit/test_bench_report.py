"""The benchmarks' statistics: the median's distribution-free interval and the paired ratio's verdicts."""

from __future__ import annotations

import math
import random

import pytest

from bench import report


def _coverage(n: int, rank: int) -> float:
    """P(k-th smallest <= true median <= k-th largest) for any continuous distribution: 1 - 2 P(Bin(n,1/2) < k)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(rank)) / 2**n


@pytest.mark.parametrize("n", range(1, 40))
def test_the_interval_is_the_widest_order_statistics_that_still_cover_95_percent(n):
    values = [float(v) for v in range(n)]
    interval = report.median_interval(values)
    if interval is None:
        assert _coverage(n, 1) < 0.95  # even min-max covers the median less often than 95%
        return
    rank = int(interval[0]) + 1
    assert interval == (values[rank - 1], values[n - rank])
    assert _coverage(n, rank) >= 0.95
    assert rank + 1 > n // 2 or _coverage(n, rank + 1) < 0.95  # one rank further in would not cover


def test_known_ranks_from_the_sign_test_table():
    # Binomial tables: n=6 -> ranks 1 and 6 (96.9%); n=9 -> 2 and 8 (96.1%); n=21 -> 6 and 16 (97.3%).
    assert report.median_interval(list(range(6))) == (0, 5)
    assert report.median_interval(list(range(9))) == (1, 7)
    assert report.median_interval(list(range(21))) == (5, 15)
    assert report.median_interval(list(range(5))) is None


def test_the_interval_covers_the_true_median_about_as_often_as_it_says():
    rng = random.Random(3)
    trials, covered = 2000, 0
    for _ in range(trials):
        values = [rng.lognormvariate(0, 0.3) for _ in range(15)]  # true median 1.0
        low, high = report.median_interval(values)
        covered += low <= 1.0 <= high
    assert 0.94 <= covered / trials <= 0.995


def test_a_paired_ratio_tells_the_sides_apart_only_when_the_interval_leaves_one_out():
    faster = report.paired_ratio([1.2, 1.3, 1.25, 1.1, 1.4, 1.22, 1.3, 1.15, 1.28], [1.0] * 9)
    assert faster["apart"] and faster["median_95"][0] > 1
    mixed = report.paired_ratio([0.9, 1.1, 1.0, 0.95, 1.05, 1.02, 0.98, 1.2, 0.8], [1.0] * 9)
    assert not mixed["apart"]
    few = report.paired_ratio([2.0, 2.1, 2.2], [1.0] * 3)
    assert few["median_95"] is None and not few["apart"]
    assert "leaves 1.0 out" in report.said("x", faster) and "holds 1.0" in report.said("x", mixed)
