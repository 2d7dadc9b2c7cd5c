"""Replay and outcome routes: replay records and aggregates (observability.read; content needs
data.read), outcome submission (learning.ingest; an outcome of an `elo` decision also updates
its ratings) and the classification metrics (observability.read;
app/replays/classification_metrics.py). The audit log's route is management's
(app/management/routes/observability.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse

from app.common.api_docs import MAX_SEQUENCE, json_body
from app.common.mgmt_errors import MgmtError, feature_disabled, not_found, unavailable
from app.management.routes.common import (
    Registrar,
    Responses,
    json_response,
    maybe_await,
    mgmt_errors,
    principal_of,
    read_model,
    record_mutation,
)
from app.management.service import Management
from app.pipeline.learning.elo_feedback import rate_outcome
from app.pipeline.learning.ratings import RatingStore
from app.replays.classification_metrics import ClassificationMetrics, MetricsReport, classification_metrics
from app.replays.parts import ReplayParts
from app.replays.replay_views import (
    DEFAULT_RECIPE,
    DatasetManifest,
    JudgeTaskPage,
    Trajectory,
    dataset_manifest,
    judge_tasks,
    trajectory,
)
from app.replays.replays import (
    IdempotencyConflict,
    OutcomeIn,
    OutcomePage,
    OutcomeRecord,
    ReplayAggregate,
    ReplayPage,
    ReplaySource,
    redact_record,
)

MAX_IDEMPOTENCY_KEY = 255
# Every route over the summed metrics (read_metrics).
METRICS_RESPONSES: Responses = mgmt_errors(
    {
        404: "FEATURE_DISABLED: metrics are not collected",
        503: "SERVICE_UNAVAILABLE: the metrics cannot be read now",
    }
)
REPLAYS_OFF: Responses = mgmt_errors({404: "FEATURE_DISABLED: replay records are not kept in this process"})


def replay_routes(mgmt: Management, parts: ReplayParts, ratings: RatingStore | None) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def metrics() -> ClassificationMetrics:
        return classification_metrics(await read_metrics(parts))

    add(
        "/api/v1/observability/classification-metrics",
        metrics,
        "GET",
        "observability.read",
        response_model=ClassificationMetrics,
        responses=METRICS_RESPONSES,
        summary="classification counters and timing, summed over every replica",
    )

    async def list_replays(
        request: Request,
        limit: int = Query(100, ge=1, le=1000),
        after_sequence: int = Query(0, ge=0, le=MAX_SEQUENCE),
        decision: str | None = Query(None, max_length=256),
        model: str | None = Query(None, max_length=256),
    ) -> JSONResponse:
        page: ReplayPage = await maybe_await(
            replays_of(parts).list(limit=limit, after_sequence=after_sequence, decision=decision, model=model)
        )
        principal = principal_of(request)
        page.records = [
            redact_record(r, data=principal.can("data.read"), secrets=principal.can("secret_view"))
            for r in page.records
        ]
        return json_response(page)

    async def aggregate(
        decision: str | None = Query(None, max_length=256), model: str | None = Query(None, max_length=256)
    ) -> ReplayAggregate:
        result: ReplayAggregate = await maybe_await(
            replays_of(parts).aggregate(decision=decision, model=model)
        )
        return result

    async def get_replay(request: Request, replay_id: str) -> JSONResponse:
        record = await maybe_await(replays_of(parts).get(replay_id))
        if record is None:
            raise not_found(f"no replay record {replay_id!r}")
        principal = principal_of(request)
        return JSONResponse(
            redact_record(record, data=principal.can("data.read"), secrets=principal.can("secret_view"))
        )

    async def list_outcomes(
        limit: int = Query(1000, ge=1, le=10_000), replay_id: str | None = Query(None, max_length=256)
    ) -> OutcomePage:
        recorded = await asyncio.to_thread(parts.outcomes.list)  # a Redis store reads over the network
        matching = [o for o in recorded if replay_id is None or o.replay_id == replay_id]
        return OutcomePage(outcomes=matching[-limit:], total=len(matching))

    async def outcomes(
        request: Request,
        idempotency_key: str | None = Header(None, min_length=1, max_length=MAX_IDEMPOTENCY_KEY),
    ) -> JSONResponse:
        return await submit_outcome(mgmt, parts, ratings, request, idempotency_key)

    add(
        "/api/v1/observability/replays",
        list_replays,
        "GET",
        "observability.read",
        "sensitive",
        response_model=ReplayPage,
        responses=REPLAYS_OFF,
        summary="replay records",
    )
    add(
        "/api/v1/observability/replays/aggregate",
        aggregate,
        "GET",
        "observability.read",
        response_model=ReplayAggregate,
        responses=REPLAYS_OFF,
        summary="routing and cost aggregates",
    )
    add_replay_views(add, parts)  # before /replays/{replay_id}, which would swallow them
    add(
        "/api/v1/observability/replays/{replay_id}",
        get_replay,
        "GET",
        "observability.read",
        "sensitive",
        responses=mgmt_errors(
            {404: "NOT_FOUND: no such replay record; FEATURE_DISABLED: replay records are not kept"}
        ),
        summary="one replay record",
    )
    add(
        "/api/v1/observability/outcomes",
        list_outcomes,
        "GET",
        "observability.read",
        "sensitive",
        response_model=OutcomePage,
        summary="submitted outcomes, oldest first (the newest `limit`); what recipe learning reads",
    )
    add(
        "/api/v1/observability/outcomes",
        outcomes,
        "POST",
        "learning.ingest",
        "sensitive",
        response_model=OutcomeRecord,
        summary="submit an outcome for a replay",
        responses={
            200: {
                "description": "an Idempotency-Key replay: the outcome it recorded",
                "model": OutcomeRecord,
            },
            201: {"description": "recorded", "model": OutcomeRecord},
            **mgmt_errors(
                {
                    404: "NOT_FOUND: no replay record with that replay_id",
                    409: "IDEMPOTENCY_CONFLICT: the Idempotency-Key was used with another body",
                }
            ),
        },
        openapi_extra=json_body(OutcomeIn),
    )
    return router


def add_replay_views(add: Any, parts: ReplayParts) -> None:
    """Trajectory, shadow dataset and judge tasks (app/replays/replay_views.py)."""

    async def get_trajectory(
        session_id: str = Query(..., min_length=1, max_length=256),
        recipe: str = Query(DEFAULT_RECIPE, min_length=1, max_length=128),
        limit: int = Query(100, ge=1, le=1000),
        after_sequence: int = Query(0, ge=0, le=MAX_SEQUENCE),
    ) -> Trajectory:
        return await trajectory(replays_of(parts), parts.outcomes, session_id, recipe, limit, after_sequence)

    async def get_dataset(
        recipe: str = Query(DEFAULT_RECIPE, min_length=1, max_length=128),
        limit: int = Query(100, ge=1, le=1000),
        after_sequence: int = Query(0, ge=0, le=MAX_SEQUENCE),
    ) -> DatasetManifest:
        return await dataset_manifest(replays_of(parts), recipe, after_sequence, limit)

    async def get_judge_tasks(
        request: Request,
        recipe: str = Query(DEFAULT_RECIPE, min_length=1, max_length=128),
        limit: int = Query(100, ge=1, le=1000),
        after_sequence: int = Query(0, ge=0, le=MAX_SEQUENCE),
    ) -> JSONResponse:
        principal = principal_of(request)
        page = await judge_tasks(
            replays_of(parts),
            recipe,
            after_sequence,
            limit,
            data=principal.can("data.read"),
            secrets=principal.can("secret_view"),
            with_key=principal.can("audit.read"),
        )
        return json_response(page)

    add(
        "/api/v1/observability/replays/trajectory",
        get_trajectory,
        "GET",
        "observability.read",
        response_model=Trajectory,
        responses=REPLAYS_OFF,
        summary="recipe-scoped session trajectory (query: session_id, recipe, limit, after_sequence)",
    )
    add(
        "/api/v1/observability/replays/dataset",
        get_dataset,
        "GET",
        "observability.read",
        response_model=DatasetManifest,
        responses=REPLAYS_OFF,
        summary="shadow comparison dataset manifest (query: recipe, limit, after_sequence)",
    )
    add(
        "/api/v1/observability/replays/dataset/judge-tasks",
        get_judge_tasks,
        "GET",
        "observability.read",
        "sensitive",
        response_model=JudgeTaskPage,
        responses=REPLAYS_OFF,
        summary="blinded pairwise judge tasks; the A/B key only with audit.read",
    )


async def read_metrics(parts: ReplayParts) -> MetricsReport:
    """Every replica's metrics summed; 503 when they are not collected or cannot be read."""
    if parts.metrics is None:
        raise feature_disabled("metrics are not collected (global.services.observability.metrics.enabled)")
    try:
        report: MetricsReport = await maybe_await(parts.metrics())
    except Exception as exc:  # the Observability replica restarting: a 503, never a 500
        raise unavailable(f"metrics could not be read: {type(exc).__name__}") from exc
    return report


def replays_of(parts: ReplayParts) -> ReplaySource:
    if parts.replays is None:
        raise feature_disabled("replay records are not kept in this process (no Observability deployment)")
    return parts.replays


async def submit_outcome(
    mgmt: Management,
    parts: ReplayParts,
    ratings: RatingStore | None,
    request: Request,
    idempotency_key: str | None,
) -> JSONResponse:
    """201 a new outcome, 200 its idempotent replay; the audit entry records the status (500 if none)."""
    status = 500
    try:
        body = await read_model(OutcomeIn, request)
        replay = await maybe_await(parts.replays.get(body.replay_id)) if parts.replays is not None else None
        if parts.replays is not None and replay is None:
            raise not_found(f"no replay record {body.replay_id!r}")
        try:
            record = parts.outcomes.submit(body, principal_of(request).name, idempotency_key)
        except IdempotencyConflict:
            raise MgmtError(
                409, "this Idempotency-Key was used with a different body", code="IDEMPOTENCY_CONFLICT"
            ) from None
        if replay is not None and not record.idempotent_replay:
            parts.accuracy.record(replay, body)  # svc_router_classification_accuracy
        if replay is not None and ratings is not None and not record.idempotent_replay:
            # An elo decision's ratings learn from it (app/pipeline/learning/elo_feedback.py); never fails.
            await asyncio.to_thread(rate_outcome, ratings, mgmt.config, replay, body)
        status = 200 if record.idempotent_replay else 201
        return json_response(record, status)
    except MgmtError as exc:
        status = exc.status
        raise
    finally:
        record_mutation(mgmt, "outcome.submit", request, status)
