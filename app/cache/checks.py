"""The input checks every cache backend applies (partition, vector, threshold, response,
ttl), and the similarity constants they share."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

# Stored vectors this close to a new one are the same prompt: the new answer replaces the old.
DUPLICATE_SIMILARITY = 0.999
# float32 dot products of identical unit vectors land a few ulps below 1.0; without this a
# threshold of 1.0 could never hit.
SIMILARITY_SLACK = 1e-6


def as_unit_vector(vector: Any) -> np.ndarray:
    try:
        v = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cache vector is not numeric: {exc}") from None
    if v.ndim == 2 and v.shape[0] == 1:  # a (1, d) row from a batch encoder call
        v = v[0]
    if v.ndim != 1 or v.shape[0] == 0:
        raise ValueError(f"cache vector must be one non-empty row, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("cache vector contains NaN or infinity")
    norm = float(np.linalg.norm(v))
    if norm == 0.0:
        raise ValueError("cache vector has zero length")
    # Callers send unit vectors; renormalising is cheap and keeps dot product == cosine anyway.
    return np.ascontiguousarray(v / norm, dtype=np.float32)


def check_partition(partition: Any) -> str:
    if not isinstance(partition, str) or not partition:
        raise ValueError("cache partition must be a non-empty string")
    return partition


def check_ttl(ttl_seconds: Any) -> int:
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, numbers.Integral) or ttl_seconds < 0:
        raise ValueError(f"ttl_seconds must be a non-negative integer, got {ttl_seconds!r}")
    return int(ttl_seconds)


def check_threshold(threshold: Any) -> float:
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, numbers.Real)
        or not 0.0 <= float(threshold) <= 1.0
    ):
        raise ValueError(f"similarity threshold must be between 0.0 and 1.0, got {threshold!r}")
    return float(threshold)


def check_response(response: Any) -> dict[str, Any]:
    if not isinstance(response, dict):
        raise ValueError(f"cached response must be a dict (a chat.completion), got {type(response).__name__}")
    return response
