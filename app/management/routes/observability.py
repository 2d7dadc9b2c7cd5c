"""The audit log's route (audit.read). The replay, outcome and classification-metrics routes
under /api/v1/observability are app/api/routes/replays.py."""

from __future__ import annotations

from fastapi import APIRouter, Query

from app.common.api_docs import MAX_SEQUENCE
from app.management.audit import AuditPage
from app.management.routes.common import Registrar
from app.management.service import Management


def audit_routes(mgmt: Management) -> APIRouter:
    router = APIRouter()

    async def audit(
        action: str | None = Query(None, max_length=128),
        limit: int = Query(100, ge=1, le=1000),
        after_sequence: int = Query(0, ge=0, le=MAX_SEQUENCE),
    ) -> AuditPage:
        return mgmt.audit.query(action=action, limit=limit, after_sequence=after_sequence)

    Registrar(router, mgmt).add(
        "/api/v1/observability/audit",
        audit,
        "GET",
        "audit.read",
        "sensitive",
        response_model=AuditPage,
        summary="audit entries (hash-chained)",
    )
    return router
