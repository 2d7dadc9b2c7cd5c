"""The interval and the paired test behind the model cards' and benchmarks' comparisons."""

from __future__ import annotations

import pytest

from app.common.intervals import mcnemar, wilson


def test_mcnemar_exact_values() -> None:
    assert mcnemar(0, 0) == 1.0
    assert mcnemar(5, 5) == 1.0
    assert mcnemar(0, 6) == pytest.approx(2 / 64)  # both tails of Binomial(6, 1/2) at the edge
    assert mcnemar(11, 7) == pytest.approx(0.4807, abs=1e-4)
    assert mcnemar(95, 49) == pytest.approx(1.6e-4, rel=0.05)
    assert mcnemar(3, 9) == mcnemar(9, 3)


def test_wilson_contains_the_rate_and_narrows_with_n() -> None:
    lo, hi = wilson(194, 210)
    assert lo < 194 / 210 < hi
    assert (round(lo, 3), round(hi, 3)) == (0.880, 0.953)
    lo2, hi2 = wilson(1940, 2100)
    assert hi2 - lo2 < hi - lo
    assert wilson(0, 0) == (0.0, 1.0)
