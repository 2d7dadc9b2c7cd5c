"""svc_router_classification_accuracy{category} from submitted outcomes (docs/envoy.md "Metrics").

An outcome (POST /api/v1/observability/outcomes) names the replay record of a routed
request; its verdict or score says whether the routing was right (`outcome_score`: 1
correct, 0 wrong, 0.5 a tie; other words say nothing and are not counted). The request's
category is the one its metrics carried (`request_category`: first matched domain signal,
else the decision, else `none`), so the gauge lines up with svc_router_requests_total.

The gauge is the mean score per category over the outcomes this Ingress replica took
since it started; replicas combine by max (MetricDef.aggregate) — one Ingress is usual,
and a sum of shares would exceed 1. An idempotent replay of an outcome counts once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from app.observability.metrics import MetricsRecorder
from app.replays.replays import OutcomeIn, outcome_score

METRIC = "svc_router_classification_accuracy"


def record_category(record: Mapping[str, Any]) -> str:
    """A replay record's category, as app/pipeline/metrics.py's request_category labels it."""
    for signal in record.get("matched_signals") or ():
        kind, _, name = str(signal).partition(":")
        if kind == "domain" and name:
            return name
    return str(record.get("decision") or "none")


class ClassificationAccuracy:
    """Per-category running mean of outcome scores, written to `recorder`'s gauge."""

    def __init__(self, recorder: MetricsRecorder | None) -> None:
        self.recorder = recorder
        self._tally: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def record(self, record: Mapping[str, Any], outcome: OutcomeIn) -> float | None:
        """Count one outcome; the category's new accuracy, or None when it says nothing."""
        score = outcome_score(outcome.verdict, outcome.score)
        if score is None:
            return None
        category = record_category(record)
        with self._lock:
            total, count = self._tally.get(category, (0.0, 0))
            total, count = total + score, count + 1
            self._tally[category] = (total, count)
        accuracy = total / count
        if self.recorder is not None:
            self.recorder.set(METRIC, accuracy, category=category)
        return accuracy
