"""The replays wing as the Ingress holds it: what the replay, outcome and classification-metrics
routes read and write, composed once per Ingress replica (app/api/parts.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.observability.metrics import MetricsRecorder
from app.replays.accuracy import ClassificationAccuracy
from app.replays.classification_metrics import MetricsSource
from app.replays.replays import OutcomeLog, OutcomeStore, ReplaySource


@dataclass
class ReplayParts:
    replays: ReplaySource | None = None  # None: the replay routes answer 503
    outcomes: OutcomeLog = field(default_factory=OutcomeStore)
    metrics: MetricsSource | None = None  # every replica's metrics summed (None: classification-metrics 503)
    # svc_router_classification_accuracy from outcomes, in this replica's metrics (none: not kept)
    accuracy: ClassificationAccuracy = field(default_factory=lambda: ClassificationAccuracy(None))


def replay_parts(
    replays: ReplaySource | None = None,
    outcomes: OutcomeLog | None = None,
    metrics: MetricsSource | None = None,
    recorder: MetricsRecorder | None = None,
) -> ReplayParts:
    """`outcomes`: where submissions go (None: this replica's memory); `recorder`: the replica's
    metrics, where outcomes set the classification accuracy."""
    return ReplayParts(
        replays,
        outcomes if outcomes is not None else OutcomeStore(),
        metrics,
        ClassificationAccuracy(recorder),
    )
