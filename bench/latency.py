"""The one percentile definition every benchmark reports (numpy's linear interpolation),
so figures from different scripts compare."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def percentile(samples: Sequence[float], q: float, scale: float = 1.0) -> float:
    """The q-th percentile (0-100) of `samples`, times `scale` (1000: seconds -> ms)."""
    return float(np.percentile(np.asarray(samples, dtype=np.float64), q)) * scale


def p50_p99_ms(samples: Sequence[float], digits: int = 4) -> dict[str, float]:
    """{p50_ms, p99_ms} of samples in seconds, rounded to `digits`."""
    return {
        "p50_ms": round(percentile(samples, 50, 1000), digits),
        "p99_ms": round(percentile(samples, 99, 1000), digits),
    }
