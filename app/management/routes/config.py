"""Configuration reads and dry runs (config.read): GET /api/v1/config, /schema, /versions,
/hash; POST /api/v1/config/validate and /plan (nothing is written)."""

from __future__ import annotations

from typing import Any, Literal

import yaml
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from app.common.api_docs import json_body
from app.common.mgmt_errors import not_found
from app.common.redaction import REDACTED, is_secret_key, redact, restore_redacted
from app.config.schema import config_json_schema
from app.management.auth import auth_issues
from app.management.documents import (
    CheckedDocument,
    DocumentRejected,
    check_document,
    diff,
    etag_of,
    merge_patch,
    parse_body,
    restart_required,
)
from app.management.routes.common import (
    Registrar,
    json_or_yaml_openapi,
    json_response,
    mgmt_errors,
    principal_of,
    read_model,
    reasons_of,
)
from app.management.schemas import (
    HashView,
    PlanRequest,
    PlanResponse,
    ValidateResponse,
    VersionEntry,
    VersionsResponse,
)
from app.management.service import Management


def config_read_routes(mgmt: Management) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def get_config(request: Request, format: Literal["json", "yaml"] = Query("json")) -> Response:
        document = mgmt.store.document
        if not principal_of(request).can("secret_view"):
            document = redact(document)
        headers = config_headers(mgmt)
        if format == "yaml":
            text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
            return Response(text, media_type="application/yaml", headers=headers)
        return JSONResponse(document, headers=headers)

    async def get_schema(
        mode: Literal["full", "progressive"] = Query("full"), section: str | None = Query(None, max_length=64)
    ) -> JSONResponse:
        return JSONResponse(schema_view(mode, section))

    async def versions(limit: int = Query(10, ge=1, le=100)) -> VersionsResponse:
        return versions_view(mgmt, limit)

    async def hash_view() -> JSONResponse:
        return json_response(
            HashView.model_validate(mgmt.hash_view()), headers={"ETag": mgmt.activation.etag}
        )

    add(
        "/api/v1/config",
        get_config,
        "GET",
        "config.read",
        "secret",
        summary="persisted configuration document (ETag for If-Match)",
        responses={
            200: {
                "description": "the document: JSON, or YAML with format=yaml",
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    "application/yaml": {"schema": {"type": "object"}},
                },
            }
        },
    )

    async def validate(request: Request) -> ValidateResponse:
        return validate_document(mgmt, await request.body(), principal_of(request).can("secret_view"))

    async def plan(request: Request) -> PlanResponse:
        body = await read_model(PlanRequest, request)
        return plan_change(mgmt, body, principal_of(request).can("secret_view"))

    add(
        "/api/v1/config/schema",
        get_schema,
        "GET",
        "config.read",
        summary="configuration JSON Schema",
        responses=mgmt_errors({404: "NOT_FOUND: unknown section"}),
    )
    add(
        "/api/v1/config/validate",
        validate,
        "POST",
        "config.read",
        "sensitive",
        response_model=ValidateResponse,
        summary="validate and normalize a document (no write)",
        openapi_extra=json_or_yaml_openapi(
            "configuration document (JSON or YAML); one that does not parse, is not a mapping "
            "or is empty is answered valid: false with its reasons",
            judged=True,
        ),
    )
    add(
        "/api/v1/config/plan",
        plan,
        "POST",
        "config.read",
        "sensitive",
        response_model=PlanResponse,
        summary="plan a merge or replace (no write)",
        openapi_extra=json_body(PlanRequest),
    )
    add(
        "/api/v1/config/versions",
        versions,
        "GET",
        "config.read",
        response_model=VersionsResponse,
        summary="persisted versions, newest first",
    )
    add(
        "/api/v1/config/hash",
        hash_view,
        "GET",
        "config.read",
        response_model=HashView,
        summary="source, generated and active hashes",
    )
    return router


def config_headers(mgmt: Management) -> dict[str, str]:
    active = mgmt.store.active
    headers = {"ETag": mgmt.activation.etag}
    if active is not None:
        headers["x-svc-config-version"] = str(active.config_version)
        headers["x-svc-config-hash"] = active.source_hash
    return headers


def schema_view(mode: Literal["full", "progressive"], section: str | None) -> dict[str, Any]:
    """The full schema, one section of it, or (progressive) each section's summary and link."""
    schema = config_json_schema()
    if section is not None:
        prop = schema.get("properties", {}).get(section)
        if prop is None:
            raise not_found(f"no configuration section {section!r}; sections: {sorted(schema['properties'])}")
        return {"$schema": schema["$schema"], "section": section, **prop, "$defs": schema["$defs"]}
    if mode == "progressive":
        summary = {}
        for name, prop in schema.get("properties", {}).items():
            summary[name] = {
                k: v for k, v in prop.items() if k in ("type", "title", "description", "default")
            }
            summary[name]["x-detail"] = f"/api/v1/config/schema?section={name}"
        return {k: v for k, v in schema.items() if k not in ("properties", "$defs")} | {"properties": summary}
    return schema


def versions_view(mgmt: Management, limit: int) -> VersionsResponse:
    active = mgmt.store.active
    records = mgmt.store.versions()
    entries = [
        VersionEntry(
            version=r.version,
            timestamp=r.timestamp,
            source=r.source,
            filename=r.filename,
            config_version=r.config_version,
            hash=r.hash,
            result=r.result,
            rollback_of=r.rollback_of,
            active=active is not None and r.version == active.version,
        )
        for r in records[:limit]
    ]
    return VersionsResponse(versions=entries, total=len(records), history_limit=mgmt.store.history_limit)


def checked(document: Any) -> CheckedDocument:
    """check_document plus the auth section's issues (both raise DocumentRejected)."""
    candidate = check_document(document)
    issues = auth_issues(candidate.config)
    if issues:
        raise DocumentRejected(issues)
    return candidate


def validate_document(mgmt: Management, raw: bytes, secrets: bool) -> ValidateResponse:
    """A body that does not parse or validate is an answer here (valid: false), not a 400."""
    try:
        candidate = checked(parse_body(raw))
    except DocumentRejected as exc:
        return ValidateResponse.model_validate({"valid": False, "reasons": reasons_of(exc.reasons)})
    restart = restart_required(mgmt.config, candidate.config)
    return ValidateResponse.model_validate(
        {
            "valid": True,
            "source_config_hash": candidate.source_hash,
            "generated_runtime_hash": candidate.runtime_hash,
            "document": candidate.document if secrets else redact(candidate.document),
            "warnings": candidate.warnings,
            "reasons": reasons_of(restart),
            "restart_required": bool(restart),
        }
    )


def plan_change(mgmt: Management, body: PlanRequest, secrets: bool) -> PlanResponse:
    current = mgmt.store.document
    submitted = restore_redacted(body.document, current)
    raw = merge_patch(current, submitted) if body.mode == "merge" else submitted
    etag = mgmt.activation.etag
    try:
        candidate = checked(raw)
    except DocumentRejected as exc:
        return PlanResponse.model_validate(
            {
                "mode": body.mode,
                "valid": False,
                "current_etag": etag,
                "candidate_etag": None,
                "changed": False,
                "reasons": reasons_of(exc.reasons),
            }
        )
    restart = restart_required(mgmt.config, candidate.config)
    changes = diff(current, candidate.document)
    if not secrets:
        changes = [_redact_change(c) for c in redact(changes)]
    return PlanResponse.model_validate(
        {
            "mode": body.mode,
            "valid": True,
            "current_etag": etag,
            "candidate_etag": etag_of(candidate.source_hash),
            "changed": bool(changes),
            "changes": changes,
            "restart_required": bool(restart),
            "reasons": reasons_of(restart),
            "warnings": candidate.warnings,
        }
    )


def _redact_change(change: dict[str, Any]) -> dict[str, Any]:
    path = str(change.get("path", ""))
    if is_secret_key(path.rsplit(".", 1)[-1]) or ".extra_headers." in f".{path}.":
        return {k: (REDACTED if k in ("before", "after") else v) for k, v in change.items()}
    return change
